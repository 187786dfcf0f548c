"""DispatchRequest: what the reput service needs to index one stored record."""

from __future__ import annotations

from typing import NamedTuple

from common.message import MessageConst


class DispatchRequest(NamedTuple):
    """One record to put into its consume queue and the index (RocketMQ's ``DispatchRequest``)."""

    topic: str
    queue_id: int
    phys_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    sys_flag: int
    properties: dict[str, str]

    def key_suffixes(self) -> list[str]:
        """What follows ``topic#`` in each index key: the UNIQ_KEY, then each of KEYS."""
        props = self.properties
        out = []
        uniq = props.get(MessageConst.UNIQ_KEY)
        if uniq:
            out.append(uniq)
        raw = props.get(MessageConst.KEYS)
        if raw:
            out.extend(k for k in raw.split(MessageConst.KEY_SEPARATOR) if k)
        return out
