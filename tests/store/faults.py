"""Real faults a test can put into a running store (no stand-ins: the OS reports them)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from store import MessageStore


def break_commitlog_flush(store: MessageStore) -> None:
    """Make the next commitlog flush fail for real: the writable file's descriptor now names
    a pipe, on which ``fdatasync`` fails with EINVAL (the mapping is unaffected, and the
    descriptor number stays taken, so no other file can get it)."""
    read_end, write_end = os.pipe()
    os.dup2(read_end, store.commitlog.queue.files[-1].fd)
    os.close(read_end)
    os.close(write_end)


def break_consume_queue_flush(store: MessageStore, topic: str, queue_id: int) -> None:
    """As :func:`break_commitlog_flush`, for the writable file of one consume queue."""
    cq = store.find_consume_queue(topic, queue_id)
    assert cq is not None
    read_end, write_end = os.pipe()
    os.dup2(read_end, cq.queue.files[-1].fd)
    os.close(read_end)
    os.close(write_end)


def stall_commitlog_flushes(
    store: MessageStore, patch: Callable[[Any, str, Any], None], *, limit_s: float = 30.0
) -> threading.Event:
    """Make ``fdatasync`` of the store's commitlog files hang, as a disk that stopped
    answering would, until the returned event is set (or ``limit_s`` passed); other files
    flush as usual. ``patch`` is ``monkeypatch.setattr``, so the stall goes with the test."""
    fds = {f.fd for f in store.commitlog.queue.files}
    return stall_fdatasync(fds, patch, limit_s=limit_s).released


@dataclass
class Stall:
    """A stalled ``fdatasync``: ``entered`` once a call hangs, ``released`` to let it go."""

    entered: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)


def stall_fdatasync(
    fds: set[int], patch: Callable[[Any, str, Any], None], *, limit_s: float = 30.0
) -> Stall:
    """Make ``fdatasync`` of the descriptors ``fds`` hang until released (at most ``limit_s``)."""
    stall = Stall()
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if fd in fds:
            stall.entered.set()
            stall.released.wait(limit_s)
        real(fd)

    patch(os, "fdatasync", fdatasync)
    return stall
