"""Bodies of the client-management requests, as pure msgpack codecs shared by broker and client.

- ``HEART_BEAT`` body: RocketMQ's ``HeartbeatData`` as a msgpack map with its field names:
  ``{"clientID", "producerDataSet": [{"groupName"}], "consumerDataSet": [{"groupName",
  "consumeType", "messageModel", "consumeFromWhere", "unitMode", "subscriptionDataSet":
  [{"topic", "subString", "tagsSet", "codeSet", "subVersion", "expressionType"}]}]}``.
- ``GET_CONSUMER_LIST_BY_GROUP`` response body: ``{"consumerIdList": [...]}``.

``decode_*`` raise :class:`~remoting.headers.BadRequestError` (a ``ValueError``) naming the
offending field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from common.subscription import SubscriptionData
from remoting.headers import BadRequestError


class ConsumeType(enum.Enum):
    """Pull (``CONSUME_ACTIVELY``) or push (``CONSUME_PASSIVELY``) consumer."""

    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"


class MessageModel(enum.Enum):
    """How a group shares a topic: each message to one member, or to every member."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset starts (RocketMQ's ``ConsumeFromWhere``)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    # short aliases (the same members): ConsumeFrom.FIRST_OFFSET is CONSUME_FROM_FIRST_OFFSET
    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group's entry in a heartbeat."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_ACTIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """What a client instance tells every broker every 30 s."""

    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()


def _pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _unpack(body: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadRequestError(f"body of {what} is not valid msgpack: {exc}") from None


def _field(wire: Mapping[str, Any], key: str, kind: type, what: str, default: Any = ...) -> Any:
    value = wire.get(key, default)
    if value is ...:
        raise BadRequestError(f"{what}: missing {key!r}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequestError(f"{what}: {key!r} must be {kind.__name__}")
    return value


def _enum(wire: Mapping[str, Any], key: str, kind: type[enum.Enum], default: enum.Enum) -> Any:
    raw = wire.get(key, default.value)
    try:
        return kind(raw)
    except ValueError:
        raise BadRequestError(f"heartbeat: unknown {key} {raw!r}") from None


def _maps(wire: Mapping[str, Any], key: str, what: str) -> list[Mapping[str, Any]]:
    items: list[Mapping[str, Any]] = _field(wire, key, list, what, [])
    if not all(isinstance(i, dict) for i in items):
        raise BadRequestError(f"{what}: {key!r} must be a list of maps")
    return items


def subscription_to_wire(sub: SubscriptionData) -> dict[str, Any]:
    """A subscription as its wire map (RocketMQ's ``SubscriptionData`` field names)."""
    return {
        "topic": sub.topic,
        "subString": sub.sub_string,
        "tagsSet": list(sub.tags_set),
        "codeSet": list(sub.code_set),
        "subVersion": sub.sub_version,
        "expressionType": sub.expression_type,
    }


def _subscription_from_wire(wire: Mapping[str, Any]) -> SubscriptionData:
    what = "heartbeat subscription"
    tags = _field(wire, "tagsSet", list, what, [])
    codes = _field(wire, "codeSet", list, what, [])
    if not all(isinstance(t, str) for t in tags):
        raise BadRequestError(f"{what}: 'tagsSet' must be a list of str")
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
        raise BadRequestError(f"{what}: 'codeSet' must be a list of int")
    return SubscriptionData(
        topic=_field(wire, "topic", str, what),
        sub_string=_field(wire, "subString", str, what, "*"),
        tags_set=tuple(tags),
        code_set=tuple(codes),
        sub_version=_field(wire, "subVersion", int, what, 0),
        expression_type=_field(wire, "expressionType", str, what, "TAG"),
    )


def _consumer_to_wire(c: ConsumerData) -> dict[str, Any]:
    return {
        "groupName": c.group_name,
        "consumeType": c.consume_type.value,
        "messageModel": c.message_model.value,
        "consumeFromWhere": c.consume_from_where.value,
        "unitMode": c.unit_mode,
        "subscriptionDataSet": [subscription_to_wire(s) for s in c.subscriptions],
    }


def _consumer_from_wire(wire: Mapping[str, Any]) -> ConsumerData:
    what = "heartbeat consumer"
    return ConsumerData(
        group_name=_field(wire, "groupName", str, what),
        consume_type=_enum(wire, "consumeType", ConsumeType, ConsumeType.CONSUME_ACTIVELY),
        message_model=_enum(wire, "messageModel", MessageModel, MessageModel.CLUSTERING),
        consume_from_where=_enum(
            wire,
            "consumeFromWhere",
            ConsumeFromWhere,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        ),
        unit_mode=_field(wire, "unitMode", bool, what, False),
        subscriptions=tuple(
            _subscription_from_wire(s) for s in _maps(wire, "subscriptionDataSet", what)
        ),
    )


def encode_heartbeat(data: HeartbeatData) -> bytes:
    """The HEART_BEAT request body."""
    return _pack(
        {
            "clientID": data.client_id,
            "producerDataSet": [{"groupName": g} for g in data.producer_groups],
            "consumerDataSet": [_consumer_to_wire(c) for c in data.consumers],
        }
    )


def decode_heartbeat(body: bytes) -> HeartbeatData:
    """Parse a HEART_BEAT request body."""
    wire = _unpack(body, "HEART_BEAT")
    if not isinstance(wire, dict):
        raise BadRequestError("HEART_BEAT body must be a map")
    what = "heartbeat"
    client_id = _field(wire, "clientID", str, what)
    if not client_id:
        raise BadRequestError("heartbeat: empty 'clientID'")
    producers = tuple(
        _field(p, "groupName", str, "heartbeat producer")
        for p in _maps(wire, "producerDataSet", what)
    )
    consumers = tuple(_consumer_from_wire(c) for c in _maps(wire, "consumerDataSet", what))
    return HeartbeatData(client_id, producers, consumers)


def encode_consumer_list(client_ids: Sequence[str]) -> bytes:
    """The GET_CONSUMER_LIST_BY_GROUP response body."""
    return _pack({"consumerIdList": list(client_ids)})


def decode_consumer_list(body: bytes) -> list[str]:
    """Parse a GET_CONSUMER_LIST_BY_GROUP response body."""
    wire = _unpack(body, "GET_CONSUMER_LIST_BY_GROUP")
    ids = wire.get("consumerIdList") if isinstance(wire, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadRequestError("consumer list body: 'consumerIdList' must be a list of str")
    return ids


# ---------------------------------------------------------------------- queue locks (orderly)


@dataclass(frozen=True, slots=True, order=True)
class LockedQueue:
    """A queue in a LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body."""

    topic: str
    broker_name: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class LockBatchBody:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request body (``LockBatchRequestBody``)."""

    consumer_group: str
    client_id: str
    mqs: tuple[LockedQueue, ...]


def _queues_to_wire(mqs: Sequence[LockedQueue]) -> list[dict[str, Any]]:
    return [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id} for q in mqs]


def _queues_from_wire(wire: Mapping[str, Any], key: str, what: str) -> tuple[LockedQueue, ...]:
    return tuple(
        LockedQueue(
            _field(q, "topic", str, what),
            _field(q, "brokerName", str, what),
            _field(q, "queueId", int, what),
        )
        for q in _maps(wire, key, what)
    )


def encode_lock_batch(body: LockBatchBody) -> bytes:
    """The LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request body."""
    return _pack(
        {
            "consumerGroup": body.consumer_group,
            "clientId": body.client_id,
            "mqSet": _queues_to_wire(body.mqs),
        }
    )


def decode_lock_batch(body: bytes) -> LockBatchBody:
    """Parse a LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request body."""
    wire = _unpack(body, "LOCK_BATCH_MQ")
    if not isinstance(wire, dict):
        raise BadRequestError("LOCK_BATCH_MQ body must be a map")
    what = "lock batch"
    return LockBatchBody(
        consumer_group=_field(wire, "consumerGroup", str, what),
        client_id=_field(wire, "clientId", str, what),
        mqs=_queues_from_wire(wire, "mqSet", what),
    )


def encode_lock_batch_response(locked: Sequence[LockedQueue]) -> bytes:
    """The LOCK_BATCH_MQ response body: ``{"lockOKMQSet": [...]}``."""
    return _pack({"lockOKMQSet": _queues_to_wire(locked)})


def decode_lock_batch_response(body: bytes) -> tuple[LockedQueue, ...]:
    """Parse a LOCK_BATCH_MQ response body."""
    wire = _unpack(body, "LOCK_BATCH_MQ response")
    if not isinstance(wire, dict):
        raise BadRequestError("LOCK_BATCH_MQ response body must be a map")
    return _queues_from_wire(wire, "lockOKMQSet", "lock batch response")


ConsumeFrom = ConsumeFromWhere
"""The name the push consumer's API uses (``ConsumeFrom.FIRST_OFFSET``)."""
