"""The name server's request handlers (RocketMQ's ``DefaultRequestProcessor``).

:class:`NamesrvProcessor` wraps a :class:`~namesrv.route_info.RouteInfoManager` and a ``now_ms``
clock and offers :meth:`NamesrvProcessor.handlers`, the ``{code: handler}`` table that
:class:`~remoting.server.RemotingServer` serves::

    REGISTER_BROKER                     103  ext: brokerName brokerAddr clusterName haServerAddr
                                             brokerId; body {"topicConfigTable", "filterServerList"}
    UNREGISTER_BROKER                   104  ext: clusterName brokerAddr brokerName brokerId
    GET_ROUTEINFO_BY_TOPIC              105  ext: topic -> TopicRouteData map | TOPIC_NOT_EXIST
    GET_BROKER_CLUSTER_INFO             106  -> ClusterInfo map
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER  206  -> {"topicList": [...]}
    DELETE_TOPIC_IN_NAMESRV             216  ext: topic
    GET_TOPICS_BY_CLUSTER               224  ext: cluster -> {"topicList": [...]}

Rules:

- Bodies are msgpack maps; the pure ``encode_*`` / ``decode_*`` helpers below convert them (the
  ``decode_*`` ones raise :class:`BadRequestError`, a ``ValueError``, on malformed input).
- A missing or ill-typed header field or an undecodable body is answered ``SYSTEM_ERROR`` with a
  remark naming the field (RocketMQ answers a failed header decode the same way); no handler
  lets an exception out.
- ``brokerId`` is accepted as an int or as a decimal string (RocketMQ sends every header as a
  string).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgpack

from common.route import ClusterInfo, TopicConfig, TopicRouteData
from namesrv.route_info import RegisterResult, RouteInfoManager
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.headers import BadRequestError, guarded, header_int, header_str

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- body helpers


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
    topic_configs: Mapping[str, TopicConfig], filter_server_list: Sequence[str] = ()
) -> bytes:
    """The REGISTER_BROKER body a broker sends."""
    return _pack(
        {
            "topicConfigTable": {t: c.to_wire() for t, c in topic_configs.items()},
            "filterServerList": list(filter_server_list),
        }
    )


def decode_register_body(body: bytes) -> tuple[dict[str, TopicConfig], list[str] | None]:
    """Topic configs and filter servers of a REGISTER_BROKER body (empty body: no topics).

    The filter server list is None when the body has none.
    """
    if not body:
        return {}, None
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
    return configs, filters


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


# --------------------------------------------------------------------------- header helpers


def register_response_fields(result: RegisterResult) -> dict[str, ExtValue]:
    """Response header of REGISTER_BROKER: ``haServerAddr`` / ``masterAddr`` when known."""
    fields: dict[str, ExtValue] = {}
    if result.ha_server_addr is not None:
        fields["haServerAddr"] = result.ha_server_addr
    if result.master_addr is not None:
        fields["masterAddr"] = result.master_addr
    return fields


# --------------------------------------------------------------------------- processor


class NamesrvProcessor:
    """The name server's handlers over ``route_info``; ``now_ms`` stamps registrations."""

    def __init__(self, route_info: RouteInfoManager, now_ms: Callable[[], int]) -> None:
        self.route_info = route_info
        self.now_ms = now_ms

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table for :class:`~remoting.server.RemotingServer`."""
        table: dict[int, Callable[[RemotingCommand], RemotingCommand]] = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
        }
        return {int(code): _guarded(fn) for code, fn in table.items()}

    def register_broker(self, request: RemotingCommand) -> RemotingCommand:
        """REGISTER_BROKER: record the heartbeat and (from a master) the topics."""
        broker_name = header_str(request, "brokerName")
        broker_addr = header_str(request, "brokerAddr")
        cluster = header_str(request, "clusterName")
        ha_server_addr = header_str(request, "haServerAddr", allow_empty=True)
        broker_id = header_int(request, "brokerId")
        topic_configs, filter_servers = decode_register_body(request.body)
        result = self.route_info.register_broker(
            cluster,
            broker_addr,
            broker_name,
            broker_id,
            ha_server_addr,
            topic_configs,
            self.now_ms(),
            filter_servers,
        )
        log.debug(
            "registered broker %s (%s id=%d) of %s", broker_addr, broker_name, broker_id, cluster
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields=register_response_fields(result)
        )

    def unregister_broker(self, request: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_BROKER: forget one broker address."""
        cluster = header_str(request, "clusterName")
        broker_addr = header_str(request, "brokerAddr")
        broker_name = header_str(request, "brokerName")
        broker_id = header_int(request, "brokerId")
        self.route_info.unregister_broker(cluster, broker_addr, broker_name, broker_id)
        log.info(
            "unregistered broker %s (%s id=%d) of %s", broker_addr, broker_name, broker_id, cluster
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def get_route_info_by_topic(self, request: RemotingCommand) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC: the topic's route, or TOPIC_NOT_EXIST."""
        topic = header_str(request, "topic")
        route = self.route_info.pick_topic_route(topic)
        if route is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}",
            )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_route_body(route)
        )

    def get_broker_cluster_info(self, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO: brokers and clusters."""
        body = encode_cluster_info_body(self.route_info.get_all_cluster_info())
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def get_all_topic_list(self, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER: every topic with queue data."""
        body = encode_topic_list_body(self.route_info.get_all_topic_list())
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def get_topics_by_cluster(self, request: RemotingCommand) -> RemotingCommand:
        """GET_TOPICS_BY_CLUSTER: topics with queue data on the cluster."""
        cluster = header_str(request, "cluster")
        body = encode_topic_list_body(self.route_info.get_topics_by_cluster(cluster))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def delete_topic(self, request: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV: drop the topic's route (SUCCESS even when absent)."""
        topic = header_str(request, "topic")
        self.route_info.delete_topic(topic)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


def _guarded(fn: Callable[[RemotingCommand], RemotingCommand]) -> Handler:
    """The name server's handlers are synchronous table updates; run one as a guarded handler."""

    async def handler(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        return fn(request)

    return guarded(handler)
