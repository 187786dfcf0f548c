"""Real faults a test can put into a running store (no stand-ins: the OS reports them)."""

from __future__ import annotations

import os

from store import MessageStore


def break_commitlog_flush(store: MessageStore) -> None:
    """Make the next commitlog flush fail for real: the writable file's descriptor now names
    a pipe, on which ``fdatasync`` fails with EINVAL (the mapping is unaffected, and the
    descriptor number stays taken, so no other file can get it)."""
    read_end, write_end = os.pipe()
    os.dup2(read_end, store.commitlog.queue.files[-1].fd)
    os.close(read_end)
    os.close(write_end)
