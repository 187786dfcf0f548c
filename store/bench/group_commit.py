"""``mqbench store group-commit``: concurrent SYNC_FLUSH puts sharing flushes.

N trio tasks each put one message at a time into a ``SYNC_FLUSH`` store through
:class:`~store.services.StoreServices` (a put returns only once a flush covers it, as a broker's
send handler waits) for a fixed time. The report gives puts/s, flushes/s, puts per flush and
the time of one flush round (timed inside the group-commit thread: the ``fdatasync`` and
handing its offset back to the event loop), against the disk's own rate
of ``write`` + ``fsync`` of a small record measured in the same directory just before: group
commit is what lets puts outrun it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from store.bench.store_bench import BenchError, store_config
from store.bench.workload import MessageFactory, NullProgress, ProgressHook
from store.config import FlushDiskType
from store.message_store import MessageStore
from store.services import StoreServices
from store.status import PutResult, PutStatus

FSYNC_PROBE_S = 2.0
"""How long the disk's fsync-per-write rate is measured for, by default."""


def fsync_per_write_rate(directory: Path, seconds: float = FSYNC_PROBE_S, size: int = 128) -> float:
    """Appends of ``size`` bytes, each followed by ``fsync``, per second, in ``directory``."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        record = os.urandom(size)
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline or count == 0:
            os.write(fd, record)
            os.fsync(fd)
            count += 1
        return count / (now - start)
    finally:
        os.close(fd)
        path.unlink()


@dataclass(slots=True)
class GroupCommitResult:
    """One run: ``writers`` tasks putting for ``seconds``."""

    writers: int
    seconds: float = 0.0
    puts: int = 0
    flushes: int = 0
    flush_round_seconds: float = 0.0
    """Time of the flushes, as the group-commit thread times them (``fdatasync`` and the
    hand-over of the flushed offset; not the wake-up of the waiting put)."""
    fsync_per_write_s: float = 0.0

    @property
    def puts_per_s(self) -> float:
        """Acknowledged (flushed) puts per second."""
        return self.puts / self.seconds if self.seconds else 0.0

    @property
    def puts_per_flush(self) -> float:
        """Puts one flush covered, on average."""
        return self.puts / self.flushes if self.flushes else 0.0

    @property
    def flush_round_us(self) -> float:
        """Mean time of one flush round, µs."""
        return self.flush_round_seconds / self.flushes * 1e6 if self.flushes else 0.0

    @property
    def times_fsync_rate(self) -> float:
        """Puts per second over the disk's fsync-per-write rate."""
        return self.puts_per_s / self.fsync_per_write_s if self.fsync_per_write_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "workload": "group-commit",
            "writers": self.writers,
            "seconds": round(self.seconds, 3),
            "puts": self.puts,
            "flushes": self.flushes,
            "puts_per_s": round(self.puts_per_s),
            "flushes_per_s": round(self.flushes / self.seconds) if self.seconds else 0,
            "puts_per_flush": round(self.puts_per_flush, 2),
            "flush_round_us": round(self.flush_round_us),
            "fsync_per_write_s": round(self.fsync_per_write_s),
            "times_fsync_rate": round(self.times_fsync_rate, 2),
        }


def run_group_commit(
    root: Path,
    writers: int,
    duration_s: float,
    *,
    body_size: int = 128,
    commitlog_file_size: int,
    fsync_probe_s: float = FSYNC_PROBE_S,
    progress: ProgressHook | None = None,
) -> GroupCommitResult:
    """Measure the disk's fsync rate in ``root``, then run ``writers`` SYNC_FLUSH putters."""
    progress = progress or NullProgress()
    rate = fsync_per_write_rate(root, fsync_probe_s)
    result = GroupCommitResult(writers, fsync_per_write_s=rate)
    cfg = store_config(root, commitlog_file_size)
    cfg.flush_disk_type = FlushDiskType.SYNC_FLUSH
    store = MessageStore(cfg).open()
    try:
        progress.phase(f"group commit, {writers} writers", writers)
        trio.run(_drive, store, result, duration_s, body_size)
        progress.advance(writers)
    finally:
        store.close()
    if result.puts == 0 or result.flushes == 0:
        raise BenchError(f"no put was flushed in {duration_s} s")
    return result


async def _drive(
    store: MessageStore, result: GroupCommitResult, duration_s: float, body_size: int
) -> None:
    services = StoreServices(store)
    factory = MessageFactory(body_size=body_size)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        flushes_before = services.commitlog_flushes
        flush_time_before = services.commitlog_flush_seconds
        start = trio.current_time()
        deadline = start + duration_s

        async def writer(queue_id: int) -> None:
            while trio.current_time() < deadline:
                msg = factory.message(factory.next_index, queue_id)
                factory.next_index += 1
                put = services.put_messages_now([msg])
                done = put if isinstance(put, PutResult) else await put
                if done.status is not PutStatus.PUT_OK:
                    raise BenchError(f"put failed: {done.status.name} {done.remark}")
                result.puts += 1

        async with trio.open_nursery() as putters:
            for i in range(result.writers):
                putters.start_soon(writer, i % factory.queues)
        result.seconds = trio.current_time() - start
        result.flushes = services.commitlog_flushes - flushes_before
        result.flush_round_seconds = services.commitlog_flush_seconds - flush_time_before
        nursery.cancel_scope.cancel()
