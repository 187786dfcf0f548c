"""ConsumeQueueInterface: what the store asks of a consume queue of either type.

RocketMQ's ``ConsumeQueueInterface``. :class:`store.consume_queue.ConsumeQueue` (SimpleCQ,
offsets = unit positions) and :class:`store.batch_consume_queue.BatchConsumeQueue` (BatchCQ,
offsets = message offsets, one unit per record) both satisfy it; ``cq_type`` tells them apart
where the read path differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from common.topic_attributes import CQType
from store.dispatch_request import DispatchRequest
from store.mapped_file_queue import MappedFileQueue


class ConsumeQueueInterface(Protocol):
    """One topic-queue's consume queue, of either :class:`CQType`."""

    topic: str
    queue_id: int
    queue: MappedFileQueue
    contiguous: bool
    max_physic_offset: int
    """Commitlog offset just past the last unit's record (-1 without one)."""

    @property
    def cq_type(self) -> CQType:
        """SimpleCQ or BatchCQ."""

    @property
    def max_offset(self) -> int:
        """The next queue offset."""

    @property
    def min_offset(self) -> int:
        """The first readable queue offset."""

    @property
    def destroyed(self) -> bool:
        """True after :meth:`destroy`."""

    def load(self) -> None:
        """Map the files on disk."""

    def recover(self, flushed_below: int = 0) -> None:
        """Keep the valid units, cut the rest."""

    def put(self, runs: Sequence[DispatchRequest], *, allow_gap: bool = False) -> None:
        """Append the units of ``runs`` (commitlog order)."""

    def unit_at(self, logical: int) -> tuple[int, int, int] | None:
        """``(commitlog offset, size, tags code)`` of the unit holding ``logical``."""

    def read_units(self, logical: int, max_count: int) -> bytes | None:
        """20-byte ``(offset, size, tags code)`` units from the one holding ``logical``."""

    def last_unit(self) -> tuple[int, int, int, int] | None:
        """``(offset, size, tags code, queue offset of its record)`` of the last unit."""

    def drop_last_unit(self, flushed_below: int) -> None:
        """Cut the last unit and recover the rest."""

    def roll_next_file(self, logical: int) -> int:
        """Where a read continues when the unit of ``logical`` is gone."""

    def truncate_dirty(self, phys_offset: int) -> None:
        """Cut units pointing at or past ``phys_offset``."""

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete leading files pointing only below ``commitlog_min_offset``."""

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Move the readable minimum past units whose record is gone."""

    def flush(self) -> int:
        """Flush dirty files."""

    def close(self) -> None:
        """Unmap every file."""

    def destroy(self) -> None:
        """Delete every file."""
