"""ConsumeQueue: per (topic, queue) array of 20-byte units pointing into the commitlog.

Unit: ``commitlog offset i8 | size i4 | tags code i8`` (big-endian). Entry ``n`` lives at byte
``n * 20``; files hold 300,000 units by default and are named by their first byte offset.
A unit with ``offset >= 0 and size > 0`` is valid; ``(0, 2**31-1, 0)`` is RocketMQ's pre-blank
filler for a queue that starts past zero.
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path
from typing import Final

from common.topic_attributes import CQType
from store.dispatch_request import DispatchRequest
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue

CQ_STORE_UNIT_SIZE = 20
UNIT = struct.Struct(">qiq")
BLANK_UNIT_SIZE = 0x7FFFFFFF
BLANK_UNIT = UNIT.pack(0, BLANK_UNIT_SIZE, 0)


@functools.lru_cache(maxsize=256)
def _units_struct(count: int) -> struct.Struct:
    """``count`` units in one struct (one pack call per run instead of one per record)."""
    return struct.Struct(">" + "qiq" * count)


def _pack_units(run: DispatchRequest, skip: int) -> bytes:
    """The units of ``run``'s records from the ``skip``-th on (a run of one is packed by the
    caller, without this call)."""
    sizes, codes = run.sizes, run.tags_codes
    n = len(sizes)
    phys = list(accumulate(sizes[:-1], initial=run.phys_offset))
    if skip:
        sizes, codes, phys = sizes[skip:], codes[skip:], phys[skip:]
        n -= skip
    units: list[int] = [0] * (3 * n)  # (phys, size, code) per record, by slice assignment
    units[0::3] = phys
    units[1::3] = sizes
    units[2::3] = codes
    return _units_struct(n).pack(*units)


_SIGN_CLEAR = bytes(int(b < 0x80) for b in range(256))  # 1 where a byte's top bit is clear


def count_valid_units(buf: bytes | mmap.mmap, count: int) -> int:
    """How many of the first ``count`` units of ``buf`` are valid before the first invalid one.

    Valid means ``offset >= 0 and size > 0``. Each check runs at C speed over one byte column
    (the sign bytes of offset and size, and the four size bytes OR-ed together), so a whole
    file costs milliseconds.
    """
    end = count * CQ_STORE_UNIT_SIZE
    if count <= 0:
        return 0
    step = CQ_STORE_UNIT_SIZE
    size_bytes = [buf[i:end:step] for i in range(8, 12)]
    nonzero = 0
    for column in size_bytes:
        nonzero |= int.from_bytes(column, "big")
    firsts = (
        buf[0:end:step].translate(_SIGN_CLEAR).find(0),  # offset < 0
        size_bytes[0].translate(_SIGN_CLEAR).find(0),  # size < 0
        nonzero.to_bytes(count, "big").find(0),  # size == 0
    )
    return min((f for f in firsts if f >= 0), default=count)


class ConsumeQueueGapError(Exception):
    """A dispatch would leave a hole in a non-empty queue; carries what the caller needs."""

    def __init__(self, topic: str, queue_id: int, expected: int, got: int) -> None:
        super().__init__(f"{topic}/{queue_id}: next offset {expected}, dispatch brought {got}")
        self.topic = topic
        self.queue_id = queue_id
        self.expected = expected
        self.got = got


class QueueFiles:
    """What both kinds of consume queue share: their directory of mapped files under
    ``root/topic/queueId``, the byte offset of the first readable unit
    (``min_logic_offset``), the end of the last unit's record (``max_physic_offset``), and
    their life cycle (flush, close, destroy)."""

    def __init__(self, root: Path, topic: str, queue_id: int, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.queue = MappedFileQueue(Path(root) / topic / str(queue_id), file_size)
        self.min_logic_offset = 0  # in bytes
        self.max_physic_offset = -1  # offset + size of the last unit's record
        self.contiguous = True
        self._destroyed = False

    def flush(self) -> int:
        """Flush dirty files."""
        return self.queue.flush()

    def close(self) -> None:
        """Unmap every file."""
        self.queue.close()

    @property
    def destroyed(self) -> bool:
        """True after :meth:`destroy`."""
        return self._destroyed

    def destroy(self) -> None:
        """Delete every file."""
        self._destroyed = True
        self.queue.destroy()
        self.min_logic_offset = 0
        self.max_physic_offset = -1


class ConsumeQueue(QueueFiles):
    """One topic-queue's consume queue; see the module docstring for the layout."""

    cq_type: Final = CQType.SIMPLE_CQ

    # -- offsets ---------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """Number of units written = the next logical offset."""
        return self.queue.max_offset // CQ_STORE_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        """First logical offset still readable."""
        return max(self.min_logic_offset, self.queue.min_offset) // CQ_STORE_UNIT_SIZE

    # -- load and recover ------------------------------------------------------------------
    def load(self) -> None:
        """Map the files on disk (positions are set by :meth:`recover`)."""
        self.contiguous = self.queue.load()

    def recover(self, flushed_below: int = 0) -> None:
        """Cut the queue at its first invalid unit, and compute the physical high-water mark.

        Units pointing below ``flushed_below`` (the checkpoint's dispatched offset) were
        flushed: files up to the last one that starts with such a unit are trusted, and from
        that one on every unit is checked. After a power cut, write-back may have saved later
        pages, or later files, without earlier ones; nothing after the first hole is kept.
        """
        files = self.queue.files
        if not files:
            return
        start = self._last_flushed_file(flushed_below)
        end_offset = files[start].file_from_offset
        for mf in files[start:]:
            valid = self._valid_prefix(mf.mm, mf.file_size)
            end_offset = mf.file_from_offset + valid
            if valid < mf.file_size:
                break
        self.queue.truncate_dirty(end_offset)
        # from the last unit kept, which may lie in a file before those looked at (when they
        # all came back empty from a power cut)
        self._recompute_max_physic()
        self._recover_min_logic_offset()

    def _last_flushed_file(self, flushed_below: int) -> int:
        """Index of the last file whose first unit points below ``flushed_below`` (else 0)."""
        files = self.queue.files
        for i in range(len(files) - 1, 0, -1):
            off, size, _ = UNIT.unpack_from(files[i].mm, 0)
            if 0 <= off < flushed_below and 0 < size != BLANK_UNIT_SIZE:
                return i
        return 0

    @staticmethod
    def _valid_prefix(mm: mmap.mmap, file_size: int) -> int:
        """Bytes of valid units at the start of a file, up to the first invalid one.

        Every unit is looked at, not a binary search: a power cut can leave pages written back
        out of order, so valid units may follow a hole, and those must not be kept.
        """
        return count_valid_units(mm, file_size // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    def _recover_min_logic_offset(self) -> None:
        first = self.queue.files[0] if self.queue.files else None
        if first is None:
            return
        pos = 0
        while pos < first.wrote_position:
            _, size, _ = UNIT.unpack_from(first.mm, pos)
            if size != BLANK_UNIT_SIZE:
                break
            pos += CQ_STORE_UNIT_SIZE
        self.min_logic_offset = first.file_from_offset + pos

    # -- writes ----------------------------------------------------------------------------
    def put(self, runs: Sequence[DispatchRequest], *, allow_gap: bool = False) -> None:
        """Append units for ``runs`` (by queue offset), skipping those already present.

        A run starting beyond the end starts an empty queue there (pre-blank filled); in a
        non-empty queue it raises :class:`ConsumeQueueGapError` (after writing the runs before
        it) unless ``allow_gap``, which restarts the queue at that offset.
        """
        expected = self.max_offset
        parts: list[bytes] = []
        last: DispatchRequest | None = None
        for run in runs:
            first = run.queue_offset
            if first + len(run.sizes) <= expected:
                continue  # already present
            if first > expected:
                self._write_units(parts, last)
                parts, last = [], None
                if self.queue.files and not allow_gap:
                    raise ConsumeQueueGapError(self.topic, self.queue_id, expected, first)
                self._restart_at(first)
                expected = first
            sizes = run.sizes
            if len(sizes) == 1:  # a single send (no call)
                parts.append(UNIT.pack(run.phys_offset, sizes[0], run.tags_codes[0]))
            else:
                parts.append(_pack_units(run, expected - first))
            expected = first + len(sizes)
            last = run
        self._write_units(parts, last)

    def _write_units(self, parts: list[bytes], last: DispatchRequest | None) -> None:
        if last is not None:
            self._append_bytes(parts[0] if len(parts) == 1 else b"".join(parts))
            self.max_physic_offset = last.end_offset

    def _restart_at(self, logical: int) -> None:
        self.queue.destroy()
        byte_offset = logical * CQ_STORE_UNIT_SIZE
        mf = self.queue.create_file(self.queue.file_start(byte_offset))
        fill = byte_offset - mf.file_from_offset
        if fill:
            mf.append(BLANK_UNIT * (fill // CQ_STORE_UNIT_SIZE))
        self.min_logic_offset = byte_offset

    def _append_bytes(self, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            mf = self.queue.writable_file()
            n = min(mf.free_space, len(data) - pos)
            mf.append(data[pos : pos + n])
            pos += n

    # -- reads -----------------------------------------------------------------------------
    def read_units(self, logical: int, max_count: int) -> bytes | None:
        """Raw units from ``logical`` on, up to ``max_count`` and never past a file's end.

        Returns None when the file holding ``logical`` is gone (deleted by retention).
        """
        byte_offset = logical * CQ_STORE_UNIT_SIZE
        mf = self.queue.find(byte_offset)
        if mf is None:
            return None
        pos = byte_offset - mf.file_from_offset
        end = min(mf.wrote_position, pos + max_count * CQ_STORE_UNIT_SIZE)
        return mf.read(pos, max(0, end - pos))

    def unit_at(self, logical: int) -> tuple[int, int, int] | None:
        """The unit at ``logical``, or None."""
        raw = self.read_units(logical, 1)
        if not raw:
            return None
        off, size, code = UNIT.unpack(raw)
        return off, size, code

    def last_unit(self) -> tuple[int, int, int, int] | None:
        """``(commitlog offset, size, tags code, queue offset of its record)`` of the last
        readable unit, or None (what recovery checks against the record)."""
        last = self.max_offset - 1
        unit = self.unit_at(last) if last >= self.min_offset else None
        return None if unit is None else (*unit, last)

    def drop_last_unit(self, flushed_below: int) -> None:
        """Cut the last unit (it disagrees with its record) and recover what is left."""
        self.queue.truncate_dirty((self.max_offset - 1) * CQ_STORE_UNIT_SIZE)
        self.recover(flushed_below)

    def roll_next_file(self, logical: int) -> int:
        """First logical offset of the file after the one holding ``logical``."""
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return logical + per_file - logical % per_file

    # -- maintenance -----------------------------------------------------------------------
    def truncate_dirty(self, phys_offset: int) -> None:
        """Cut units pointing at or past ``phys_offset`` (RocketMQ's truncateDirtyLogicFiles).

        The cut is durable on return: files deleted whole go with one directory sync, or a
        power cut could bring them back behind units written since."""
        while files := self.queue.files:
            last = files[-1]
            if last.wrote_position == 0:
                if len(files) == 1:
                    break
                self.queue.delete_last_file()  # an empty last file: look at the one before it
                continue
            off, _, _ = UNIT.unpack_from(last.mm, 0)
            if off >= phys_offset and last.file_from_offset > self.min_logic_offset:
                self.queue.delete_last_file()
                continue
            keep = self._units_below(last, phys_offset)
            self.queue.truncate_dirty(last.file_from_offset + keep)
            break
        self.queue.sync_deletions()
        self._recompute_max_physic()

    @staticmethod
    def _units_below(mf: MappedFile, phys_offset: int) -> int:
        lo, hi = 0, mf.wrote_position // CQ_STORE_UNIT_SIZE
        while lo < hi:
            mid = (lo + hi) // 2
            off, size, _ = UNIT.unpack_from(mf.mm, mid * CQ_STORE_UNIT_SIZE)
            if size == BLANK_UNIT_SIZE or off < phys_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo * CQ_STORE_UNIT_SIZE

    def _recompute_max_physic(self) -> None:
        """Offset + size of the queue's last unit (-1 without one, or when it is a blank)."""
        self.max_physic_offset = -1
        last = self.queue.max_offset // CQ_STORE_UNIT_SIZE - 1
        unit = self.unit_at(last) if last >= 0 else None
        if unit is not None and unit[1] != BLANK_UNIT_SIZE:
            self.max_physic_offset = unit[0] + unit[1]

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete leading files whose every unit points below ``commitlog_min_offset``; the
        deletions are durable (one directory sync) on return."""

        def expired(mf: MappedFile) -> bool:
            if mf.wrote_position < CQ_STORE_UNIT_SIZE:
                return False
            off, size, _ = UNIT.unpack_from(mf.mm, mf.wrote_position - CQ_STORE_UNIT_SIZE)
            return bool(size != BLANK_UNIT_SIZE and off + size <= commitlog_min_offset)

        try:
            deleted = self.queue.delete_first_files(expired, 1 << 30)
        finally:
            self.queue.sync_deletions()
        self.correct_min_offset(commitlog_min_offset)
        return deleted

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Advance the readable minimum past units whose record was deleted.

        Whole files may point below ``commitlog_min_offset`` (a crash between retention's
        commitlog and consume-queue deletions, RocketMQ's ``correctMinOffset`` at recovery):
        the minimum then lies in the first file that still points at a record, or at the end
        of the queue when none does.
        """
        for mf in self.queue.files:
            if self._last_unit_at_or_past(mf, commitlog_min_offset):
                self.min_logic_offset = self._first_unit_at_or_past(mf, commitlog_min_offset)
                return
        last = self.queue.files[-1] if self.queue.files else None
        if last is not None:
            self.min_logic_offset = max(
                self.min_logic_offset, last.file_from_offset + last.wrote_position
            )

    def _last_unit_at_or_past(self, mf: MappedFile, commitlog_min_offset: int) -> bool:
        """True when ``mf`` holds a unit at or past the readable minimum that points at or past
        ``commitlog_min_offset`` (its last unit: units are in commitlog order)."""
        end = mf.file_from_offset + mf.wrote_position
        if mf.wrote_position < CQ_STORE_UNIT_SIZE or end <= self.min_logic_offset:
            return False
        off, size, _ = UNIT.unpack_from(mf.mm, mf.wrote_position - CQ_STORE_UNIT_SIZE)
        return bool(size != BLANK_UNIT_SIZE and off >= commitlog_min_offset)

    def _first_unit_at_or_past(self, mf: MappedFile, commitlog_min_offset: int) -> int:
        """Byte offset of the first unit of ``mf`` (at or past the readable minimum) that is no
        blank and points at or past ``commitlog_min_offset`` (a binary search)."""
        lo = max(self.min_logic_offset, mf.file_from_offset) - mf.file_from_offset
        lo_u, hi_u = lo // CQ_STORE_UNIT_SIZE, mf.wrote_position // CQ_STORE_UNIT_SIZE
        while lo_u < hi_u:
            mid = (lo_u + hi_u) // 2
            off, size, _ = UNIT.unpack_from(mf.mm, mid * CQ_STORE_UNIT_SIZE)
            if size == BLANK_UNIT_SIZE or off < commitlog_min_offset:
                lo_u = mid + 1
            else:
                hi_u = mid
        return mf.file_from_offset + lo_u * CQ_STORE_UNIT_SIZE
