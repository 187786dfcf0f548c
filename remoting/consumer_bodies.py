"""Bodies of the requests the broker forwards to one live consumer (msgpack, RocketMQ's field
names), shared by the consumer, the broker and ``mqadmin``:

- GET_CONSUMER_RUNNING_INFO response (``ConsumerRunningInfo``): ``{"properties": {name:
  text}, "subscriptionSet": [subscription, as in a heartbeat], "mqTable": [{"topic",
  "brokerName", "queueId", "commitOffset", "cachedMsgMinOffset", "cachedMsgMaxOffset",
  "cachedMsgCount", "cachedMsgSizeInMiB", "locked", "tryUnlockTimes", "lastLockTimestamp",
  "droped", "lastPullTimestamp", "lastConsumeTimestamp"}], "statusTable": {topic:
  {"pullRT", "pullTPS", "consumeRT", "consumeOKTPS", "consumeFailedTPS",
  "consumeFailedMsgs"}}, "jstack": text}`` (a ``MessageQueue``-keyed map is a list of rows,
  as in :mod:`remoting.admin_bodies`; ``droped`` is RocketMQ's spelling; ``jstack``, the
  consumer process's thread stacks, only when the request's ``jstackEnable`` asked for it).
- CONSUME_MESSAGE_DIRECTLY response (``ConsumeMessageDirectlyResult``): ``{"order",
  "autoCommit", "consumeResult", "remark", "spentTimeMills"}``, ``consumeResult`` one of
  :class:`CMResult`'s names.

``decode_*`` raise :class:`~remoting.headers.BadRequestError` (a ``ValueError``) naming the
offending field.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from common.subscription import SubscriptionData
from remoting.admin_bodies import _get, _pack, _rows, _unpack_map
from remoting.client_bodies import _subscription_from_wire, subscription_to_wire
from remoting.headers import BadRequestError

PROP_NAMESERVER_ADDR: Final = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE: Final = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY: Final = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE: Final = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION: Final = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP: Final = "PROP_CONSUMER_START_TIMESTAMP"
"""RocketMQ's ``ConsumerRunningInfo.PROP_*`` property names."""


class CMResult(enum.Enum):
    """How a consume-directly call ended (RocketMQ's ``CMResult``)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


@dataclass(frozen=True, slots=True)
class ProcessQueueInfo:
    """One assigned queue of a consumer (RocketMQ's ``ProcessQueueInfo``); times in ms since
    the epoch (0: never)."""

    topic: str
    broker_name: str
    queue_id: int
    commit_offset: int = -1
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0


_QUEUE_INFO_FIELDS: Final = (
    ("commitOffset", "commit_offset", int),
    ("cachedMsgMinOffset", "cached_msg_min_offset", int),
    ("cachedMsgMaxOffset", "cached_msg_max_offset", int),
    ("cachedMsgCount", "cached_msg_count", int),
    ("cachedMsgSizeInMiB", "cached_msg_size_in_mib", int),
    ("locked", "locked", bool),
    ("tryUnlockTimes", "try_unlock_times", int),
    ("lastLockTimestamp", "last_lock_timestamp", int),
    ("droped", "droped", bool),
    ("lastPullTimestamp", "last_pull_timestamp", int),
    ("lastConsumeTimestamp", "last_consume_timestamp", int),
)
"""Wire name, attribute and type of each :class:`ProcessQueueInfo` value."""


@dataclass(frozen=True, slots=True)
class ConsumeStatus:
    """One topic's consume figures (RocketMQ's ``ConsumeStatus``)."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0


_STATUS_FIELDS: Final = (
    ("pullRT", "pull_rt", float),
    ("pullTPS", "pull_tps", float),
    ("consumeRT", "consume_rt", float),
    ("consumeOKTPS", "consume_ok_tps", float),
    ("consumeFailedTPS", "consume_failed_tps", float),
    ("consumeFailedMsgs", "consume_failed_msgs", int),
)


@dataclass(frozen=True, slots=True)
class ConsumerRunningInfo:
    """What one consumer says of itself (RocketMQ's ``ConsumerRunningInfo``)."""

    properties: dict[str, str] = field(default_factory=dict)
    subscriptions: tuple[SubscriptionData, ...] = ()
    queues: tuple[ProcessQueueInfo, ...] = ()
    status: dict[str, ConsumeStatus] = field(default_factory=dict)
    jstack: str | None = None
    """The consumer process's thread stacks, when asked for (RocketMQ's ``jstack``)."""

    def with_properties(self, extra: Mapping[str, str]) -> ConsumerRunningInfo:
        """A copy with ``extra`` added to the properties (the client instance adds its own)."""
        return dataclasses.replace(self, properties={**self.properties, **extra})

    def with_jstack(self, jstack: str) -> ConsumerRunningInfo:
        """A copy carrying the thread stacks ``jstack``."""
        return dataclasses.replace(self, jstack=jstack)

    def subscription_key(self) -> frozenset[tuple[str, str, str]]:
        """The subscriptions as RocketMQ's ``SubscriptionData.equals`` compares them (topic,
        expression and its type; not the version, which differs from member to member)."""
        return frozenset((s.topic, s.sub_string, s.expression_type) for s in self.subscriptions)


@dataclass(frozen=True, slots=True)
class ConsumeMessageDirectlyResult:
    """How a consumer's handler took one message sent to it directly (RocketMQ's
    ``ConsumeMessageDirectlyResult``)."""

    order: bool
    auto_commit: bool
    consume_result: CMResult
    remark: str = ""
    spent_time_mills: int = 0


def encode_running_info(info: ConsumerRunningInfo) -> bytes:
    """The GET_CONSUMER_RUNNING_INFO response body."""
    wire: dict[str, Any] = {
        "properties": dict(sorted(info.properties.items())),
        "subscriptionSet": [subscription_to_wire(s) for s in info.subscriptions],
        "mqTable": [_queue_info_to_wire(q) for q in info.queues],
        "statusTable": {
            topic: {wire: getattr(s, attr) for wire, attr, _ in _STATUS_FIELDS}
            for topic, s in sorted(info.status.items())
        },
    }
    if info.jstack is not None:
        wire["jstack"] = info.jstack
    return _pack(wire)


def _queue_info_to_wire(q: ProcessQueueInfo) -> dict[str, Any]:
    row: dict[str, Any] = {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id}
    row.update({wire: getattr(q, attr) for wire, attr, _ in _QUEUE_INFO_FIELDS})
    return row


def decode_running_info(body: bytes) -> ConsumerRunningInfo:
    """Parse a GET_CONSUMER_RUNNING_INFO response body."""
    what = "ConsumerRunningInfo"
    wire = _unpack_map(body, what)
    props = _get(wire, "properties", dict, what, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise BadRequestError(f"{what}: 'properties' must map text to text")
    subs = _rows(wire, "subscriptionSet", what)
    status = _get(wire, "statusTable", dict, what, {})
    if not all(isinstance(t, str) and isinstance(s, dict) for t, s in status.items()):
        raise BadRequestError(f"{what}: 'statusTable' must map topics to maps")
    return ConsumerRunningInfo(
        dict(props),
        tuple(_subscription_from_wire(s) for s in subs),
        tuple(_queue_info_from_wire(r, what) for r in _rows(wire, "mqTable", what)),
        {
            topic: ConsumeStatus(
                **{attr: _get(s, wire, kind, what, kind()) for wire, attr, kind in _STATUS_FIELDS}
            )
            for topic, s in status.items()
        },
        _get(wire, "jstack", str, what) if "jstack" in wire else None,
    )


def _queue_info_from_wire(row: Mapping[str, Any], what: str) -> ProcessQueueInfo:
    values = {attr: _get(row, wire, kind, what, kind()) for wire, attr, kind in _QUEUE_INFO_FIELDS}
    return ProcessQueueInfo(
        _get(row, "topic", str, what),
        _get(row, "brokerName", str, what),
        _get(row, "queueId", int, what),
        **values,
    )


def encode_direct_result(result: ConsumeMessageDirectlyResult) -> bytes:
    """The CONSUME_MESSAGE_DIRECTLY response body."""
    return _pack(
        {
            "order": result.order,
            "autoCommit": result.auto_commit,
            "consumeResult": result.consume_result.value,
            "remark": result.remark,
            "spentTimeMills": result.spent_time_mills,
        }
    )


def decode_direct_result(body: bytes) -> ConsumeMessageDirectlyResult:
    """Parse a CONSUME_MESSAGE_DIRECTLY response body."""
    what = "ConsumeMessageDirectlyResult"
    wire = _unpack_map(body, what)
    name = _get(wire, "consumeResult", str, what)
    try:
        result = CMResult(name)
    except ValueError:
        raise BadRequestError(f"{what}: unknown consumeResult {name!r}") from None
    return ConsumeMessageDirectlyResult(
        _get(wire, "order", bool, what, False),
        _get(wire, "autoCommit", bool, what, True),
        result,
        _get(wire, "remark", str, what, ""),
        _get(wire, "spentTimeMills", int, what, 0),
    )
