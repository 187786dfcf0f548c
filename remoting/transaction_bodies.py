"""Body of GET_PENDING_HALF_MESSAGES (minimq's own request, code 100001), shared by the broker
and ``mqadmin queryHalfMessages``.

Request header: ``producerGroup`` (optional; empty or absent = every group). Response body
(msgpack): ``{"halfMessages": [{"producerGroup", "topic", "queueId", "msgId", "offsetMsgId",
"tranStateTableOffset", "commitLogOffset", "key", "checkTimes", "bornTimestamp",
"storeTimestamp"}]}``, one entry per undecided transaction (its latest half record), in half
queue order. ``topic``/``queueId`` are the real destination; ``msgId`` is the UNIQ_KEY (= the
transaction id); ``key`` is the queue offset of the transaction's first half record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import msgpack

from remoting.headers import BadRequestError

_FIELDS = {
    "producer_group": ("producerGroup", str),
    "topic": ("topic", str),
    "queue_id": ("queueId", int),
    "msg_id": ("msgId", str),
    "offset_msg_id": ("offsetMsgId", str),
    "tran_state_table_offset": ("tranStateTableOffset", int),
    "commit_log_offset": ("commitLogOffset", int),
    "key": ("key", int),
    "check_times": ("checkTimes", int),
    "born_timestamp": ("bornTimestamp", int),
    "store_timestamp": ("storeTimestamp", int),
}


@dataclass(frozen=True, slots=True)
class HalfMessage:
    """A pending half message (the latest copy of an undecided transaction)."""

    producer_group: str
    topic: str
    queue_id: int
    msg_id: str
    offset_msg_id: str
    tran_state_table_offset: int
    commit_log_offset: int
    key: int
    check_times: int
    born_timestamp: int
    store_timestamp: int

    def to_wire(self) -> dict[str, Any]:
        """The entry with RocketMQ-style camelCase names."""
        return {_FIELDS[name][0]: value for name, value in asdict(self).items()}


def encode_half_messages(entries: list[HalfMessage]) -> bytes:
    """The GET_PENDING_HALF_MESSAGES response body."""
    data: bytes = msgpack.packb({"halfMessages": [e.to_wire() for e in entries]}, use_bin_type=True)
    return data


def decode_half_messages(body: bytes) -> list[HalfMessage]:
    """Parse a GET_PENDING_HALF_MESSAGES response body; BadRequestError when malformed."""
    try:
        wire = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadRequestError(f"halfMessages body is not valid msgpack: {exc}") from None
    rows = wire.get("halfMessages") if isinstance(wire, dict) else None
    if not isinstance(rows, list):
        raise BadRequestError("halfMessages body must be a map with a 'halfMessages' list")
    out: list[HalfMessage] = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise BadRequestError(f"halfMessages[{i}] must be a map")
        values: dict[str, Any] = {}
        for name, (key, kind) in _FIELDS.items():
            value = row.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise BadRequestError(f"halfMessages[{i}]: {key!r} must be {kind.__name__}")
            values[name] = value
        out.append(HalfMessage(**values))
    return out
