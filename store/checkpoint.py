"""StoreCheckpoint: one mapped page recording what is safely flushed.

Layout (big-endian longs): physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16,
masterFlushedOffset @24, confirmPhyOffset @32 (RocketMQ's), and minimq's dispatchedPhyOffset @40:
the commitlog offset below which consume queues and the index are flushed, which bounds how much
of the commitlog recovery has to re-dispatch, and logicsUnitCount @48: how many units all consume
queues held together when they were last flushed. That sum never shrinks (retention keeps each
queue's last file), so consume queues found holding fewer have lost files, and recovery rebuilds
them from the whole commitlog. Then the index's durable mark (:class:`IndexMark`): the newest
index file's name @56 (its 17 digits as a number; -1 when there was no index file), its entry
count @64 and its ``endPhyOffset`` @72, as they were when the index was last flushed; after a
crash, index files are cut back to it (write-back may have saved an index page ahead of the
entries it points at). A checkpoint written before a field existed reads 0 there.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

PAGE = 4096
_FIELDS = struct.Struct(">qqqqqqqqqq")
NO_INDEX_FILE = -1


class IndexMark(NamedTuple):
    """How far the index was durable: the newest file (by name, or :data:`NO_INDEX_FILE`),
    its ``indexCount`` and its ``endPhyOffset`` when it was last flushed."""

    file_name: int
    index_count: int
    end_phy_offset: int


class StoreCheckpoint:
    """The checkpoint file; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._pack_lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < PAGE:
                os.posix_fallocate(fd, 0, PAGE)
            self.mm = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        """Kept for :meth:`flush`: ``fdatasync`` releases the GIL, ``mmap.flush`` (``msync``)
        does not in CPython 3.11, so it would stop the event loop for the length of a disk
        sync each time the flush thread records the checkpoint."""
        self.physic_msg_timestamp: int
        self.logics_msg_timestamp: int
        self.index_msg_timestamp: int
        self.master_flushed_offset: int
        self.confirm_phy_offset: int
        self.dispatched_phy_offset: int
        self.logics_unit_count: int
        self.index_file_name: int
        self.index_count: int
        self.index_end_phy_offset: int
        (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
            self.dispatched_phy_offset,
            self.logics_unit_count,
            self.index_file_name,
            self.index_count,
            self.index_end_phy_offset,
        ) = _FIELDS.unpack_from(self.mm, 0)

    @property
    def index_mark(self) -> IndexMark | None:
        """The index's durable mark; None for a checkpoint written by an older minimq (one
        with other fields set). A checkpoint never written at all vouches for no index file:
        a crash before the first flush leaves nothing of the index to trust."""
        if self.index_file_name != 0:
            return IndexMark(self.index_file_name, self.index_count, self.index_end_phy_offset)
        written = (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.master_flushed_offset,
            self.dispatched_phy_offset,
            self.logics_unit_count,
        )
        return None if any(written) else IndexMark(NO_INDEX_FILE, 0, -1)

    @index_mark.setter
    def index_mark(self, mark: IndexMark | None) -> None:
        self.index_file_name, self.index_count, self.index_end_phy_offset = mark or (0, 0, 0)

    def min_timestamp(self) -> int:
        """RocketMQ's ``getMinTimestamp``: the older of the two flush times, less 3 s."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def flush(self) -> None:
        """Write the fields and ``fdatasync`` the page (safe from several threads: the fields
        are read and written in one step, so the page never ends up with older values than the
        last call read)."""
        with self._pack_lock:
            self._pack()
        os.fdatasync(self._fd)

    def _pack(self) -> None:
        _FIELDS.pack_into(
            self.mm,
            0,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
            self.dispatched_phy_offset,
            self.logics_unit_count,
            self.index_file_name,
            self.index_count,
            self.index_end_phy_offset,
        )

    def close(self) -> None:
        """Flush, unmap and close the descriptor."""
        if not self.mm.closed:
            try:
                self.flush()
            finally:
                self.abandon()

    def abandon(self) -> None:
        """Unmap and close the descriptor without flushing (what a killed process leaves)."""
        if not self.mm.closed:
            self.mm.close()
            os.close(self._fd)
