"""Bodies of the admin requests, as pure msgpack codecs shared by broker and ``mqadmin``.

Maps with RocketMQ's field names; a ``MessageQueue``-keyed Java map becomes a list of maps
carrying ``topic``/``brokerName``/``queueId`` next to the values:

- GET_TOPIC_STATS_INFO response (``TopicStatsTable``): ``{"offsetTable": [{"topic",
  "brokerName", "queueId", "minOffset", "maxOffset", "lastUpdateTimestamp"}]}``.
- GET_CONSUME_STATS response (``ConsumeStats``): ``{"offsetTable": [{"topic", "brokerName",
  "queueId", "brokerOffset", "consumerOffset", "pullOffset", "lastTimestamp"}], "consumeTps"}``
  (a row without ``pullOffset``, from an older broker, reads as -1: unknown, nothing in
  flight).
- GET_CONSUMER_CONNECTION_LIST response (``ConsumerConnection``): ``{"connectionSet":
  [{"clientId", "clientAddr", "language", "version"}], "subscriptionTable": {topic:
  {"topic", "subString", ...}}, "consumeType", "messageModel", "consumeFromWhere"}``.
- GET_PRODUCER_CONNECTION_LIST response (``ProducerConnection``): ``{"connectionSet": [...]}``.
- INVOKE_BROKER_TO_RESET_OFFSET response and RESET_CONSUMER_CLIENT_OFFSET request
  (``ResetOffsetBody``): ``{"offsetTable": [{"topic", "brokerName", "queueId", "offset"}]}``.
- VIEW_BROKER_STATS_DATA response (``BrokerStatsData``): ``{"statsMinute", "statsHour",
  "statsDay"}``, each a ``BrokerStatsItem`` ``{"sum", "tps", "avgpt"}``.
- GET_BROKER_CONSUME_STATS response (``ConsumeStatsList``): ``{"consumeStatsList": [{group:
  [ConsumeStats, ...]}], "brokerAddr", "totalDiff", "totalInflightDiff"}``: RocketMQ's list of
  one-entry maps, each group's ConsumeStats (the GET_CONSUME_STATS map) one per topic.

``decode_*`` raise :class:`~remoting.headers.BadRequestError` (a ``ValueError``) naming the
offending field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from remoting.headers import BadRequestError


def _pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _unpack_map(body: bytes, what: str) -> Mapping[str, Any]:
    try:
        wire = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadRequestError(f"body of {what} is not valid msgpack: {exc}") from None
    if not isinstance(wire, dict):
        raise BadRequestError(f"body of {what} must be a map")
    return wire


def _get(wire: Mapping[str, Any], key: str, kind: type, what: str, default: Any = ...) -> Any:
    value = wire.get(key, default)
    if value is ...:
        raise BadRequestError(f"{what}: missing {key!r}")
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise BadRequestError(f"{what}: {key!r} must be {kind.__name__}")
    return value


def _rows(wire: Mapping[str, Any], key: str, what: str) -> list[Mapping[str, Any]]:
    rows: list[Mapping[str, Any]] = _get(wire, key, list, what, [])
    if not all(isinstance(r, dict) for r in rows):
        raise BadRequestError(f"{what}: {key!r} must be a list of maps")
    return rows


# ---------------------------------------------------------------------- topic stats


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue's row in a ``TopicStatsTable``."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


def encode_topic_stats(rows: list[TopicOffset]) -> bytes:
    """The GET_TOPIC_STATS_INFO response body."""
    return _pack(
        {
            "offsetTable": [
                {
                    "topic": r.topic,
                    "brokerName": r.broker_name,
                    "queueId": r.queue_id,
                    "minOffset": r.min_offset,
                    "maxOffset": r.max_offset,
                    "lastUpdateTimestamp": r.last_update_timestamp,
                }
                for r in rows
            ]
        }
    )


def decode_topic_stats(body: bytes) -> list[TopicOffset]:
    """Parse a GET_TOPIC_STATS_INFO response body."""
    what = "TopicStatsTable"
    return [
        TopicOffset(
            _get(r, "topic", str, what),
            _get(r, "brokerName", str, what),
            _get(r, "queueId", int, what),
            _get(r, "minOffset", int, what),
            _get(r, "maxOffset", int, what),
            _get(r, "lastUpdateTimestamp", int, what, 0),
        )
        for r in _rows(_unpack_map(body, what), "offsetTable", what)
    ]


# ---------------------------------------------------------------------- consume stats


@dataclass(frozen=True, slots=True)
class QueueConsumeStats:
    """One queue's row in ``ConsumeStats`` (``OffsetWrapper`` plus its queue)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    pull_offset: int = -1
    """Where the group's pulls got to (RocketMQ's ``OffsetWrapper.pullOffset``; a broker
    gives at least the consumer offset); -1 (the default) when unknown."""

    @property
    def diff(self) -> int:
        """Messages not consumed yet (``brokerOffset - consumerOffset``)."""
        return self.broker_offset - self.consumer_offset

    @property
    def inflight(self) -> int:
        """Messages pulled and not committed yet (``pullOffset - consumerOffset``, RocketMQ
        5's ``#Inflight``); 0 when the pull offset is unknown."""
        return max(0, self.pull_offset - self.consumer_offset)


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    """GET_CONSUME_STATS answer of one broker."""

    rows: tuple[QueueConsumeStats, ...]
    consume_tps: float = 0.0


def encode_consume_stats(stats: ConsumeStats) -> bytes:
    """The GET_CONSUME_STATS response body."""
    return _pack(_consume_stats_to_wire(stats))


def _consume_stats_to_wire(stats: ConsumeStats) -> dict[str, Any]:
    return {
        "offsetTable": [
            {
                "topic": r.topic,
                "brokerName": r.broker_name,
                "queueId": r.queue_id,
                "brokerOffset": r.broker_offset,
                "consumerOffset": r.consumer_offset,
                "pullOffset": r.pull_offset,
                "lastTimestamp": r.last_timestamp,
            }
            for r in stats.rows
        ],
        "consumeTps": stats.consume_tps,
    }


def decode_consume_stats(body: bytes) -> ConsumeStats:
    """Parse a GET_CONSUME_STATS response body."""
    what = "ConsumeStats"
    return _consume_stats_from_wire(_unpack_map(body, what), what)


def _consume_stats_from_wire(wire: Mapping[str, Any], what: str) -> ConsumeStats:
    rows = tuple(
        QueueConsumeStats(
            _get(r, "topic", str, what),
            _get(r, "brokerName", str, what),
            _get(r, "queueId", int, what),
            _get(r, "brokerOffset", int, what),
            _get(r, "consumerOffset", int, what),
            _get(r, "lastTimestamp", int, what, 0),
            _get(r, "pullOffset", int, what, -1),
        )
        for r in _rows(wire, "offsetTable", what)
    )
    return ConsumeStats(rows, _get(wire, "consumeTps", float, what, 0.0))


# ---------------------------------------------------------------------- connections


@dataclass(frozen=True, slots=True)
class Connection:
    """One connected client (RocketMQ's ``Connection``)."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST answer: members plus the group's newest heartbeat data.

    ``subscriptions`` maps a topic to its sub expression (``subString``).
    """

    connections: tuple[Connection, ...]
    subscriptions: dict[str, str]
    consume_type: str
    message_model: str
    consume_from_where: str


def _connections_to_wire(conns: tuple[Connection, ...]) -> list[dict[str, Any]]:
    return [
        {
            "clientId": c.client_id,
            "clientAddr": c.client_addr,
            "language": c.language,
            "version": c.version,
        }
        for c in conns
    ]


def _connections_from_wire(wire: Mapping[str, Any], what: str) -> tuple[Connection, ...]:
    return tuple(
        Connection(
            _get(c, "clientId", str, what),
            _get(c, "clientAddr", str, what),
            _get(c, "language", str, what, "OTHER"),
            _get(c, "version", int, what, 0),
        )
        for c in _rows(wire, "connectionSet", what)
    )


def encode_consumer_connection(cc: ConsumerConnection) -> bytes:
    """The GET_CONSUMER_CONNECTION_LIST response body."""
    return _pack(
        {
            "connectionSet": _connections_to_wire(cc.connections),
            "subscriptionTable": {
                t: {"topic": t, "subString": s} for t, s in sorted(cc.subscriptions.items())
            },
            "consumeType": cc.consume_type,
            "messageModel": cc.message_model,
            "consumeFromWhere": cc.consume_from_where,
        }
    )


def decode_consumer_connection(body: bytes) -> ConsumerConnection:
    """Parse a GET_CONSUMER_CONNECTION_LIST response body."""
    what = "ConsumerConnection"
    wire = _unpack_map(body, what)
    table = _get(wire, "subscriptionTable", dict, what, {})
    subs: dict[str, str] = {}
    for topic, sub in table.items():
        if not isinstance(topic, str) or not isinstance(sub, dict):
            raise BadRequestError(f"{what}: bad subscriptionTable entry {topic!r}")
        subs[topic] = _get(sub, "subString", str, what, "*")
    return ConsumerConnection(
        _connections_from_wire(wire, what),
        subs,
        _get(wire, "consumeType", str, what, ""),
        _get(wire, "messageModel", str, what, ""),
        _get(wire, "consumeFromWhere", str, what, ""),
    )


def encode_producer_connection(conns: tuple[Connection, ...]) -> bytes:
    """The GET_PRODUCER_CONNECTION_LIST response body."""
    return _pack({"connectionSet": _connections_to_wire(conns)})


def decode_producer_connection(body: bytes) -> tuple[Connection, ...]:
    """Parse a GET_PRODUCER_CONNECTION_LIST response body."""
    what = "ProducerConnection"
    return _connections_from_wire(_unpack_map(body, what), what)


# ---------------------------------------------------------------------- offset resets


@dataclass(frozen=True, slots=True, order=True)
class QueueOffset:
    """A queue and an offset (one entry of a ``ResetOffsetBody``)."""

    topic: str
    broker_name: str
    queue_id: int
    offset: int


def encode_reset_offset(entries: list[QueueOffset]) -> bytes:
    """A ``ResetOffsetBody`` (INVOKE_BROKER_TO_RESET_OFFSET answer, RESET_CONSUMER_CLIENT_OFFSET
    request)."""
    return _pack(
        {
            "offsetTable": [
                {
                    "topic": e.topic,
                    "brokerName": e.broker_name,
                    "queueId": e.queue_id,
                    "offset": e.offset,
                }
                for e in entries
            ]
        }
    )


def decode_reset_offset(body: bytes) -> list[QueueOffset]:
    """Parse a ``ResetOffsetBody``."""
    what = "ResetOffsetBody"
    return [
        QueueOffset(
            _get(r, "topic", str, what),
            _get(r, "brokerName", str, what),
            _get(r, "queueId", int, what),
            _get(r, "offset", int, what),
        )
        for r in _rows(_unpack_map(body, what), "offsetTable", what)
    ]


# ---------------------------------------------------------------------- broker stats


@dataclass(frozen=True, slots=True)
class BrokerStatsItem:
    """One window of a ``BrokerStatsData``: messages (or bytes) in it, their rate a second,
    and their average per request."""

    sum: int
    tps: float
    avgpt: float


@dataclass(frozen=True, slots=True)
class BrokerStatsData:
    """VIEW_BROKER_STATS_DATA answer: one stats item over a minute, an hour and a day."""

    stats_minute: BrokerStatsItem
    stats_hour: BrokerStatsItem
    stats_day: BrokerStatsItem


_STATS_WINDOWS = ("statsMinute", "statsHour", "statsDay")


def encode_broker_stats_data(data: BrokerStatsData) -> bytes:
    """The VIEW_BROKER_STATS_DATA response body."""
    items = (data.stats_minute, data.stats_hour, data.stats_day)
    return _pack(
        {
            key: {"sum": item.sum, "tps": item.tps, "avgpt": item.avgpt}
            for key, item in zip(_STATS_WINDOWS, items, strict=True)
        }
    )


def decode_broker_stats_data(body: bytes) -> BrokerStatsData:
    """Parse a VIEW_BROKER_STATS_DATA response body."""
    what = "BrokerStatsData"
    wire = _unpack_map(body, what)
    items = []
    for key in _STATS_WINDOWS:
        item = _get(wire, key, dict, what)
        items.append(
            BrokerStatsItem(
                _get(item, "sum", int, what),
                _get(item, "tps", float, what),
                _get(item, "avgpt", float, what),
            )
        )
    return BrokerStatsData(*items)


# ---------------------------------------------------------------------- broker consume stats


@dataclass(frozen=True, slots=True)
class ConsumeStatsList:
    """GET_BROKER_CONSUME_STATS answer: every subscription group's consume stats on one
    broker, one ``ConsumeStats`` per topic, and the diffs summed."""

    groups: tuple[tuple[str, tuple[ConsumeStats, ...]], ...]
    """``(group, its ConsumeStats per topic)``, in the broker's order."""
    broker_addr: str
    total_diff: int
    total_inflight_diff: int = 0


def encode_consume_stats_list(stats: ConsumeStatsList) -> bytes:
    """The GET_BROKER_CONSUME_STATS response body."""
    return _pack(
        {
            "consumeStatsList": [
                {group: [_consume_stats_to_wire(s) for s in per_topic]}
                for group, per_topic in stats.groups
            ],
            "brokerAddr": stats.broker_addr,
            "totalDiff": stats.total_diff,
            "totalInflightDiff": stats.total_inflight_diff,
        }
    )


def decode_consume_stats_list(body: bytes) -> ConsumeStatsList:
    """Parse a GET_BROKER_CONSUME_STATS response body."""
    what = "ConsumeStatsList"
    wire = _unpack_map(body, what)
    groups: list[tuple[str, tuple[ConsumeStats, ...]]] = []
    for entry in _rows(wire, "consumeStatsList", what):
        for group, per_topic in entry.items():
            if not isinstance(group, str) or not isinstance(per_topic, list):
                raise BadRequestError(f"{what}: bad consumeStatsList entry {group!r}")
            if not all(isinstance(s, dict) for s in per_topic):
                raise BadRequestError(f"{what}: the stats of {group!r} must be maps")
            stats = tuple(_consume_stats_from_wire(s, what) for s in per_topic)
            groups.append((group, stats))
    return ConsumeStatsList(
        tuple(groups),
        _get(wire, "brokerAddr", str, what, ""),
        _get(wire, "totalDiff", int, what, 0),
        _get(wire, "totalInflightDiff", int, what, 0),
    )
