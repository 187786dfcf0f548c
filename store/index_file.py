"""IndexFile: a hash index from ``topic#key`` to commitlog offsets, laid out as RocketMQ's.

Layout (big-endian)::

    header (40): beginTimestamp i8 | endTimestamp i8 | beginPhyOffset i8 | endPhyOffset i8
                 | hashSlotCount i4 | indexCount i4        (indexCount starts at 1)
    slots:       hashSlotNum x i4  = number of the newest entry in the slot (0 = empty)
    entries:     indexNum x 20     = keyHash i4 | phyOffset i8 | timeDiff(s) i4 | prevIndex i4

Rules:
- Puts come in batches and are written entries first, then the header, then the slots, so a
  process killed mid-batch leaves at worst some of the last batch's keys unreachable.
- A power cut can also leave pages that write-back saved after the last sync: a header or a
  slot newer than the entries it counts or points at. After a crash the store cuts the file
  back to the entry count its checkpoint recorded (:meth:`IndexFile.cut_to`); with a
  checkpoint from before that mark existed, :meth:`IndexFile.repair_tail` re-links the last
  batch instead.
- Lookups compare only the 4-byte hash; callers re-check the real key against the record.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from store.mapped_file import MappedFile

HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 2**31 - 1
MAX_BATCH_REPAIR = 1 << 16  # largest batch put_batch writes in one go (see repair_tail)
SCAN_CHUNK = 1 << 20  # entries read at a time when cut_to looks for slots' newest entries

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_PHY = struct.Struct(">q")
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("tdiff", ">i4"), ("prev", ">i4")])


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes in one index file."""
    return HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


class IndexFile:
    """One index file; see the module docstring."""

    def __init__(
        self,
        path: Path,
        hash_slot_num: int,
        index_num: int,
        *,
        create: bool,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
    ) -> None:
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        size = index_file_size(hash_slot_num, index_num)
        self.file = MappedFile(Path(path), size, create=create)
        self.file.wrote_position = size
        self._slots: npt.NDArray[np.int32] | None = None
        # bumped after each change is complete (slots included); see :meth:`flush`
        self._generation = 0
        self._flushed_generation = -1
        if create:
            self.begin_timestamp = end_timestamp
            self.end_timestamp = end_timestamp
            self.begin_phy_offset = end_phy_offset
            self.end_phy_offset = end_phy_offset
            self.hash_slot_count = 0
            self.index_count = 1
            self._write_header()
        else:
            (
                self.begin_timestamp,
                self.end_timestamp,
                self.begin_phy_offset,
                self.end_phy_offset,
                self.hash_slot_count,
                self.index_count,
            ) = _HEADER.unpack_from(self.file.mm, 0)
            if self.is_write_full:
                self.file.release_descriptor()  # opened again only if recovery cuts it

    @property
    def path(self) -> Path:
        """The file's path."""
        return self.file.path

    @property
    def is_write_full(self) -> bool:
        """True when no entry is left (RocketMQ's ``isWriteFull``)."""
        return self.index_count >= self.index_num

    @property
    def slots(self) -> npt.NDArray[np.int32]:
        """Big-endian int32 view of the slot table (inside the mapping)."""
        if self._slots is None:
            self._slots = np.frombuffer(
                self.file.mm, dtype=">i4", count=self.hash_slot_num, offset=HEADER_SIZE
            )
        return self._slots

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self.file.mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def _entry_pos(self, index_no: int) -> int:
        return HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + index_no * INDEX_SIZE

    # -- writes ----------------------------------------------------------------------------
    def put_batch(
        self, hashes: npt.NDArray[np.int64], phy: npt.NDArray[np.int64], ts: npt.NDArray[np.int64]
    ) -> int:
        """Add as many of the given keys as fit; return how many were added.

        ``hashes`` are index key hashes (``abs(hashCode)``), ``phy`` commitlog offsets and ``ts``
        store timestamps in ms, all in commitlog order.
        """
        n = min(len(hashes), self.index_num - self.index_count, MAX_BATCH_REPAIR)
        if n <= 0:
            return 0
        hashes, phy, ts = hashes[:n], phy[:n], ts[:n]
        first_idx = self.index_count
        idx = np.arange(first_idx, first_idx + n, dtype=np.int64)
        slot_no = hashes % self.hash_slot_num
        slots = self.slots
        old = slots[slot_no].astype(np.int64)
        old[(old <= INVALID_INDEX) | (old > first_idx)] = INVALID_INDEX
        s_sorted = np.sort(slot_no)
        if n == 1 or s_sorted[1:].__ne__(s_sorted[:-1]).all():
            # every key in its own slot (the usual case): each entry chains to the slot's
            # current head and becomes the new head
            self._write_entries(first_idx, hashes, phy, ts, old)
            self.hash_slot_count += int(np.count_nonzero(old == INVALID_INDEX))
            self._after_put(first_idx + n, phy, ts)
            slots[slot_no] = idx
            self._generation += 1
            return n
        order = np.argsort(slot_no, kind="stable")
        starts_group = np.ones(n, dtype=bool)
        starts_group[1:] = s_sorted[1:] != s_sorted[:-1]
        prev_sorted = np.empty(n, dtype=np.int64)
        prev_sorted[0] = 0
        prev_sorted[1:] = idx[order][:-1]
        prev_sorted[starts_group] = old[order][starts_group]
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_sorted
        self._write_entries(first_idx, hashes, phy, ts, prev)
        # header next, then the slots (see the module docstring for why this order)
        self.hash_slot_count += int(np.count_nonzero(old[order][starts_group] == INVALID_INDEX))
        self._after_put(first_idx + n, phy, ts)
        ends_group = np.ones(n, dtype=bool)
        ends_group[:-1] = s_sorted[1:] != s_sorted[:-1]
        slots[s_sorted[ends_group]] = idx[order][ends_group]
        self._generation += 1
        return n

    def _write_entries(
        self,
        first_idx: int,
        hashes: npt.NDArray[np.int64],
        phy: npt.NDArray[np.int64],
        ts: npt.NDArray[np.int64],
        prev: npt.NDArray[np.int64],
    ) -> None:
        """Write entries ``first_idx ...`` straight into the mapping (the first crash-safe step)."""
        n = len(hashes)
        entries = np.frombuffer(
            self.file.mm, dtype=ENTRY_DTYPE, count=n, offset=self._entry_pos(first_idx)
        )
        entries["hash"] = hashes
        entries["phy"] = phy
        entries["tdiff"] = self._time_diffs(ts, first_idx)
        entries["prev"] = prev
        if first_idx <= 1:
            self.begin_timestamp = int(ts[0])
            self.begin_phy_offset = int(phy[0])

    def _after_put(
        self, index_count: int, phy: npt.NDArray[np.int64], ts: npt.NDArray[np.int64]
    ) -> None:
        """Advance the header past a put's entries and write it (before the slots)."""
        self.index_count = index_count
        self.end_phy_offset = int(phy[-1])
        self.end_timestamp = int(ts[-1])
        self._write_header()

    def put_keys(self, hashes: Sequence[int], phy: Sequence[int], ts: Sequence[int]) -> int:
        """Pure-Python :meth:`put_batch` for a few keys, where numpy's fixed cost dominates.

        Same result, byte for byte, and the same crash-safe order: entries, header, slots.
        """
        n = min(len(hashes), self.index_num - self.index_count)
        if n <= 0:
            return 0
        mm = self.file.mm
        slot_num = self.hash_slot_num
        entry_base = HEADER_SIZE + slot_num * HASH_SLOT_SIZE
        first_idx = self.index_count
        newest: dict[int, int] = {}  # slot position -> newest index number in this batch
        for i in range(n):
            idx = first_idx + i
            spos = HEADER_SIZE + (hashes[i] % slot_num) * HASH_SLOT_SIZE
            prev = newest.get(spos)
            if prev is None:
                (prev,) = _SLOT.unpack_from(mm, spos)
                if prev <= INVALID_INDEX or prev > first_idx:
                    prev = INVALID_INDEX
                if prev == INVALID_INDEX:
                    self.hash_slot_count += 1
            begin = self.begin_timestamp
            tdiff = 0 if begin <= 0 else min(max((ts[i] - begin) // 1000, 0), INT_MAX)
            _ENTRY.pack_into(mm, entry_base + idx * INDEX_SIZE, hashes[i], phy[i], tdiff, prev)
            if idx <= 1:
                self.begin_timestamp = ts[i]
                self.begin_phy_offset = phy[i]
            newest[spos] = idx
        self.index_count = first_idx + n
        self.end_phy_offset = phy[n - 1]
        self.end_timestamp = ts[n - 1]
        self._write_header()
        for spos, idx in newest.items():
            _SLOT.pack_into(mm, spos, idx)
        self._generation += 1
        return n

    def mark_covered(self, phy: int, timestamp: int) -> None:
        """Record that records up to ``phy`` are indexed, even those that had no key."""
        if phy > self.end_phy_offset or self.end_timestamp == 0:
            self.end_phy_offset = phy
            self.end_timestamp = max(self.end_timestamp, timestamp)
            self._write_header()
            self._generation += 1

    def entries_below(self, phys_offset: int) -> int:
        """The entry count (number 0 included) keeping only entries that point below
        ``phys_offset``: entries are in commitlog order, so a binary search finds it."""
        lo, hi = 1, self.index_count
        mm, pos = self.file.mm, self._entry_pos(0) + 4
        while lo < hi:
            mid = (lo + hi) // 2
            if _PHY.unpack_from(mm, pos + mid * INDEX_SIZE)[0] < phys_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def hashes_at(self, phys_offset: int) -> list[int]:
        """The key hashes of the entries pointing at ``phys_offset``: entries are in commitlog
        order, so they are the run found by :meth:`entries_below`'s binary search."""
        out: list[int] = []
        mm, base = self.file.mm, self._entry_pos(0)
        for idx in range(self.entries_below(phys_offset), self.index_count):
            key_hash, phy, _, _ = _ENTRY.unpack_from(mm, base + idx * INDEX_SIZE)
            if phy != phys_offset:
                break
            out.append(key_hash)
        return out

    def _time_diffs(self, ts: npt.NDArray[np.int64], first_idx: int) -> npt.NDArray[np.int64]:
        """Seconds since the file's begin timestamp, clamped to [0, INT_MAX] (0 without one).

        RocketMQ sets the begin timestamp after a file's first put, so in a batch that starts a
        file the later entries count from the first entry's time.
        """
        begin = self.begin_timestamp
        if first_idx <= 1:
            first = int(ts[0])
            diffs = (ts - first) // 1000 if first > 0 else np.zeros(len(ts), dtype=np.int64)
            diffs[0] = (first - begin) // 1000 if begin > 0 else 0
        elif begin > 0:
            diffs = (ts - begin) // 1000
        else:
            return np.zeros(len(ts), dtype=np.int64)
        np.maximum(diffs, 0, out=diffs)
        return np.minimum(diffs, INT_MAX, out=diffs)

    def repair_tail(self) -> int:
        """Re-link entries of a batch whose slot updates a crash cut short; return how many."""
        count = self.index_count
        first = max(1, count - MAX_BATCH_REPAIR)
        if count <= first:
            return 0
        pos = self._entry_pos(first)
        raw = self.file.mm[pos : pos + (count - first) * INDEX_SIZE]
        entries = np.frombuffer(raw, dtype=ENTRY_DTYPE)
        idx = np.arange(first, count, dtype=np.int64)
        slot_no = entries["hash"].astype(np.int64) % self.hash_slot_num
        current = self.slots[slot_no].astype(np.int64)
        lost = current < idx
        if not lost.any():
            return 0
        # the newest entry per slot wins: write in increasing index order
        self.slots[slot_no[lost]] = idx[lost]
        return int(np.count_nonzero(lost))

    def cut_to(self, count: int, end_phy_offset: int) -> int:
        """After a crash: keep the first ``count`` entries (number 0 unused), as a checkpoint
        vouched for them, and forget later ones; return how many slots were re-pointed.

        Write-back may have saved a slot page pointing at an entry the power cut lost: each
        slot pointing past the kept entries gets the newest kept entry of its own (found by
        one pass over the kept entries' hashes), or none. Later entries are left in place,
        unreachable, until new puts write over them. The end timestamp stays as found: it may
        be later than the kept entries', which only widens the time range queries look at.
        """
        count = max(1, min(count, self.index_num))
        slots = self.slots
        stale = np.flatnonzero((slots >= count) | (slots < INVALID_INDEX))
        if self.index_count == count and self.end_phy_offset == end_phy_offset and not stale.size:
            return 0
        if stale.size:
            slots[stale] = self._newest_entries(count, stale)
        self.index_count = count
        self.end_phy_offset = end_phy_offset
        self.hash_slot_count = int(np.count_nonzero(slots))
        self._write_header()
        self._generation += 1
        return int(stale.size)

    def _newest_entries(self, count: int, slot_nos: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """For each of ``slot_nos`` (sorted), its newest entry below ``count`` (0 for none)."""
        wanted = np.zeros(self.hash_slot_num, dtype=bool)
        wanted[slot_nos] = True
        newest = np.zeros(len(slot_nos), dtype=np.int64)
        for first in range(1, count, SCAN_CHUNK):
            n = min(SCAN_CHUNK, count - first)
            entries = np.frombuffer(
                self.file.mm, dtype=ENTRY_DTYPE, count=n, offset=self._entry_pos(first)
            )
            slot_no = entries["hash"].astype(np.int64) % self.hash_slot_num
            hit = np.flatnonzero(wanted[slot_no])
            if hit.size:
                where = np.searchsorted(slot_nos, slot_no[hit])
                np.maximum.at(newest, where, hit + first)
        return newest

    # -- reads -----------------------------------------------------------------------------
    def select_phy_offsets(self, key_hash: int, max_num: int, begin: int, end: int) -> list[int]:
        """Commitlog offsets whose key hash equals ``key_hash`` and time is in [begin, end]."""
        out: list[int] = []
        for _ in self.walk_phy_offsets(key_hash, max_num, begin, end, out, step=INT_MAX):
            pass
        return out

    def walk_phy_offsets(
        self,
        key_hash: int,
        max_num: int,
        begin: int,
        end: int,
        out: list[int],
        *,
        step: int,
        done: int = 0,
    ) -> Generator[None, None, int]:
        """:meth:`select_phy_offsets` in steps: append the offsets to ``out`` until it holds
        ``max_num``, newest first, pausing (a bare yield) whenever the lookup has read a
        multiple of ``step`` entries; ``done`` were read in earlier files, and the count
        after this one is returned.

        The walk may pause for as long as the caller likes: entries are only appended, and
        each points at an older one, so the part of the chain still to read never changes.
        """
        if self.index_count <= 1:
            return done
        mm = self.file.mm
        slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        (idx,) = _SLOT.unpack_from(mm, slot_pos)
        if idx <= INVALID_INDEX or idx > self.index_count:
            return done
        seen, pause = 0, -done % step
        while len(out) < max_num and seen <= self.index_count:
            if seen == pause:
                pause += step
                yield
            seen += 1
            h, off, tdiff, prev = _ENTRY.unpack_from(mm, self._entry_pos(idx))
            time_read = self.begin_timestamp + tdiff * 1000
            if h == key_hash and begin <= time_read <= end:
                out.append(off)
            if prev <= INVALID_INDEX or prev > self.index_count or prev == idx or time_read < begin:
                break
            idx = prev
        return done + seen

    def is_time_matched(self, begin: int, end: int) -> bool:
        """True when this file's time range overlaps [begin, end]."""
        return (
            (begin < self.begin_timestamp and end > self.end_timestamp)
            or (self.begin_timestamp <= begin <= self.end_timestamp)
            or (self.begin_timestamp <= end <= self.end_timestamp)
        )

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        """Make the file durable as of the last completed change (nothing to do if none since).

        Called from a worker thread while the event loop may be inside a put: the sync may
        then catch the header of a batch without its slots. The generation is read before the
        sync and bumped only once a change is complete, so such a half-caught batch is synced
        again by the next flush. The header is never written here: only the writing thread
        writes it, so a flush cannot put back an older one. A full file synced as of its
        last change keeps only its mapping's descriptor (:class:`store.mapped_file.MappedFile`).
        """
        generation = self._generation
        if generation == self._flushed_generation:
            return
        self.file.sync()
        self._flushed_generation = generation
        if self.is_write_full and generation == self._generation:
            self.file.release_descriptor()  # full and synced whole: written no more

    def close(self) -> None:
        """Release the numpy view and unmap."""
        self._slots = None
        self.file.close()

    def destroy(self) -> None:
        """Close and delete."""
        self._slots = None
        self.file.destroy()
