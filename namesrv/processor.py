"""The name server's request handlers (RocketMQ's ``DefaultRequestProcessor``).

:class:`NamesrvProcessor` wraps a :class:`~namesrv.route_info.RouteInfoManager` and a ``now_ms``
clock and offers :meth:`NamesrvProcessor.handlers`, the ``{code: handler}`` table that
:class:`~remoting.server.RemotingServer` serves::

    REGISTER_BROKER                     103  ext: brokerName brokerAddr clusterName haServerAddr
                                             brokerId; body {"topicConfigTable", "filterServerList",
                                             "dataVersion"}
    UNREGISTER_BROKER                   104  ext: clusterName brokerAddr brokerName brokerId
    GET_ROUTEINFO_BY_TOPIC              105  ext: topic -> TopicRouteData map | TOPIC_NOT_EXIST;
                                             with orderMessageEnable, the map carries the
                                             topic's ORDER_TOPIC_CONFIG KV entry as
                                             orderTopicConf (when there is one)
    GET_BROKER_CLUSTER_INFO             106  -> ClusterInfo map
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER  206  -> {"topicList": [...]}
    WIPE_WRITE_PERM_OF_BROKER           205  ext: brokerName -> ext: wipeTopicCount
    DELETE_TOPIC_IN_NAMESRV             216  ext: topic
    GET_TOPICS_BY_CLUSTER               224  ext: cluster -> {"topicList": [...]}
    ADD_WRITE_PERM_OF_BROKER            327  ext: brokerName -> ext: addTopicCount
    PUT_KV_CONFIG                       100  ext: namespace key value
    GET_KV_CONFIG                       101  ext: namespace key -> ext: value | QUERY_NOT_FOUND
    DELETE_KV_CONFIG                    102  ext: namespace key (SUCCESS even when absent)
    UPDATE_NAMESRV_CONFIG               318  body: key=value lines (.properties text) ->
                                             NO_PERMISSION for a configBlackList key,
                                             INVALID_PARAMETER for any other key that does not
                                             change at runtime or a bad value, SYSTEM_ERROR
                                             when configStorePath cannot be written (nothing
                                             changed in any of these cases)
    GET_NAMESRV_CONFIG                  319  -> body: the effective config, key=value lines
                                             (as ``mqnamesrv -p`` prints)

Rules:

- Bodies are msgpack maps, converted by :mod:`remoting.route_bodies` (shared with the broker and
  the client).
- A missing or ill-typed header field or an undecodable body is answered ``SYSTEM_ERROR`` with a
  remark naming the field (RocketMQ answers a failed header decode the same way); no handler
  lets an exception out.
- ``brokerId`` is accepted as an int or as a decimal string (RocketMQ sends every header as a
  string).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from common.properties import parse_properties
from common.route import NAMESPACE_ORDER_TOPIC_CONFIG, TopicRouteData
from namesrv.config import ConfigUpdateRefused, NamesrvConfig, updated_config
from namesrv.kv_config import KVConfigManager
from namesrv.route_info import RegisterResult, RouteInfoManager
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.headers import error, guarded, header_int, header_str, opt_str
from remoting.route_bodies import (
    decode_register_body,
    encode_cluster_info_body,
    encode_route_body,
    encode_topic_list_body,
)

log = logging.getLogger(__name__)


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
    """The name server's handlers over ``route_info`` and ``kv_config``; ``now_ms`` stamps
    registrations; ``config`` gives the effective config and ``apply_config`` saves and
    replaces it (raising OSError, nothing changed, when it cannot save it)."""

    def __init__(
        self,
        route_info: RouteInfoManager,
        now_ms: Callable[[], int],
        *,
        kv_config: KVConfigManager,
        config: Callable[[], NamesrvConfig],
        apply_config: Callable[[NamesrvConfig], None],
    ) -> None:
        self.route_info = route_info
        self.now_ms = now_ms
        self.kv_config = kv_config
        self.config = config
        self.apply_config = apply_config
        self._registered_over: dict[str, Channel] = {}
        """Broker address -> the connection of its latest registration."""

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table for :class:`~remoting.server.RemotingServer`."""
        table: dict[int, Callable[[RemotingCommand], RemotingCommand]] = {
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm_of_broker,
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }
        out = {int(code): _guarded(fn) for code, fn in table.items()}
        out[int(RequestCode.REGISTER_BROKER)] = guarded(self._register_over)  # needs the channel
        return out

    async def _register_over(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        response, result = self._register(request)
        if not result.stale:  # a late, older registration does not move the broker's connection
            self._registered_over[header_str(request, "brokerAddr")] = channel
        return response

    def channel_closed(self, channel: Channel) -> None:
        """A connection ended: the brokers whose latest registration came over it are gone
        now, not 120 s later (RocketMQ's ``BrokerHousekeepingService``)."""
        gone = [addr for addr, ch in self._registered_over.items() if ch is channel]
        for addr in gone:
            del self._registered_over[addr]
            self.route_info.on_channel_destroy(addr)
            log.info("broker %s: its connection closed; removed from the routes", addr)

    def register_broker(self, request: RemotingCommand) -> RemotingCommand:
        """REGISTER_BROKER: record the heartbeat and (from a master) the topics, unless the
        body's ``dataVersion`` is older than the one last applied from that address."""
        return self._register(request)[0]

    def _register(self, request: RemotingCommand) -> tuple[RemotingCommand, RegisterResult]:
        broker_name = header_str(request, "brokerName")
        broker_addr = header_str(request, "brokerAddr")
        cluster = header_str(request, "clusterName")
        ha_server_addr = header_str(request, "haServerAddr", allow_empty=True)
        broker_id = header_int(request, "brokerId")
        body = decode_register_body(request.body)
        result = self.route_info.register_broker(
            cluster,
            broker_addr,
            broker_name,
            broker_id,
            ha_server_addr,
            body.topic_configs,
            self.now_ms(),
            body.filter_server_list,
            body.data_version,
        )
        if result.stale:
            log.info(
                "broker %s: registration with %s is older than the applied one; topics kept",
                broker_addr,
                body.data_version,
            )
        else:
            log.debug(
                "registered broker %s (%s id=%d) of %s",
                broker_addr,
                broker_name,
                broker_id,
                cluster,
            )
        response = RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields=register_response_fields(result)
        )
        return response, result

    def unregister_broker(self, request: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_BROKER: forget one broker address."""
        cluster = header_str(request, "clusterName")
        broker_addr = header_str(request, "brokerAddr")
        broker_name = header_str(request, "brokerName")
        broker_id = header_int(request, "brokerId")
        self.route_info.unregister_broker(cluster, broker_addr, broker_name, broker_id)
        self._registered_over.pop(broker_addr, None)
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
        route = self._with_order_topic_conf(topic, route)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_route_body(route)
        )

    def _with_order_topic_conf(self, topic: str, route: TopicRouteData) -> TopicRouteData:
        """``route`` with the topic's ORDER_TOPIC_CONFIG entry as ``orderTopicConf`` when
        ``orderMessageEnable`` is on (RocketMQ's ``getRouteInfoByTopic``)."""
        if not self.config().order_message_enable:
            return route
        conf = self.kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        return route if conf is None else dataclasses.replace(route, order_topic_conf=conf)

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
        """DELETE_TOPIC_IN_NAMESRV: drop the topic's route, or with ``clusterName`` only that
        cluster's part of it (SUCCESS even when absent)."""
        topic = header_str(request, "topic")
        cluster = opt_str(request, "clusterName", "") or None
        self.route_info.delete_topic(topic, cluster)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def wipe_write_perm_of_broker(self, request: RemotingCommand) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER: clear the write bit of the broker's queue data of every
        topic; ``wipeTopicCount`` says how many topics (0 for an unknown broker name)."""
        broker_name = header_str(request, "brokerName")
        count = self.route_info.wipe_write_perm_of_broker(broker_name)
        log.info("wiped the write perm of broker %s: %d topic(s)", broker_name, count)
        return _count_response(request, "wipeTopicCount", count)

    def add_write_perm_of_broker(self, request: RemotingCommand) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER: the broker's queue data of every topic gets perm 6 (read
        and write); ``addTopicCount`` says how many topics (0 for an unknown broker name)."""
        broker_name = header_str(request, "brokerName")
        count = self.route_info.add_write_perm_of_broker(broker_name)
        log.info("added the write perm of broker %s: %d topic(s)", broker_name, count)
        return _count_response(request, "addTopicCount", count)

    def put_kv_config(self, request: RemotingCommand) -> RemotingCommand:
        """PUT_KV_CONFIG: set ``key`` of ``namespace`` to ``value`` (saved to kvConfigPath)."""
        namespace = header_str(request, "namespace")
        key = header_str(request, "key")
        value = header_str(request, "value", allow_empty=True)
        self.kv_config.put(namespace, key, value)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def get_kv_config(self, request: RemotingCommand) -> RemotingCommand:
        """GET_KV_CONFIG: the ``value`` of ``key`` in ``namespace``, or QUERY_NOT_FOUND."""
        namespace = header_str(request, "namespace")
        key = header_str(request, "key")
        value = self.kv_config.get(namespace, key)
        if value is None:
            return error(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {namespace} Key: {key}",
            )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"value": value}
        )

    def delete_kv_config(self, request: RemotingCommand) -> RemotingCommand:
        """DELETE_KV_CONFIG: remove ``key`` of ``namespace`` (SUCCESS even when absent)."""
        self.kv_config.delete(header_str(request, "namespace"), header_str(request, "key"))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def update_config(self, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG: apply the body's ``key=value`` lines, all or nothing."""
        try:
            text = request.body.decode("utf-8")
            props = parse_properties(text, "the request body")
            config = updated_config(self.config(), props)
        except ConfigUpdateRefused as exc:
            refused = ResponseCode.INVALID_PARAMETER
            return error(
                request, ResponseCode.NO_PERMISSION if exc.black_listed else refused, str(exc)
            )
        except ValueError as exc:  # not UTF-8, or not properties text
            return error(request, ResponseCode.INVALID_PARAMETER, f"bad properties body: {exc}")
        try:
            self.apply_config(config)
        except OSError as exc:
            log.error("namesrv config update %s not saved: %s", props, exc)
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"cannot save the config to configStorePath, nothing changed: {exc}",
            )
        log.info("namesrv config updated: %s", props)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def get_config(self, request: RemotingCommand) -> RemotingCommand:
        """GET_NAMESRV_CONFIG: the effective config as ``key=value`` lines."""
        body = self.config().to_properties().encode("utf-8")
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)


def _count_response(request: RemotingCommand, name: str, count: int) -> RemotingCommand:
    """SUCCESS with the header ``name`` holding ``count`` (as a string, as RocketMQ's)."""
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, ext_fields={name: str(count)})


def _guarded(fn: Callable[[RemotingCommand], RemotingCommand]) -> Handler:
    """The name server's handlers are synchronous table updates; run one as a guarded handler."""

    async def handler(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        return fn(request)

    return guarded(handler)
