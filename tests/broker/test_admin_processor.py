"""Admin requests on an in-process BrokerController registered with an in-process NameServer."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
import trio

from client.aio import Message, Producer
from client.errors import MQClientError
from common.compiled import build_description
from common.properties import parse_properties
from common.route import TopicConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.route_bodies import decode_route_body
from tests.broker.inprocess import req, running_broker, running_namesrv, send_req, wait_until

TOPIC = "AdminTopic"


def create_req(topic: str, queues: int = 3, perm: int = 6) -> RemotingCommand:
    return req(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        topic=topic,
        readQueueNums=str(queues),
        writeQueueNums=str(queues),
        perm=str(perm),
        topicFilterType="SINGLE_TAG",
        topicSysFlag="0",
        order="false",
    )


async def test_create_topic_is_routed_at_once_and_delete(tmp_path: Path) -> None:
    with trio.fail_after(30):
        # the periodic registration is 30 s away: only the immediate round can route it
        async with (
            running_namesrv() as ns_addr,
            running_broker(tmp_path, ns_addr, overrides={"registerNameServerPeriod": "30000"}) as (
                broker,
                addr,
            ),
            RemotingClient() as client,
        ):
            route_req = req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
            resp = await client.invoke(ns_addr, route_req)
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST

            resp = await client.invoke(addr, create_req(TOPIC))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            resp = await client.invoke(ns_addr, route_req)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            route = decode_route_body(resp.body)
            assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == [
                ("broker-a", 3)
            ]

            # an update is routed at once too
            resp = await client.invoke(addr, create_req(TOPIC, queues=5))
            assert resp.code == ResponseCode.SUCCESS
            route = decode_route_body((await client.invoke(ns_addr, route_req)).body)
            assert route.queue_datas[0].write_queue_nums == 5

            resp = await client.invoke(addr, req(RequestCode.GET_ALL_TOPIC_CONFIG))
            table = msgpack.unpackb(resp.body)["topicConfigTable"]
            assert table[TOPIC]["readQueueNums"] == 5
            assert "TBW102" in table

            resp = await client.invoke(addr, req(RequestCode.DELETE_TOPIC_IN_BROKER, topic=TOPIC))
            assert resp.code == ResponseCode.SUCCESS
            assert broker.topics is not None
            assert TOPIC not in broker.topics
            resp = await client.invoke(addr, req(RequestCode.GET_ALL_TOPIC_CONFIG))
            assert TOPIC not in msgpack.unpackb(resp.body)["topicConfigTable"]


async def test_deleting_a_topic_that_never_existed_succeeds_and_records_nothing(
    tmp_path: Path,
) -> None:
    """RocketMQ answers SUCCESS and its store skips a topic without consume queues: no
    deletion is recorded (``deletedTopics.json`` stays absent)."""
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            cmd = req(RequestCode.DELETE_TOPIC_IN_BROKER, topic="NeverExisted")
            assert (await client.invoke(addr, cmd)).code == ResponseCode.SUCCESS
            assert broker.store is not None
            assert broker.store.deleted_topics.cuts == {}
            assert not await trio.Path(broker.store.deleted_topics.path).exists()


async def test_deleting_a_topic_drops_its_messages_queues_and_offsets(tmp_path: Path) -> None:
    """As RocketMQ's deleteTopic: the queues and every group's offsets go; a send afterwards
    starts the queue again at offset 0, and the old messages never come back."""
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            assert (await client.invoke(addr, create_req(TOPIC, queues=1))).code == 0
            for i in range(3):
                resp = await client.invoke(addr, send_req(TOPIC, b"old-%d" % i))
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            commit = req(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                consumerGroup="cg",
                topic=TOPIC,
                queueId="0",
                commitOffset="2",
            )
            assert (await client.invoke(addr, commit)).code == ResponseCode.SUCCESS
            max_req = req(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId="0")
            await wait_until(
                lambda: (
                    broker.store is not None and broker.store.get_max_offset_in_queue(TOPIC, 0) == 3
                ),
                "dispatch",
            )

            resp = await client.invoke(addr, req(RequestCode.DELETE_TOPIC_IN_BROKER, topic=TOPIC))
            assert resp.code == ResponseCode.SUCCESS
            assert (await client.invoke(addr, max_req)).ext_fields["offset"] == "0"
            query = req(
                RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="cg", topic=TOPIC, queueId="0"
            )
            resp = await client.invoke(addr, query)  # no committed offset: the queue's start
            assert (resp.code, resp.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "0")
            assert broker.offsets is not None
            assert broker.offsets.query_offset("cg", TOPIC, 0) == -1

            assert (await client.invoke(addr, create_req(TOPIC, queues=1))).code == 0
            resp = await client.invoke(addr, send_req(TOPIC, b"new"))
            assert resp.code == ResponseCode.SUCCESS
            assert resp.ext_fields["queueOffset"] == "0"


async def test_illegal_and_system_topics_are_refused(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            for topic in ("bad topic!", "x" * 128, "TBW102", "rmq_sys_mine", ""):
                resp = await client.invoke(addr, create_req(topic))
                assert resp.code == ResponseCode.SYSTEM_ERROR, topic
            for perm in (16, 9, 8, -1):  # RocketMQ's valid perms are 0..7
                resp = await client.invoke(addr, create_req(TOPIC, perm=perm))
                assert resp.code == ResponseCode.SYSTEM_ERROR
                assert resp.remark == f"topicPermission value: {perm} is invalid."
            assert broker.topics is not None
            assert broker.topics.select(TOPIC) is None
            resp = await client.invoke(addr, req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=TOPIC))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "readQueueNums" in resp.remark
            resp = await client.invoke(
                addr, req(RequestCode.DELETE_TOPIC_IN_BROKER, topic="SCHEDULE_TOPIC_XXXX")
            )
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert broker.topics is not None
            assert TOPIC not in broker.topics
            assert "SCHEDULE_TOPIC_XXXX" in broker.topics


async def test_runtime_info_and_broker_config(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (_broker, addr), RemotingClient() as client:
            resp = await client.invoke(addr, req(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert resp.code == ResponseCode.SUCCESS
            table = msgpack.unpackb(resp.body)["table"]
            for key in (
                "brokerVersionDesc",
                "bootTimestamp",
                "runtime",
                "commitLogMinOffset",
                "commitLogMaxOffset",
                "dispatchBehindBytes",
                "earliestMessageTimeStamp",
                "commitLogDiskRatio",
                "remainHowManyDataToFlush",
                "putTps",
                "getTransferedTps",
                "pendingRequests",
                "rejectedBusyRequests",
                "refusedConnections",
            ):
                assert isinstance(table[key], str), key
            for key in ("putTps", "getTransferedTps"):  # over 10 s, 60 s and 600 s
                assert [float(x) >= 0 for x in table[key].split()] == [True] * 3
            assert table["pendingRequestsLimit"] == "100000 (10000 a connection)"
            assert table["connections"].startswith("1 of ")
            assert table["pendingRequests"] == "0"  # this request is answered inline
            assert table["commitLogMaxOffset"] == "0"
            assert table["remainHowManyDataToFlush"] == "0"
            assert "storeWriteRefusal" not in table
            assert table["minimqBuild"] == build_description()
            assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0

            resp = await client.invoke(addr, req(RequestCode.GET_BROKER_CONFIG))
            assert resp.code == ResponseCode.SUCCESS
            props = parse_properties(resp.body.decode())
            assert props["brokerName"] == "broker-a"
            assert props["listenPort"] == "0"
            assert props["storePathRootDir"] == str(tmp_path / "store")


async def test_runtime_info_says_why_sends_are_refused(tmp_path: Path) -> None:
    """A disk above diskSpaceWarningLevelRatio (90 %; the disk reads 95 % full here, checked
    every 20 ms) refuses sends; the runtime info says so."""
    overrides = {"cleanResourceInterval": "20"}
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=overrides) as (broker, addr),
            RemotingClient() as client,
        ):
            assert broker.store is not None
            broker.store.disk_usage = lambda _path: 0.95  # what statvfs would say

            async def refusal() -> str | None:
                resp = await client.invoke(addr, req(RequestCode.GET_BROKER_RUNTIME_INFO))
                table: dict[str, str] = msgpack.unpackb(resp.body)["table"]
                return table.get("storeWriteRefusal")

            async def refused() -> bool:
                return await refusal() is not None

            await wait_until(refused, "the disk watch to refuse writes")
            assert await refusal() == "the disk is full"


async def test_a_shorter_registration_period_set_at_runtime_applies_at_once(
    tmp_path: Path,
) -> None:
    """updateBrokerConfig registerNameServerPeriod: the loop does not wait out the old period
    (the next registration is what routes a topic the broker took in quietly)."""
    with trio.fail_after(30):
        async with (
            running_namesrv() as ns_addr,
            running_broker(tmp_path, ns_addr, overrides={"registerNameServerPeriod": "60000"}) as (
                broker,
                addr,
            ),
            RemotingClient() as client,
        ):
            assert broker.topics is not None
            broker.topics.create_or_update(TopicConfig("Quiet", 2, 2, 6))  # no registration
            route_req = req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Quiet")
            assert (await client.invoke(ns_addr, route_req)).code == ResponseCode.TOPIC_NOT_EXIST
            body = b"registerNameServerPeriod=200\n"
            resp = await client.invoke(addr, req(RequestCode.UPDATE_BROKER_CONFIG, body=body))
            assert resp.code == ResponseCode.SUCCESS, resp.remark

            while True:  # within the fail_after: 60 s away without the fix
                if (await client.invoke(ns_addr, route_req)).code == ResponseCode.SUCCESS:
                    break
                await trio.sleep(0.05)


async def test_broker_permission_drains_a_broker_at_runtime(tmp_path: Path) -> None:
    """brokerPermission 4 (read only), RocketMQ's way to drain a broker: routes carry the
    topics' perm within it at once, sends are refused, pulls go on; 6 takes sends again."""
    with trio.fail_after(30):
        async with (
            running_namesrv() as ns_addr,
            running_broker(tmp_path, ns_addr, overrides={"registerNameServerPeriod": "60000"}) as (
                _,
                addr,
            ),
            RemotingClient() as client,
        ):
            assert (await client.invoke(addr, create_req(TOPIC))).code == ResponseCode.SUCCESS
            route_req = req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)

            async def set_permission(perm: int) -> list[int]:
                body = f"brokerPermission={perm}\n".encode()
                resp = await client.invoke(addr, req(RequestCode.UPDATE_BROKER_CONFIG, body=body))
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                route = decode_route_body((await client.invoke(ns_addr, route_req)).body)
                return [q.perm for q in route.queue_datas]

            assert await set_permission(4) == [4]
            refused = await client.invoke(addr, send_req(TOPIC, b"x"))
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "sending message is forbidden" in refused.remark
            async with Producer("pg", ns_addr) as producer:  # told why, not "No route info"
                with pytest.raises(MQClientError, match="no writable queue"):
                    await producer.send(Message(TOPIC, b"x"))
            assert await set_permission(2) == [2]
            pull = req(
                RequestCode.PULL_MESSAGE,
                consumerGroup="cg",
                topic=TOPIC,
                queueId="0",
                queueOffset="0",
                maxMsgNums="1",
            )
            refused = await client.invoke(addr, pull)
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "pulling message is forbidden" in refused.remark
            assert await set_permission(6) == [6]
            assert (await client.invoke(addr, send_req(TOPIC, b"x"))).code == ResponseCode.SUCCESS
