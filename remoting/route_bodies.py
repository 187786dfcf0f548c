"""Bodies of the name-server requests, as pure msgpack codecs (shared by name server, broker and
client, so none of them imports another's package).

Bodies are msgpack maps with RocketMQ's field names; ``decode_*`` raise
:class:`~remoting.headers.BadRequestError` (a ``ValueError``) on malformed input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from common.route import ClusterInfo, DataVersion, TopicConfig, TopicRouteData
from remoting.headers import BadRequestError


def _unpack(body: bytes, what: str) -> Any:
    """Decode a msgpack body (int map keys allowed); BadRequestError naming ``what``."""
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadRequestError(f"body of {what} is not valid msgpack: {exc}") from None


def _pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def encode_register_body(
    topic_configs: Mapping[str, TopicConfig],
    filter_server_list: Sequence[str] = (),
    data_version: DataVersion | None = None,
) -> bytes:
    """The REGISTER_BROKER body a broker sends (RocketMQ's ``TopicConfigSerializeWrapper``
    fields plus ``filterServerList``)."""
    body: dict[str, Any] = {
        "topicConfigTable": {t: c.to_wire() for t, c in topic_configs.items()},
        "filterServerList": list(filter_server_list),
    }
    if data_version is not None:
        body["dataVersion"] = data_version.to_wire()
    return _pack(body)


class RegisterBody(NamedTuple):
    """A decoded REGISTER_BROKER body."""

    topic_configs: dict[str, TopicConfig]
    filter_server_list: list[str] | None
    """None when the body has none."""
    data_version: DataVersion | None
    """None when the body has none (a broker that sends no version)."""


def decode_register_body(body: bytes) -> RegisterBody:
    """Topic configs, filter servers and data version of a REGISTER_BROKER body (empty body:
    no topics, no version)."""
    if not body:
        return RegisterBody({}, None, None)
    wire = _unpack(body, "REGISTER_BROKER")
    if not isinstance(wire, dict):
        raise BadRequestError(f"REGISTER_BROKER body must be a map, got {type(wire).__name__}")
    table = wire.get("topicConfigTable", {})
    if not isinstance(table, dict):
        raise BadRequestError("REGISTER_BROKER body: 'topicConfigTable' must be a map")
    configs: dict[str, TopicConfig] = {}
    for topic, config_wire in table.items():
        if not isinstance(topic, str):
            raise BadRequestError(f"REGISTER_BROKER body: topic {topic!r} must be a str")
        try:
            configs[topic] = TopicConfig.from_wire(config_wire)
        except ValueError as exc:
            raise BadRequestError(
                f"REGISTER_BROKER body: topicConfigTable[{topic!r}]: {exc}"
            ) from None
    filters = wire.get("filterServerList")
    if filters is not None and (
        not isinstance(filters, list) or not all(isinstance(s, str) for s in filters)
    ):
        raise BadRequestError("REGISTER_BROKER body: 'filterServerList' must be a list of str")
    return RegisterBody(configs, filters, _data_version(wire.get("dataVersion")))


def _data_version(wire: object) -> DataVersion | None:
    """The body's ``dataVersion`` (None when absent); BadRequestError when malformed."""
    if wire is None:
        return None
    try:
        return DataVersion.from_wire(wire)
    except ValueError as exc:
        raise BadRequestError(f"REGISTER_BROKER body: {exc}") from None


def encode_route_body(route: TopicRouteData) -> bytes:
    """The GET_ROUTEINFO_BY_TOPIC response body."""
    return _pack(route.to_wire())


def decode_route_body(body: bytes) -> TopicRouteData:
    """Parse a GET_ROUTEINFO_BY_TOPIC response body."""
    try:
        return TopicRouteData.from_wire(_unpack(body, "GET_ROUTEINFO_BY_TOPIC"))
    except BadRequestError:
        raise
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


def encode_cluster_info_body(info: ClusterInfo) -> bytes:
    """The GET_BROKER_CLUSTER_INFO response body."""
    return _pack(info.to_wire())


def decode_cluster_info_body(body: bytes) -> ClusterInfo:
    """Parse a GET_BROKER_CLUSTER_INFO response body."""
    try:
        return ClusterInfo.from_wire(_unpack(body, "GET_BROKER_CLUSTER_INFO"))
    except BadRequestError:
        raise
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


def encode_topic_list_body(topics: Sequence[str]) -> bytes:
    """A ``TopicList`` body: ``{"topicList": [...]}``."""
    return _pack({"topicList": list(topics)})


def decode_topic_list_body(body: bytes) -> list[str]:
    """Parse a ``TopicList`` body."""
    wire = _unpack(body, "TopicList")
    topics = wire.get("topicList") if isinstance(wire, dict) else None
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise BadRequestError("TopicList body: 'topicList' must be a list of str")
    return topics
