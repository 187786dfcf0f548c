"""Building blocks of the store benchmarks: messages, directories, latency and memory probes.

Messages look like what a RocketMQ producer sends: a fixed-size body, one business key
(``KEYS``), a tag (``TAGS``), ``WAIT=true`` and a 32-hex-digit ``UNIQ_KEY`` that is unique per
message, laid out as ``MessageClientIDSetter`` does (host, pid and a per-process prefix, then a
counter).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from common import benchkit
from common.benchkit import (
    LatencyRecorder,
    MachineInfo,
    NullProgress,
    ProgressHook,
    rss_anon_bytes,
)
from common.message import MessageConst
from common.record import MessageRecord, record_length

DEFAULT_TOPIC = "BenchmarkTest"
DEFAULT_TAG = "TagA"
GIB = 1 << 30

__all__ = [
    "DEFAULT_TAG",
    "DEFAULT_TOPIC",
    "GIB",
    "DiskSpaceError",
    "LatencyRecorder",
    "MachineInfo",
    "MessageFactory",
    "NullProgress",
    "ProgressHook",
    "bench_dir",
    "check_disk_space",
    "estimate_store_bytes",
    "evict_from_page_cache",
    "machine_info",
    "rss_anon_bytes",
    "source_commit",
]


# -- messages ------------------------------------------------------------------------------
class MessageFactory:
    """Makes producer-like messages in batches; every message gets a fresh key and UNIQ_KEY."""

    def __init__(
        self,
        *,
        topic: str = DEFAULT_TOPIC,
        body_size: int = 128,
        queues: int = 4,
        tag: str = DEFAULT_TAG,
    ) -> None:
        self.topic = topic
        self.body = os.urandom(body_size)
        self.queues = queues
        self.tag = tag
        # host (127.0.0.1) + pid + 4 random bytes = 20 hex digits; a 12-digit counter follows
        self.uniq_prefix = f"7F000001{os.getpid() & 0xFFFF:04X}{os.urandom(4).hex().upper()}"
        self.next_index = 0
        self.next_call = 0

    def record_size(self) -> int:
        """Commitlog bytes of one message (the counter's width keeps it constant)."""
        msg = self.message(0, 0)
        props = "".join(f"{k}\x01{v}\x02" for k, v in msg.properties.items()).encode()
        return record_length(len(self.body), len(self.topic.encode()), len(props))

    def message(self, index: int, queue_id: int) -> MessageRecord:
        """Message number ``index``, for ``queue_id``."""
        return MessageRecord(
            self.topic,
            self.body,
            queue_id=queue_id,
            properties={
                MessageConst.KEYS: f"ORD{index:012d}",
                MessageConst.TAGS: self.tag,
                MessageConst.WAIT: "true",
                MessageConst.UNIQ_KEY: f"{self.uniq_prefix}{index:012X}",
            },
            born_timestamp=time.time_ns() // 1_000_000,
        )

    def batches(self, count: int, batch: int) -> list[list[MessageRecord]]:
        """The next ``count`` messages as put calls of ``batch`` messages.

        A batch goes to one queue (as a RocketMQ batch send does); successive calls go round the
        queues.
        """
        out: list[list[MessageRecord]] = []
        end = self.next_index + count
        i = self.next_index
        while i < end:
            n = min(batch, end - i)
            qid = self.next_call % self.queues
            out.append([self.message(j, qid) for j in range(i, i + n)])
            self.next_call += 1
            i += n
        self.next_index = end
        return out

    def chunks(self, count: int, batch: int, chunk: int) -> Iterator[list[list[MessageRecord]]]:
        """All ``count`` messages, made ``chunk`` messages at a time (generation is untimed)."""
        chunk = max(batch, chunk - chunk % batch)
        done = 0
        while done < count:
            n = min(chunk, count - done)
            yield self.batches(n, batch)
            done += n


# -- directories and disk ------------------------------------------------------------------
@contextlib.contextmanager
def bench_dir(parent: Path | None, label: str, *, keep: bool) -> Iterator[Path]:
    """A fresh directory for one workload's store, under ``parent`` (default ./bench-data).

    Removed afterwards unless ``keep``; an empty default parent is removed too.
    """
    default = parent is None
    base = Path.cwd() / "bench-data" if parent is None else parent
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=base))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
            if default:
                with contextlib.suppress(OSError):
                    base.rmdir()  # only when empty


class DiskSpaceError(RuntimeError):
    """Not enough free disk space for a workload."""


def estimate_store_bytes(
    messages: int,
    record_size: int,
    *,
    commitlog_file_size: int,
    queues: int,
    cq_file_size: int,
    index_file_bytes: int,
    index_entries_per_file: int,
    keys_per_message: int = 2,
) -> int:
    """Disk bytes a store holding ``messages`` will allocate (files are allocated whole)."""
    cl_files = -(-(messages * record_size + 8) // commitlog_file_size)
    per_queue = -(-messages // queues)
    cq_files = queues * max(1, -(-(per_queue * 20) // cq_file_size))
    index_files = max(1, -(-(messages * keys_per_message) // (index_entries_per_file - 1)))
    return cl_files * commitlog_file_size + cq_files * cq_file_size + index_files * index_file_bytes


def check_disk_space(path: Path, needed: int, *, margin: int = GIB) -> int:
    """Raise :class:`DiskSpaceError` unless ``needed`` + ``margin`` bytes are free; return free."""
    path.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(path).free
    if free < needed + margin:
        raise DiskSpaceError(
            f"{path}: {free / GIB:.1f} GiB free, the workload needs about "
            f"{(needed + margin) / GIB:.1f} GiB"
        )
    return free


def evict_from_page_cache(root: Path) -> int:
    """Sync every file under ``root`` and drop it from the page cache; return bytes evicted."""
    total = 0
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            size = os.fstat(fd).st_size
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += size
        finally:
            os.close(fd)
    return total


# -- the machine -----------------------------------------------------------------------------
STORE_SOURCES = ("store", "common")
"""The code a store figure measures (for the commit in :class:`MachineInfo`)."""
STORE_BENCH_EXCLUDE = ("store/bench",)


def machine_info() -> MachineInfo:
    """This machine, with the commit of store/ and common/ (store/bench does not count)."""
    return MachineInfo.current(STORE_SOURCES, STORE_BENCH_EXCLUDE)


def source_commit() -> str:
    """The git commit of the code measured; ``-dirty`` when store/ or common/ has local changes.

    The benchmark's own package (store/bench) does not count.
    """
    return benchkit.source_commit(STORE_SOURCES, STORE_BENCH_EXCLUDE)
