"""AdminClient: the requests behind ``mqadmin`` (RocketMQ's ``DefaultMQAdminExt``), trio-native.

``async with AdminClient(namesrv) as admin:`` opens one :class:`~client.instance.ClientInstance`
(connections and routes; it registers no producer or consumer, so it sends no heartbeats).
Every method raises :class:`~client.errors.MQClientError` (``MQBrokerError`` for an error
answer) with a one-line reason; nothing is retried. With ``access_key`` / ``secret_key`` every
request is signed (brokers and name servers with ACL on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import msgpack
import trio

from client import api
from client.config import ClientConfig
from client.errors import MQBrokerError, MQClientError, TopicRouteError
from client.instance import ClientInstance
from client.message import MessageQueue, ReceivedMessage, from_record
from common.digits import parse_uint
from common.message_id import decode_offset_msg_id
from common.properties import escape_key, escape_value, parse_properties
from common.record import RecordError, decode_records
from common.route import MASTER_ID, ClusterInfo, TopicConfig, TopicRouteData
from common.subscription import build_subscription
from remoting import admin_bodies as bodies
from remoting.acl import wire as acl_wire
from remoting.acl.edit import AccountChange
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.consume_queue_bodies import QueryConsumeQueueBody, decode_query_consume_queue
from remoting.consumer_bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    decode_direct_result,
    decode_running_info,
)
from remoting.headers import BadRequestError, header_int
from remoting.route_bodies import decode_cluster_info_body, decode_topic_list_body

T = TypeVar("T")

CONSUMER_CALL_TIMEOUT_FACTOR = 3
"""A call the broker forwards to a consumer waits this many request timeouts (15 s by
default), longer than the broker waits for the consumer (10 s)."""
TOOLS_CONSUMER = "TOOLS_CONSUMER"
"""The group RocketMQ's tools pull with (a built-in subscription group)."""


@dataclass(frozen=True)
class MessageQuery:
    """What :meth:`AdminClient.query_message` found, and the brokers that failed to answer."""

    messages: list[ReceivedMessage]
    """The matching messages of the brokers that answered, broker by broker (name order)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Broker name -> why it did not answer (the reason names its address)."""


class AdminClient:
    """Admin requests to the name servers and brokers; see the module docstring."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None,
        *,
        timeout_s: float = 5.0,
        access_key: str = "",
        secret_key: str = "",
    ) -> None:
        config = ClientConfig.create(
            namesrv,
            request_timeout_s=timeout_s,
            connect_timeout_s=timeout_s,
            access_key=access_key,
            secret_key=secret_key,
        )
        self.instance = ClientInstance(config)

    async def __aenter__(self) -> AdminClient:
        await self.instance.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.instance.__aexit__(exc_type, exc, tb)

    # ------------------------------------------------------------------ plumbing

    async def call(
        self,
        addr: str,
        code: RequestCode,
        fields: Mapping[str, ExtValue] | None = None,
        body: bytes = b"",
        *,
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """Send a request to ``addr``; MQBrokerError unless the answer's code is in ``ok``."""
        cmd = RemotingCommand.request(code, dict(fields or {}), body, opaque=0)
        resp = await self.instance.invoke(addr, cmd)
        if resp.code not in ok:
            raise MQBrokerError(resp.code, resp.remark or f"error code {resp.code}", addr)
        return resp

    async def call_namesrv(
        self, code: RequestCode, fields: Mapping[str, ExtValue] | None = None
    ) -> RemotingCommand:
        """Send a request to a name server (the first that answers)."""
        cmd = RemotingCommand.request(code, dict(fields or {}), opaque=0)
        resp, addr = await self.instance.invoke_namesrv(cmd)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark or f"error code {resp.code}", addr)
        return resp

    # ------------------------------------------------------------------ name server

    @property
    def namesrv_addrs(self) -> tuple[str, ...]:
        """The name servers of ``-n`` / ``NAMESRV_ADDR``, in the order given."""
        return self.instance.config.namesrv_addrs

    async def wipe_write_perm_of_broker(self, namesrv_addr: str, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER on the name server ``namesrv_addr``: the number of topics
        whose queue data of ``broker_name`` lost the write bit there (``wipeTopicCount``)."""
        return await self._write_perm_call(
            namesrv_addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_name, "wipeTopicCount"
        )

    async def add_write_perm_of_broker(self, namesrv_addr: str, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER on the name server ``namesrv_addr``: the number of topics
        whose queue data of ``broker_name`` got perm 6 there (``addTopicCount``)."""
        return await self._write_perm_call(
            namesrv_addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_name, "addTopicCount"
        )

    async def _write_perm_call(
        self, namesrv_addr: str, code: RequestCode, broker_name: str, count_field: str
    ) -> int:
        """One write-perm request to one name server; the count its answer's ``count_field``
        holds."""
        resp = await self.call(namesrv_addr, code, {"brokerName": broker_name})
        try:
            return header_int(resp, count_field)
        except BadRequestError as exc:
            raise MQBrokerError(
                ResponseCode.SYSTEM_ERROR, f"bad answer: {exc}", namesrv_addr
            ) from None

    async def put_kv_config(self, namesrv_addr: str, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG on the name server ``namesrv_addr``."""
        fields: dict[str, ExtValue] = {"namespace": namespace, "key": key, "value": value}
        await self.call(namesrv_addr, RequestCode.PUT_KV_CONFIG, fields)

    async def get_kv_config(self, namesrv_addr: str, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG on the name server ``namesrv_addr``: the value, or None when it has
        none (QUERY_NOT_FOUND)."""
        resp = await self.call(
            namesrv_addr,
            RequestCode.GET_KV_CONFIG,
            {"namespace": namespace, "key": key},
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if resp.code != ResponseCode.SUCCESS:
            return None
        value = resp.ext_fields.get("value")
        return None if value is None else str(value)

    async def delete_kv_config(self, namesrv_addr: str, namespace: str, key: str) -> None:
        """DELETE_KV_CONFIG on the name server ``namesrv_addr`` (done even when absent)."""
        fields: dict[str, ExtValue] = {"namespace": namespace, "key": key}
        await self.call(namesrv_addr, RequestCode.DELETE_KV_CONFIG, fields)

    async def namesrv_config(self, namesrv_addr: str) -> dict[str, str]:
        """GET_NAMESRV_CONFIG on the name server ``namesrv_addr``: key -> value, in its
        order."""
        resp = await self.call(namesrv_addr, RequestCode.GET_NAMESRV_CONFIG)
        return parse_properties(resp.body.decode("utf-8", "replace"))

    async def update_namesrv_config(self, namesrv_addr: str, props: Mapping[str, str]) -> None:
        """UPDATE_NAMESRV_CONFIG on the name server ``namesrv_addr``."""
        await self.call(
            namesrv_addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=properties_body(props)
        )

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO."""
        return decode_cluster_info_body(
            (await self.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body
        )

    async def topic_list(self, cluster: str | None = None) -> list[str]:
        """Topics (GET_ALL_TOPIC_LIST_FROM_NAMESERVER) or a cluster's (GET_TOPICS_BY_CLUSTER)."""
        if cluster is None:
            resp = await self.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        else:
            resp = await self.call_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        return sorted(decode_topic_list_body(resp.body))

    async def topic_route(self, topic: str) -> TopicRouteData:
        """The topic's current route; TopicRouteError when no name server knows it."""
        try:
            return await self.instance.topic_route(topic, refresh=True)
        except MQBrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TopicRouteError(topic) from None
            raise

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV on every name server (only ``cluster``'s part of the route
        when given); each is asked even when another fails, then MQClientError names those
        that failed."""
        fields: dict[str, ExtValue] = {"topic": topic}
        if cluster is not None:
            fields["clusterName"] = cluster
        failed: list[str] = []
        for addr in self.instance.config.namesrv_addrs:
            try:
                await self.call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, fields)
            except MQClientError as exc:
                failed.append(f"{addr}: {exc}")
        if failed:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"the topic was not deleted on name server(s) {'; '.join(failed)}; "
                "run the command again when they answer",
            )

    async def masters(
        self, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[tuple[str, str]]:
        """``(broker name, master address)`` of ``broker_addr``, of a cluster's brokers, or of
        every broker, sorted by name; MQClientError when there is none."""
        info = await self.cluster_info()
        out = []
        for name, data in sorted(info.broker_addr_table.items()):
            addr = data.broker_addrs.get(MASTER_ID)
            if addr is None or (cluster is not None and data.cluster != cluster):
                continue
            if broker_addr is None or broker_addr == addr:
                out.append((name, addr))
        if broker_addr is not None and not out:
            _check_broker_addr(broker_addr, info)
            return [(broker_addr, broker_addr)]  # a broker the name servers do not list
        if not out:
            what = f"cluster {cluster}" if cluster else "the name servers"
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no broker found in {what}")
        return out

    async def topic_masters(self, topic: str) -> list[tuple[str, str]]:
        """``(broker name, master address)`` of every broker hosting ``topic``."""
        route = await self.topic_route(topic)
        out = [
            (bd.broker_name, bd.broker_addrs[MASTER_ID])
            for bd in sorted(route.broker_datas, key=lambda b: b.broker_name)
            if MASTER_ID in bd.broker_addrs
        ]
        if not out:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no master broker hosts {topic}")
        return out

    # ------------------------------------------------------------------ topics and groups

    async def update_topic(self, addr: str, config: TopicConfig, attributes: str = "") -> None:
        """UPDATE_AND_CREATE_TOPIC on one broker. ``attributes`` is RocketMQ's modification
        string (``"+queue.type=BatchCQ"``; :func:`common.topic_attributes.add_modification`
        builds one from a map); empty keeps the topic's attributes as they are
        (``config.attributes`` is not sent)."""
        fields: dict[str, ExtValue] = {
            "topic": config.topic_name,
            "readQueueNums": config.read_queue_nums,
            "writeQueueNums": config.write_queue_nums,
            "perm": config.perm,
            "order": config.order,
        }
        if attributes:
            fields["attributes"] = attributes
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)

    async def topic_config(self, addr: str, topic: str) -> TopicConfig | None:
        """``topic``'s config as the broker at ``addr`` holds it (GET_ALL_TOPIC_CONFIG); None
        when it has none."""
        resp = await self.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        try:
            wire = msgpack.unpackb(resp.body, raw=False)
            table = wire.get("topicConfigTable", {}) if isinstance(wire, dict) else {}
            found = table.get(topic) if isinstance(table, dict) else None
            return None if found is None else TopicConfig.from_wire(found)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise MQBrokerError(
                ResponseCode.SYSTEM_ERROR, f"bad topic config table: {exc}", addr
            ) from None

    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        """DELETE_TOPIC_IN_BROKER."""
        await self.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})

    async def topic_stats(self, addr: str, topic: str) -> list[bodies.TopicOffset]:
        """GET_TOPIC_STATS_INFO."""
        resp = await self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        return bodies.decode_topic_stats(resp.body)

    async def query_consume_queue(
        self, addr: str, topic: str, queue_id: int, index: int, count: int, group: str | None
    ) -> QueryConsumeQueueBody:
        """QUERY_CONSUME_QUEUE: up to ``count`` units of the queue from ``index`` on (with
        ``group``: its subscription and whether it takes each unit)."""
        fields: dict[str, ExtValue] = {
            "topic": topic,
            "queueId": queue_id,
            "index": index,
            "count": count,
        }
        if group:
            fields["consumerGroup"] = group
        resp = await self.call(addr, RequestCode.QUERY_CONSUME_QUEUE, fields)
        try:
            return decode_query_consume_queue(resp.body)
        except BadRequestError as exc:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad answer: {exc}", addr) from None

    async def sub_groups(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group name -> its config map (camelCase keys)."""
        resp = await self.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        wire = msgpack.unpackb(resp.body, raw=False)
        table = wire.get("subscriptionGroupTable", {}) if isinstance(wire, dict) else {}
        return {str(k): dict(v) for k, v in table.items() if isinstance(v, dict)}

    async def update_sub_group(self, addr: str, config: Mapping[str, Any]) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with a config map (camelCase keys)."""
        body: bytes = msgpack.packb(dict(config), use_bin_type=True)
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)

    async def delete_sub_group(self, addr: str, group: str, *, clean_offset: bool = False) -> None:
        """DELETE_SUBSCRIPTIONGROUP (``clean_offset``: the group's committed offsets go too)."""
        fields: dict[str, ExtValue] = {"groupName": group, "cleanOffset": str(clean_offset).lower()}
        await self.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)

    async def consume_stats(self, addr: str, group: str, topic: str = "") -> bodies.ConsumeStats:
        """GET_CONSUME_STATS."""
        fields: dict[str, ExtValue] = {"consumerGroup": group}
        if topic:
            fields["topic"] = topic
        resp = await self.call(addr, RequestCode.GET_CONSUME_STATS, fields)
        return bodies.decode_consume_stats(resp.body)

    async def consumer_connection(self, addr: str, group: str) -> bodies.ConsumerConnection | None:
        """GET_CONSUMER_CONNECTION_LIST; None when the group is not online there."""
        resp = await self.call(
            addr,
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            {"consumerGroup": group},
            ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE),
        )
        if resp.code != ResponseCode.SUCCESS:
            return None
        return bodies.decode_consumer_connection(resp.body)

    async def consumer_running_info(
        self, addr: str, group: str, client_id: str, *, jstack: bool = False
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO of member ``client_id`` of ``group``, asked through the
        broker at ``addr`` (:meth:`call_consumer`); with ``jstack`` the member adds its
        process's thread stacks."""
        fields: dict[str, ExtValue] = {
            "consumerGroup": group,
            "clientId": client_id,
            "jstackEnable": jstack,
        }
        resp = await self.call_consumer(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
        return _decoded(decode_running_info, resp.body, addr)

    async def consume_message_directly(
        self, addr: str, group: str, client_id: str, msg: ReceivedMessage
    ) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: member ``client_id`` of ``group`` runs its handler on
        ``msg`` (stored on the broker at ``addr``) once, and says how it ended."""
        fields: dict[str, ExtValue] = {
            "consumerGroup": group,
            "clientId": client_id,
            "msgId": msg.offset_msg_id,
            "topic": msg.topic,
        }
        resp = await self.call_consumer(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, fields)
        return _decoded(decode_direct_result, resp.body, addr)

    async def call_consumer(
        self, addr: str, code: RequestCode, fields: Mapping[str, ExtValue]
    ) -> RemotingCommand:
        """A request the broker at ``addr`` forwards to a consumer: it may take the broker's
        own bound (10 s) and more, so it waits ``CONSUMER_CALL_TIMEOUT_FACTOR`` times the
        request timeout (RocketMQ's ``timeoutMillis * 3``); MQBrokerError for an error
        answer (the remark says whether the consumer is offline, timed out or failed)."""
        cmd = RemotingCommand.request(code, dict(fields), opaque=0)
        timeout_s = self.instance.config.request_timeout_s * CONSUMER_CALL_TIMEOUT_FACTOR
        resp = await self.instance.invoke(addr, cmd, timeout_s)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark or f"error code {resp.code}", addr)
        return resp

    async def producer_connection(self, addr: str, group: str) -> tuple[bodies.Connection, ...]:
        """GET_PRODUCER_CONNECTION_LIST; empty when the group has no producer there."""
        resp = await self.call(
            addr,
            RequestCode.GET_PRODUCER_CONNECTION_LIST,
            {"producerGroup": group},
            ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR),
        )
        if resp.code != ResponseCode.SUCCESS:
            return ()
        return bodies.decode_producer_connection(resp.body)

    async def reset_offset(
        self,
        addr: str,
        topic: str,
        group: str,
        timestamp: int,
        *,
        force: bool = True,
        queue_id: int | None = None,
        offset: int | None = None,
    ) -> list[bodies.QueueOffset]:
        """INVOKE_BROKER_TO_RESET_OFFSET on one broker; the offsets it set. With ``queue_id``,
        only that queue, to ``offset`` when given (else by ``timestamp``)."""
        fields: dict[str, ExtValue] = {
            "topic": topic,
            "group": group,
            "timestamp": str(timestamp),
            "isForce": str(force).lower(),
        }
        if queue_id is not None:
            fields["queueId"] = queue_id
        if offset is not None:
            fields["offset"] = offset
        resp = await self.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
        return bodies.decode_reset_offset(resp.body)

    async def consumer_offsets(self, addr: str) -> dict[str, set[str]]:
        """GET_ALL_CONSUMER_OFFSET: topic -> the groups with committed offsets on it there."""
        resp = await self.call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        try:
            wire = msgpack.unpackb(resp.body, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise MQBrokerError(
                ResponseCode.SYSTEM_ERROR, f"bad offset table: {exc}", addr
            ) from None
        table = wire.get("offsetTable", {}) if isinstance(wire, dict) else {}
        out: dict[str, set[str]] = {}
        for key in table if isinstance(table, dict) else ():
            topic, sep, group = str(key).rpartition("@")
            if sep and topic and group:
                out.setdefault(topic, set()).add(group)
        return out

    async def clone_group_offset(
        self, addr: str, src: str, dst: str, topic: str, *, offline: bool = False
    ) -> None:
        """CLONE_GROUP_OFFSET (``offline``: also a topic the online source does not
        subscribe to)."""
        fields: dict[str, ExtValue] = {
            "srcGroup": src,
            "destGroup": dst,
            "topic": topic,
            "offline": str(offline).lower(),
        }
        await self.call(addr, RequestCode.CLONE_GROUP_OFFSET, fields)

    # ------------------------------------------------------------------ broker

    async def broker_stats_data(self, addr: str, name: str, key: str) -> bodies.BrokerStatsData:
        """VIEW_BROKER_STATS_DATA: the item ``name`` / ``key`` (``TOPIC_PUT_NUMS`` / topic,
        ``GROUP_GET_NUMS`` / ``topic@group``, ...); MQBrokerError (SYSTEM_ERROR) when the
        broker has counted nothing under it."""
        fields: dict[str, ExtValue] = {"statsName": name, "statsKey": key}
        resp = await self.call(addr, RequestCode.VIEW_BROKER_STATS_DATA, fields)
        return bodies.decode_broker_stats_data(resp.body)

    async def broker_consume_stats(
        self, addr: str, *, is_order: bool = False, timeout_ms: int = 50_000
    ) -> bodies.ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS, waiting up to ``timeout_ms`` for the answer."""
        fields: dict[str, ExtValue] = {
            "isOrder": str(is_order).lower(),
            "timeoutMillis": timeout_ms,
        }
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_CONSUME_STATS, fields, opaque=0)
        resp = await self.instance.invoke(addr, cmd, timeout_ms / 1000)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark or f"error code {resp.code}", addr)
        return bodies.decode_consume_stats_list(resp.body)

    async def runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO."""
        resp = await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        wire = msgpack.unpackb(resp.body, raw=False)
        table = wire.get("table", {}) if isinstance(wire, dict) else {}
        return {str(k): str(v) for k, v in table.items()}

    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG as a key -> value map (file order)."""
        resp = await self.call(addr, RequestCode.GET_BROKER_CONFIG)
        props = parse_properties(resp.body.decode("utf-8", "replace"))
        return {key: value.strip() for key, value in props.items()}

    async def update_broker_config(self, addr: str, props: Mapping[str, str]) -> None:
        """UPDATE_BROKER_CONFIG."""
        await self.call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=properties_body(props))

    # ------------------------------------------------------------------ ACL (plain_acl.yml)

    async def create_and_update_plain_access_config(self, addr: str, change: AccountChange) -> None:
        """UPDATE_AND_CREATE_ACL_CONFIG: add or change one account of the broker's
        ``plain_acl.yml`` (fields None in ``change`` keep the account's)."""
        fields = acl_wire.change_fields(change)
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, fields)

    async def delete_plain_access_config(self, addr: str, access_key: str) -> None:
        """DELETE_ACL_CONFIG: delete account ``access_key`` from the broker's file."""
        await self.call(addr, RequestCode.DELETE_ACL_CONFIG, acl_wire.delete_fields(access_key))

    async def update_global_white_addr_config(
        self, addr: str, addrs: Sequence[str], acl_file_full_path: str | None = None
    ) -> None:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: replace the broker's
        ``globalWhiteRemoteAddresses`` (empty: none)."""
        fields = acl_wire.white_addrs_fields(addrs, acl_file_full_path)
        await self.call(addr, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, fields)

    async def examine_broker_cluster_acl_version_info(self, addr: str) -> acl_wire.AclVersionInfo:
        """GET_BROKER_CLUSTER_ACL_INFO: the broker's name, address, cluster and ACL data
        version."""
        resp = await self.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        return _decoded(lambda _: acl_wire.AclVersionInfo.from_fields(resp.ext_fields), b"", addr)

    async def examine_broker_cluster_acl_config(self, addr: str) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG: ``globalWhiteAddrs`` and ``plainAccessConfigs``
        (each ``secretKey`` masked by the broker)."""
        resp = await self.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        return _decoded(acl_wire.decode_acl_config, resp.body, addr)

    # ------------------------------------------------------------------ messages

    async def offset(self, code: RequestCode, mq: MessageQueue, timestamp: int = 0) -> int:
        """GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP of a queue."""
        return await self.instance.broker_offset(code, mq, timestamp)

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_msgs: int,
        *,
        group: str = TOOLS_CONSUMER,
        expression: str = "*",
    ) -> api.PullResult:
        """One PULL_MESSAGE (no long polling, no offset commit)."""
        addr = await self.instance.find_broker_addr(mq)
        sub = build_subscription(mq.topic, expression)
        cmd = api.pull_request(
            group=group,
            mq=mq,
            offset=offset,
            max_msgs=max_msgs,
            subscription=sub,
            suspend_timeout_ms=0,
        )
        return api.parse_pull(await self.instance.invoke(addr, cmd), mq, sub, addr, offset)

    async def view_message(self, offset_msg_id: str) -> ReceivedMessage:
        """VIEW_MESSAGE_BY_ID: the message an offset message id names (ValueError if the id is
        not one)."""
        host, port, phys = decode_offset_msg_id(offset_msg_id)
        addr = f"{host}:{port}"
        resp = await self.call(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})
        msgs = self._decode(resp.body, await self._broker_name_of(addr), addr)
        if not msgs:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no message at {offset_msg_id}")
        return msgs[0]

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 64,
        begin: int = 0,
        end: int = 2**62,
        unique: bool = False,
    ) -> MessageQuery:
        """QUERY_MESSAGE by key (or UNIQ_KEY with ``unique``) on every master of ``topic``, all
        at once.

        As RocketMQ's ``MQAdminImpl.queryMessage``, a broker that fails (no answer in time,
        a refused connection, an error answer) does not hide what the others found: the
        result names it in ``failed``. MQClientError only when every broker failed. The index
        answers by hash: as RocketMQ's admin does, only messages whose KEYS hold ``key``
        (whose id is ``key`` with ``unique``) are kept.
        """
        masters = await self.topic_masters(topic)
        fields: dict[str, ExtValue] = {
            "topic": topic,
            "key": key,
            "maxNum": max_num,
            "beginTimestamp": begin,
            "endTimestamp": end,
        }
        if unique:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        found: dict[str, list[ReceivedMessage]] = {}
        failed: dict[str, str] = {}

        async def ask(name: str, addr: str) -> None:
            try:
                found[name] = await self._query_broker(name, addr, fields)
            except MQClientError as exc:  # a transport error's reason names the address
                failed[name] = exc.reason if addr in exc.reason else f"{addr}: {exc.reason}"

        async with trio.open_nursery() as nursery:
            for name, addr in masters:
                nursery.start_soon(ask, name, addr)
        if not found:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                "no broker answered the query: "
                + "; ".join(f"{name} ({failed[name]})" for name, _ in masters),
            )
        out = [m for name, _ in masters for m in found.get(name, ())]
        if unique:
            out = [m for m in out if m.msg_id == key]
        else:
            out = [m for m in out if key in m.keys]
        return MessageQuery(out, {name: failed[name] for name, _ in masters if name in failed})

    async def _query_broker(
        self, name: str, addr: str, fields: Mapping[str, ExtValue]
    ) -> list[ReceivedMessage]:
        """One broker's answer to QUERY_MESSAGE (none for QUERY_NOT_FOUND)."""
        resp = await self.call(
            addr,
            RequestCode.QUERY_MESSAGE,
            fields,
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if resp.code != ResponseCode.SUCCESS:
            return []
        return self._decode(resp.body, name, addr)

    async def _broker_name_of(self, addr: str) -> str:
        info = await self.cluster_info()
        for name, data in info.broker_addr_table.items():
            if addr in data.broker_addrs.values():
                return name
        return addr

    @staticmethod
    def _decode(body: bytes, broker_name: str, addr: str) -> list[ReceivedMessage]:
        try:
            return [from_record(r, broker_name) for r in decode_records(body)]
        except RecordError as exc:
            raise MQBrokerError(
                ResponseCode.SYSTEM_ERROR, f"bad message body: {exc}", addr
            ) from None


def properties_body(props: Mapping[str, str]) -> bytes:
    """``props`` as the ``key=value`` lines of an UPDATE_*_CONFIG body (escaped, UTF-8)."""
    return "".join(f"{escape_key(k)}={escape_value(v)}\n" for k, v in props.items()).encode()


def _decoded(decode: Callable[[bytes], T], body: bytes, addr: str) -> T:
    """``decode(body)``; a bad body is an MQBrokerError naming ``addr``."""
    try:
        return decode(body)
    except ValueError as exc:
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad answer: {exc}", addr) from None


def _check_broker_addr(addr: str, info: ClusterInfo) -> None:
    """MQClientError unless ``addr`` reads as a broker address (``host:port``); a broker's
    name given instead (``broker-a``) is told apart, with the addresses the name has."""
    data = info.broker_addr_table.get(addr)
    if data is not None:
        where = ", ".join(f"{bid}:{a}" for bid, a in sorted(data.broker_addrs.items()))
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR,
            f"{addr!r} is a broker name, not a broker address (host:port); "
            f"its addresses (id:address): {where or 'none registered'}",
        )
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not 0 < (parse_uint(port, max_digits=5) or 0) < 65536:
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR, f"illegal broker address {addr!r}: expected host:port"
        )
