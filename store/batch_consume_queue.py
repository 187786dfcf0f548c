"""BatchConsumeQueue: the consume queue of a BatchCQ topic (RocketMQ's ``BatchConsumeQueue``).

Unit, 46 bytes, big-endian: ``commitLogOffset i8 | size i4 | tagsCode i8 | storeTime i8 |
msgBaseOffset i8 | batchSize i2 | compactedOffset i4 | reserved i4`` (the last two written as
0). One unit per commitlog record: an inner-batch record (``INNER_BATCH_FLAG``, property
``INNER_NUM``) holds the queue offsets ``msgBaseOffset .. msgBaseOffset + batchSize - 1``, any
other record is a batch of one. Queue offsets count messages, so the unit holding an offset is
found by binary search over msgBaseOffset: units are written in queue order, each starting
where the one before ended (recovery keeps only such a chain). A queue may start at any
offset: no filler units.

Files hold 300,000 units by default (``mapperFileSizeBatchConsumeQueue``), are named by their
first byte offset and live under ``batchconsumequeue/<topic>/<queueId>/``.

The pure helpers (:func:`pack_unit`, :func:`unpack_unit`, :func:`find_unit_index`,
:func:`find_unit_index_by_time`, :func:`count_valid_units`, :func:`inner_batch_size`) work on
any buffer and do no I/O.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NamedTuple

import numpy as np

from common.digits import parse_uint
from common.message import MessageConst, MessageSysFlag
from common.topic_attributes import CQType
from store.consume_queue import ConsumeQueueGapError, QueueFiles
from store.dispatch_request import DispatchRequest
from store.mapped_file import MappedFile

BCQ_STORE_UNIT_SIZE: Final = 46
BCQ_UNIT: Final = struct.Struct(">qiqqqhii")
MSG_STORE_TIME_OFFSET_INDEX: Final = 20
MSG_BASE_OFFSET_INDEX: Final = 28
MAX_BATCH_SIZE: Final = 0x7FFF
"""The largest ``batchSize`` a unit can hold (a signed 16-bit field)."""
UNITS_PER_FILE_DEFAULT: Final = 300_000

_LONG = struct.Struct(">q")
_UNIT_DTYPE = np.dtype(
    {
        "names": ["phys", "size", "code", "time", "base", "batch"],
        "formats": [">i8", ">i4", ">i8", ">i8", ">i8", ">i2"],
        "offsets": [0, 8, 12, 20, 28, 36],
        "itemsize": BCQ_STORE_UNIT_SIZE,
    }
)
_INNER_BATCH = MessageSysFlag.INNER_BATCH_FLAG
_INNER_NUM = MessageConst.PROPERTY_INNER_NUM


class BatchUnit(NamedTuple):
    """One unit of a batch consume queue."""

    phys: int
    size: int
    tags_code: int
    store_time: int
    base: int
    """Queue offset of the batch's first message (msgBaseOffset)."""
    batch_size: int

    @property
    def end(self) -> int:
        """Queue offset just past the batch."""
        return self.base + self.batch_size


# -- pure helpers ------------------------------------------------------------------------------
def pack_unit(
    phys: int, size: int, tags_code: int, store_time: int, base: int, batch_size: int
) -> bytes:
    """The 46 bytes of one unit (compactedOffset and reserved 0)."""
    return BCQ_UNIT.pack(phys, size, tags_code, store_time, base, batch_size, 0, 0)


def unpack_unit(buf: bytes | mmap.mmap | memoryview, index: int) -> BatchUnit:
    """The ``index``-th unit of ``buf``."""
    phys, size, code, stamp, base, batch, _, _ = BCQ_UNIT.unpack_from(
        buf, index * BCQ_STORE_UNIT_SIZE
    )
    return BatchUnit(phys, size, code, stamp, base, batch)


def find_unit_index(buf: bytes | mmap.mmap | memoryview, lo: int, hi: int, offset: int) -> int:
    """Index in ``[lo, hi)`` of the last unit whose msgBaseOffset is ``<= offset`` (the unit
    holding ``offset`` when it lies in the queue); ``lo - 1`` when every base is larger.

    Units are sorted by msgBaseOffset: a binary search, ``log2(hi - lo)`` reads.
    """
    unpack = _LONG.unpack_from
    first = lo
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(buf, mid * BCQ_STORE_UNIT_SIZE + MSG_BASE_OFFSET_INDEX)[0] <= offset:
            lo = mid + 1
        else:
            hi = mid
    return max(lo, first) - 1


def find_unit_index_by_time(
    buf: bytes | mmap.mmap | memoryview, lo: int, hi: int, timestamp: int
) -> int:
    """Index in ``[lo, hi)`` of the first unit whose storeTime is ``>= timestamp``; ``hi``
    when none is (RocketMQ's ``binarySearchRight`` with ``BoundaryType.LOWER``)."""
    unpack = _LONG.unpack_from
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(buf, mid * BCQ_STORE_UNIT_SIZE + MSG_STORE_TIME_OFFSET_INDEX)[0] < timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo


def count_valid_units(
    buf: bytes | mmap.mmap | memoryview, count: int, expected_base: int | None = None
) -> int:
    """How many of the first ``count`` units of ``buf`` are valid before the first one that
    is not.

    Valid: ``commitLogOffset >= 0``, ``size > 0``, ``msgBaseOffset >= 0``, ``batchSize > 0``
    (RocketMQ's check in ``recover``), and the unit starts where the one before ended (or at
    ``expected_base`` for the first unit, when given): after a power cut, pages written back
    out of order can leave old valid-looking units behind a hole, and those break the chain.
    Checked by numpy, one pass per column.
    """
    if count <= 0:
        return 0
    units = np.frombuffer(buf, dtype=_UNIT_DTYPE, count=count)
    try:
        base = units["base"].astype(np.int64)
        batch = units["batch"].astype(np.int64)
        ok = (units["phys"] >= 0) & (units["size"] > 0) & (base >= 0) & (batch > 0)
    finally:
        del units  # no view may outlive the call: an exported mmap cannot be closed
    starts = np.empty_like(base)
    starts[0] = base[0] if expected_base is None else expected_base
    starts[1:] = base[:-1] + batch[:-1]
    ok &= base == starts
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else count


def inner_batch_size(properties: dict[str, str]) -> int | None:
    """The ``INNER_NUM`` of an inner-batch record's properties (1 to :data:`MAX_BATCH_SIZE`),
    or None when missing or not such a number."""
    num = parse_uint(properties.get(_INNER_NUM), max_digits=5)
    return num if num is not None and 0 < num <= MAX_BATCH_SIZE else None


def record_batch_size(sys_flag: int, properties: dict[str, str]) -> int:
    """Messages a record holds in its queue: its INNER_NUM if it is an inner batch, else 1."""
    if sys_flag & _INNER_BATCH:
        return inner_batch_size(properties) or 1
    return 1


def effective_batch_consume_queue_file_size(configured: int) -> int:
    """``configured`` rounded up to a whole number of 46-byte units, so no unit straddles two
    files."""
    return -(-configured // BCQ_STORE_UNIT_SIZE) * BCQ_STORE_UNIT_SIZE


# -- the queue ---------------------------------------------------------------------------------
class BatchConsumeQueue(QueueFiles):
    """One topic-queue's batch consume queue; see the module docstring for the layout.

    Offsets (``min_offset``, ``max_offset``, the ``logical`` arguments) are message offsets;
    ``min_logic_offset`` is the byte offset of the first readable unit.
    """

    cq_type: Final = CQType.BATCH_CQ

    def __init__(self, root: Path, topic: str, queue_id: int, file_size: int) -> None:
        super().__init__(root, topic, queue_id, file_size)
        self._min_offset = 0
        self._max_offset = 0

    # -- offsets ---------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """Queue offset after the last batch (last base + its batch size); 0 when empty."""
        return self._max_offset

    @property
    def min_offset(self) -> int:
        """Base offset of the first readable unit (``max_offset`` when none is readable)."""
        return self._min_offset

    def _has_units(self) -> bool:
        return self.queue.max_offset > max(self.queue.min_offset, 0) and bool(self.queue.files)

    def _unit_at_byte(self, pos: int) -> BatchUnit | None:
        mf = self.queue.find(pos)
        if mf is None or pos - mf.file_from_offset + BCQ_STORE_UNIT_SIZE > mf.wrote_position:
            return None
        return unpack_unit(mf.mm, (pos - mf.file_from_offset) // BCQ_STORE_UNIT_SIZE)

    def _last_unit(self) -> BatchUnit | None:
        end = self.queue.max_offset
        return self._unit_at_byte(end - BCQ_STORE_UNIT_SIZE) if end else None

    def _refresh_offsets(self) -> None:
        """Recompute the cached offsets and high-water mark from the files."""
        last = self._last_unit()
        self._max_offset = last.end if last is not None else 0
        self.max_physic_offset = last.phys + last.size if last is not None else -1
        self._refresh_min_offset()

    def _refresh_min_offset(self) -> None:
        first = self._unit_at_byte(max(self.min_logic_offset, self.queue.min_offset))
        self._min_offset = first.base if first is not None else self._max_offset

    # -- load and recover ------------------------------------------------------------------
    def load(self) -> None:
        """Map the files on disk (positions are set by :meth:`recover`)."""
        self.contiguous = self.queue.load()

    def recover(self, flushed_below: int = 0) -> None:
        """Keep the valid chain of units (see :func:`count_valid_units`), cut what follows.

        Files up to the last one whose first unit points below ``flushed_below`` (the
        checkpoint's dispatched offset) are trusted; from that one on every unit is checked.
        """
        files = self.queue.files
        if not files:
            return
        start = self._last_flushed_file(flushed_below)
        per_file = self.file_size // BCQ_STORE_UNIT_SIZE
        expected: int | None = None
        end_offset = files[start].file_from_offset
        for mf in files[start:]:
            valid = count_valid_units(mf.mm, per_file, expected)
            end_offset = mf.file_from_offset + valid * BCQ_STORE_UNIT_SIZE
            if valid < per_file:
                break
            expected = unpack_unit(mf.mm, valid - 1).end
        self.queue.truncate_dirty(end_offset)
        self.min_logic_offset = self.queue.min_offset
        self._refresh_offsets()

    def _last_flushed_file(self, flushed_below: int) -> int:
        files = self.queue.files
        for i in range(len(files) - 1, 0, -1):
            first = unpack_unit(files[i].mm, 0)
            if 0 <= first.phys < flushed_below and first.size > 0 and first.batch_size > 0:
                return i
        return 0

    # -- writes ----------------------------------------------------------------------------
    def put(self, runs: Sequence[DispatchRequest], *, allow_gap: bool = False) -> None:
        """Append one unit per record of ``runs`` (commitlog order), skipping those present.

        A record starting past the end of a queue with units raises
        :class:`ConsumeQueueGapError` (after writing the units before it) unless
        ``allow_gap``, which restarts the queue there; an empty queue starts anywhere.
        """
        expected = self._max_offset
        has_units = self._has_units()
        was_empty = not has_units
        parts: list[bytes] = []
        end_phys = -1
        for run in runs:
            inner = run.sys_flag & _INNER_BATCH
            phys, base, stamp = run.phys_offset, run.queue_offset, run.store_timestamp
            for size, code, props in zip(run.sizes, run.tags_codes, run.properties, strict=True):
                batch = (inner_batch_size(props) or 1) if inner else 1
                if has_units and base != expected:
                    if base < expected:  # already present
                        phys += size
                        base += batch
                        continue
                    self._write_units(parts, expected, end_phys)
                    parts = []
                    if not allow_gap:
                        raise ConsumeQueueGapError(self.topic, self.queue_id, expected, base)
                    self._restart()
                    was_empty = True
                parts.append(BCQ_UNIT.pack(phys, size, code, stamp, base, batch, 0, 0))
                has_units = True
                phys += size
                base += batch
                expected, end_phys = base, phys
        self._write_units(parts, expected, end_phys)
        if was_empty and parts:
            self._refresh_min_offset()

    def _write_units(self, parts: list[bytes], max_offset: int, end_phys: int) -> None:
        if not parts:
            return
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        pos = 0
        while pos < len(data):
            mf = self.queue.writable_file()
            n = min(mf.free_space, len(data) - pos)
            mf.append(data[pos : pos + n])
            pos += n
        self._max_offset = max_offset
        self.max_physic_offset = end_phys

    def _restart(self) -> None:
        """Drop every unit: the next one starts the queue afresh (a hole in recovery)."""
        self.queue.destroy()
        self.min_logic_offset = 0
        self._min_offset = self._max_offset = 0
        self.max_physic_offset = -1

    # -- reads -----------------------------------------------------------------------------
    def _first_readable_index(self, mf: MappedFile) -> int:
        lo = max(self.min_logic_offset, self.queue.min_offset) - mf.file_from_offset
        return max(0, lo // BCQ_STORE_UNIT_SIZE)

    def locate(self, logical: int) -> tuple[MappedFile, int] | None:
        """The file and unit index of the unit holding message offset ``logical``, or None
        when no readable unit holds it."""
        if not self._min_offset <= logical < self._max_offset:
            return None
        for mf in reversed(self.queue.files):
            count = mf.wrote_position // BCQ_STORE_UNIT_SIZE
            lo = self._first_readable_index(mf)
            if lo >= count:
                continue
            i = find_unit_index(mf.mm, lo, count, logical)
            if i >= lo:
                return mf, i
        return None

    def read_batch_units(self, logical: int, max_count: int) -> list[BatchUnit] | None:
        """Units from the one holding ``logical`` on, at most ``max_count`` and never past a
        file's end; None when no readable unit holds ``logical``."""
        found = self.locate(logical)
        if found is None:
            return None
        mf, i = found
        count = min(mf.wrote_position // BCQ_STORE_UNIT_SIZE, i + max(1, max_count))
        raw = mf.read(i * BCQ_STORE_UNIT_SIZE, (count - i) * BCQ_STORE_UNIT_SIZE)
        return [
            BatchUnit(phys, size, code, stamp, base, batch)
            for phys, size, code, stamp, base, batch, _, _ in BCQ_UNIT.iter_unpack(raw)
        ]

    def unit_at(self, logical: int) -> tuple[int, int, int] | None:
        """``(commitlog offset, size, tags code)`` of the unit holding ``logical``, or None."""
        units = self.read_batch_units(logical, 1)
        if not units:
            return None
        unit = units[0]
        return unit.phys, unit.size, unit.tags_code

    def batch_unit_at(self, logical: int) -> BatchUnit | None:
        """The unit holding ``logical``, or None."""
        units = self.read_batch_units(logical, 1)
        return units[0] if units else None

    def read_units(self, logical: int, max_count: int) -> bytes | None:
        """The units from the one holding ``logical`` in the 20-byte form of a simple consume
        queue (``commitlog offset | size | tags code``), for callers that only need those."""
        units = self.read_batch_units(logical, max_count)
        if units is None:
            return None
        return b"".join(struct.pack(">qiq", u.phys, u.size, u.tags_code) for u in units)

    def offset_by_time(self, timestamp: int) -> int:
        """Base offset of the first readable unit stored at or after ``timestamp``;
        ``max_offset`` when every one is older (RocketMQ's ``getOffsetInQueueByTime``)."""
        for mf in self.queue.files:
            count = mf.wrote_position // BCQ_STORE_UNIT_SIZE
            lo = self._first_readable_index(mf)
            if lo >= count:
                continue
            i = find_unit_index_by_time(mf.mm, lo, count, timestamp)
            if i < count:
                return unpack_unit(mf.mm, i).base
        return self._max_offset

    def roll_next_file(self, logical: int) -> int:
        """Where a reader goes when the unit of ``logical`` is gone: the readable minimum."""
        return max(logical, self._min_offset)

    # -- maintenance -----------------------------------------------------------------------
    def truncate_dirty(self, phys_offset: int) -> None:
        """Cut units pointing at or past ``phys_offset`` (RocketMQ's
        ``truncateDirtyLogicFiles``); durable on return."""
        while files := self.queue.files:
            last = files[-1]
            if last.wrote_position < BCQ_STORE_UNIT_SIZE:
                if len(files) == 1:
                    break
                self.queue.delete_last_file()
                continue
            if unpack_unit(last.mm, 0).phys >= phys_offset and len(files) > 1:
                self.queue.delete_last_file()
                continue
            keep = self._units_below(last, phys_offset)
            self.queue.truncate_dirty(last.file_from_offset + keep * BCQ_STORE_UNIT_SIZE)
            break
        self.queue.sync_deletions()
        self._refresh_offsets()

    @staticmethod
    def _units_below(mf: MappedFile, phys_offset: int) -> int:
        """Units of ``mf`` pointing below ``phys_offset`` (units are in commitlog order)."""
        lo, hi = 0, mf.wrote_position // BCQ_STORE_UNIT_SIZE
        unpack = _LONG.unpack_from
        while lo < hi:
            mid = (lo + hi) // 2
            if unpack(mf.mm, mid * BCQ_STORE_UNIT_SIZE)[0] < phys_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete leading files whose every record lies below ``commitlog_min_offset`` (never
        the last file); the deletions are durable on return."""

        def expired(mf: MappedFile) -> bool:
            count = mf.wrote_position // BCQ_STORE_UNIT_SIZE
            if not count:
                return False
            last = unpack_unit(mf.mm, count - 1)
            return last.phys + last.size <= commitlog_min_offset

        try:
            deleted = self.queue.delete_first_files(expired, 1 << 30)
        finally:
            self.queue.sync_deletions()
        self.correct_min_offset(commitlog_min_offset)
        return deleted

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Move the readable minimum to the first unit whose record is at or past
        ``commitlog_min_offset`` (the end of the queue when none is)."""
        for mf in self.queue.files:
            count = mf.wrote_position // BCQ_STORE_UNIT_SIZE
            lo = self._first_readable_index(mf)
            if lo >= count or unpack_unit(mf.mm, count - 1).phys < commitlog_min_offset:
                continue
            first = self._units_below(mf, commitlog_min_offset)
            self.min_logic_offset = mf.file_from_offset + max(lo, first) * BCQ_STORE_UNIT_SIZE
            self._refresh_min_offset()
            return
        self.min_logic_offset = max(self.min_logic_offset, self.queue.max_offset)
        self._refresh_min_offset()

    def last_unit(self) -> tuple[int, int, int, int] | None:
        """``(commitlog offset, size, tags code, queue offset of its record)`` of the last
        readable unit, or None (what recovery checks against the record)."""
        if self._min_offset >= self._max_offset:
            return None
        last = self._last_unit()
        return None if last is None else (last.phys, last.size, last.tags_code, last.base)

    def drop_last_unit(self, flushed_below: int) -> None:
        """Cut the last unit (it disagrees with its record) and recover what is left."""
        self.queue.truncate_dirty(self.queue.max_offset - BCQ_STORE_UNIT_SIZE)
        self.recover(flushed_below)

    def destroy(self) -> None:
        """Delete every file."""
        super().destroy()
        self._min_offset = self._max_offset = 0
