"""The QUERY_CONSUME_QUEUE (321) answer, RocketMQ's ``QueryConsumeQueueResponseBody``, as a
pure msgpack codec shared by the broker and ``mqadmin queryCq``.

Body: ``{"subscriptionData": {...} | None, "filterData": str | None, "queueData":
[{"physicOffset", "physicSize", "tagsCode", "extendDataJson", "bitMap", "eval", "msg"}],
"maxQueueIndex", "minQueueIndex"}``. ``subscriptionData`` is a ``SubscriptionData`` map
(:func:`remoting.client_bodies.subscription_to_wire`).

:func:`decode_query_consume_queue` raises :class:`~remoting.headers.BadRequestError` (a
``ValueError``) naming the offending field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from remoting.headers import BadRequestError

WHAT = "QueryConsumeQueueResponseBody"


@dataclass(frozen=True, slots=True)
class ConsumeQueueData:
    """One consume queue unit (RocketMQ's ``ConsumeQueueData``). minimq has no consume queue
    extension (``enableConsumeQueueExt``), so ``extend_data_json``, ``bit_map`` and ``msg`` are
    always None."""

    physic_offset: int
    physic_size: int
    tags_code: int
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The unit's wire map."""
        return {
            "physicOffset": self.physic_offset,
            "physicSize": self.physic_size,
            "tagsCode": self.tags_code,
            "extendDataJson": self.extend_data_json,
            "bitMap": self.bit_map,
            "eval": self.eval,
            "msg": self.msg,
        }


@dataclass(frozen=True, slots=True)
class QueryConsumeQueueBody:
    """What QUERY_CONSUME_QUEUE answers: units from the index asked for, and the queue's
    index range ``[min_queue_index, max_queue_index)``."""

    max_queue_index: int
    min_queue_index: int
    queue_data: tuple[ConsumeQueueData, ...] = ()
    subscription_data: dict[str, Any] | None = None
    filter_data: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The body's wire map (also what ``mqadmin queryCq --json`` prints)."""
        return {
            "subscriptionData": self.subscription_data,
            "filterData": self.filter_data,
            "queueData": [unit.to_wire() for unit in self.queue_data],
            "maxQueueIndex": self.max_queue_index,
            "minQueueIndex": self.min_queue_index,
        }


def encode_query_consume_queue(body: QueryConsumeQueueBody) -> bytes:
    """The msgpack body of a QUERY_CONSUME_QUEUE answer."""
    data: bytes = msgpack.packb(body.to_wire(), use_bin_type=True)
    return data


def _field(wire: Mapping[str, Any], key: str, kind: type, default: Any = ...) -> Any:
    """``wire[key]`` of type ``kind`` (``default`` when absent, or None when that is the
    default); BadRequestError otherwise (a bool is not an int)."""
    value = wire.get(key, default)
    if value is ...:
        raise BadRequestError(f"{WHAT}: missing {key!r}")
    if value is None and default is None:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise BadRequestError(f"{WHAT}: {key!r} must be {kind.__name__}")
    return value


def _unit_from_wire(wire: Any) -> ConsumeQueueData:
    if not isinstance(wire, dict):
        raise BadRequestError(f"{WHAT}: 'queueData' must be a list of maps")
    return ConsumeQueueData(
        physic_offset=_field(wire, "physicOffset", int),
        physic_size=_field(wire, "physicSize", int),
        tags_code=_field(wire, "tagsCode", int),
        extend_data_json=_field(wire, "extendDataJson", str, None),
        bit_map=_field(wire, "bitMap", str, None),
        eval=_field(wire, "eval", bool, False),
        msg=_field(wire, "msg", str, None),
    )


def decode_query_consume_queue(body: bytes) -> QueryConsumeQueueBody:
    """A QUERY_CONSUME_QUEUE answer's body; BadRequestError when it is not one."""
    try:
        wire = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadRequestError(f"body of {WHAT} is not valid msgpack: {exc}") from None
    if not isinstance(wire, dict):
        raise BadRequestError(f"body of {WHAT} must be a map")
    units = _field(wire, "queueData", list, [])
    return QueryConsumeQueueBody(
        max_queue_index=_field(wire, "maxQueueIndex", int),
        min_queue_index=_field(wire, "minQueueIndex", int),
        queue_data=tuple(_unit_from_wire(u) for u in units),
        subscription_data=_field(wire, "subscriptionData", dict, None),
        filter_data=_field(wire, "filterData", str, None),
    )
