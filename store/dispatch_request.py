"""DispatchRequest: what the reput service needs to put stored records into queues and the index.

RocketMQ builds one ``DispatchRequest`` per record. minimq builds one per *run*: consecutive
records of one put that share topic, queue, sys flag and store time (a batch send is one run).
Everything per record that a run can derive is derived: the i-th record lies at
``phys_offset + sum(sizes[:i])`` and, when consumable, has queue offset ``queue_offset + i``.
That keeps the put path free of per-record objects and lets consume queues and the index
handle a run with a few calls instead of one per record.
"""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple

from common.message import MessageConst


class DispatchRequest(NamedTuple):
    """A run of records appended together; see the module docstring."""

    topic: str
    queue_id: int
    sys_flag: int
    store_timestamp: int
    phys_offset: int
    """Commitlog offset of the run's first record."""
    end_offset: int
    """Commitlog offset just past the run's last record."""
    queue_offset: int
    """Queue offset of the first record (0 when the records are not consumable)."""
    sizes: list[int]
    tags_codes: list[int]
    properties: list[dict[str, str]]

    @classmethod
    def single(
        cls,
        topic: str,
        queue_id: int,
        phys_offset: int,
        size: int,
        tags_code: int,
        store_timestamp: int,
        queue_offset: int,
        sys_flag: int,
        properties: dict[str, str],
    ) -> DispatchRequest:
        """A run of one record."""
        return cls(
            topic,
            queue_id,
            sys_flag,
            store_timestamp,
            phys_offset,
            phys_offset + size,
            queue_offset,
            [size],
            [tags_code],
            [properties],
        )

    def phys_offsets(self) -> list[int]:
        """Commitlog offset of each record."""
        return list(accumulate(self.sizes[:-1], initial=self.phys_offset))


def key_suffixes(properties: dict[str, str]) -> list[str]:
    """What follows ``topic#`` in each index key of a record: its UNIQ_KEY, then each of KEYS."""
    out = []
    uniq = properties.get(MessageConst.UNIQ_KEY)
    if uniq:
        out.append(uniq)
    raw = properties.get(MessageConst.KEYS)
    if raw:
        out.extend(k for k in raw.split(MessageConst.KEY_SEPARATOR) if k)
    return out
