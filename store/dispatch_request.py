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

    def index_keys(self) -> list[str]:
        """The index keys: ``topic#UNIQ_KEY`` and ``topic#k`` for each of KEYS."""
        props = self.properties
        keys = []
        uniq = props.get(MessageConst.UNIQ_KEY)
        if uniq:
            keys.append(f"{self.topic}#{uniq}")
        raw = props.get(MessageConst.KEYS)
        if raw:
            keys.extend(f"{self.topic}#{k}" for k in raw.split(MessageConst.KEY_SEPARATOR) if k)
        return keys
