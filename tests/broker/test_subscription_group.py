"""Subscription group configs: the pure SubscriptionGroupManager (defaults, auto-creation,
persistence) and the 200 / 201 / 207 requests, the consumeEnable check on pulls and the retry
topic created on a consumer heartbeat, through an in-process broker."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest
import trio

from broker.processors.group_admin import encode_subscription_group
from broker.subscription_group import (
    SUBSCRIPTION_GROUP_FILE,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from common.route import PermName
from common.subscription import build_subscription
from remoting.client import RemotingClient
from remoting.client_bodies import ConsumerData, HeartbeatData, encode_heartbeat
from remoting.codes import RequestCode, ResponseCode
from remoting.route_bodies import decode_route_body
from tests.broker.inprocess import req, running_broker, running_namesrv


def test_defaults_are_rocketmqs() -> None:
    c = SubscriptionGroupConfig("cg")
    assert (c.retry_max_times, c.retry_queue_nums, c.broker_id) == (16, 1, 0)
    assert c.consume_enable
    assert c.consume_broadcast_enable
    assert c.consume_from_min_enable
    assert c.which_broker_when_consume_slowly == 1
    assert c.to_wire() == {
        "groupName": "cg",
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }


def test_wire_round_trip_and_bad_values() -> None:
    c = SubscriptionGroupConfig("cg", consume_enable=False, retry_max_times=3)
    assert SubscriptionGroupConfig.from_wire(c.to_wire()) == c
    partial = SubscriptionGroupConfig.from_wire({"groupName": "g2", "retryQueueNums": 2, "x": 1})
    assert partial == SubscriptionGroupConfig("g2", retry_queue_nums=2)
    with pytest.raises(ValueError, match="retryMaxTimes"):
        SubscriptionGroupConfig.from_wire({"groupName": "g", "retryMaxTimes": "16"})
    with pytest.raises(ValueError, match="consumeEnable"):
        SubscriptionGroupConfig.from_wire({"groupName": "g", "consumeEnable": 1})
    with pytest.raises(ValueError, match="groupName"):
        SubscriptionGroupConfig.from_wire({"retryMaxTimes": 1})
    with pytest.raises(ValueError, match="group name"):
        SubscriptionGroupConfig("bad group name")


def test_auto_create_and_persistence(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(tmp_path, auto_create=True)
    assert "TOOLS_CONSUMER" in groups
    assert groups.select("TOOLS_CONSUMER") == SubscriptionGroupConfig(
        "TOOLS_CONSUMER", consume_broadcast_enable=False
    )
    assert groups.select("cg") is None
    assert groups.find("cg") == SubscriptionGroupConfig("cg")
    assert groups.find("no such group!") is None  # invalid names are never created
    groups.create_or_update(SubscriptionGroupConfig("cg2", retry_max_times=2))
    doc = json.loads((tmp_path / SUBSCRIPTION_GROUP_FILE).read_text())
    assert doc["subscriptionGroupTable"]["cg2"]["retryMaxTimes"] == 2
    assert doc["dataVersion"]["counter"] == groups.data_version == 2

    reloaded = SubscriptionGroupManager(tmp_path, auto_create=False)
    assert reloaded.select("cg") == SubscriptionGroupConfig("cg")
    assert reloaded.select("cg2") == SubscriptionGroupConfig("cg2", retry_max_times=2)
    assert reloaded.find("unknown") is None  # auto-creation off
    assert reloaded.delete("cg2") is not None
    assert reloaded.delete("cg2") is None
    assert SubscriptionGroupManager(tmp_path).select("cg2") is None


def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / SUBSCRIPTION_GROUP_FILE).write_text('{"subscriptionGroupTable": []}')
    with pytest.raises(ValueError, match="subscriptionGroupTable"):
        SubscriptionGroupManager(tmp_path)


async def pull(client: RemotingClient, addr: str, group: str) -> tuple[int, str]:
    resp = await client.invoke(
        addr,
        req(
            RequestCode.PULL_MESSAGE,
            consumerGroup=group,
            topic="TBW102",
            queueId="0",
            queueOffset="0",
            maxMsgNums="1",
        ),
    )
    return resp.code, resp.remark or ""


async def all_groups(client: RemotingClient, addr: str) -> dict[str, dict[str, object]]:
    resp = await client.invoke(addr, req(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert resp.code == ResponseCode.SUCCESS
    table: dict[str, dict[str, object]] = msgpack.unpackb(resp.body)["subscriptionGroupTable"]
    return table


async def test_group_requests_and_consume_enable(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            config = SubscriptionGroupConfig("cg", consume_enable=False, retry_max_times=3)
            resp = await client.invoke(
                addr,
                req(
                    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                    encode_subscription_group(config),
                ),
            )
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            table = await all_groups(client, addr)
            assert table["cg"]["consumeEnable"] is False
            assert table["cg"]["retryMaxTimes"] == 3
            saved = tmp_path / "store" / "config" / SUBSCRIPTION_GROUP_FILE
            assert (
                json.loads(saved.read_text())["subscriptionGroupTable"]["cg"]["retryMaxTimes"] == 3
            )

            code, remark = await pull(client, addr, "cg")
            assert code == ResponseCode.NO_PERMISSION
            assert remark == "subscription group no permission, cg"
            # another group is auto-created on its first pull and may consume
            code, _ = await pull(client, addr, "other")
            assert code == ResponseCode.PULL_NOT_FOUND
            assert "other" in await all_groups(client, addr)

            resp = await client.invoke(
                addr, req(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="cg")
            )
            assert resp.code == ResponseCode.SUCCESS
            assert "cg" not in await all_groups(client, addr)
            code, _ = await pull(client, addr, "cg")  # re-created with the defaults
            assert code == ResponseCode.PULL_NOT_FOUND

            bad = msgpack.packb({"groupName": "g", "retryMaxTimes": "x"})
            resp = await client.invoke(
                addr, req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, bad)
            )
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "retryMaxTimes" in (resp.remark or "")
            assert broker.groups is not None
            assert broker.groups.select("g") is None


async def test_unknown_group_refused_without_auto_create(tmp_path: Path) -> None:
    overrides = {"autoCreateSubscriptionGroup": "false"}
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=overrides) as (_, addr),
            RemotingClient() as client,
        ):
            code, remark = await pull(client, addr, "cg")
            assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            assert "cg" in remark
            config = encode_subscription_group(SubscriptionGroupConfig("cg"))
            resp = await client.invoke(
                addr, req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, config)
            )
            assert resp.code == ResponseCode.SUCCESS
            assert (await pull(client, addr, "cg"))[0] == ResponseCode.PULL_NOT_FOUND


def heartbeat(group: str) -> bytes:
    consumer = ConsumerData(group, subscriptions=(build_subscription("T", "*"),))
    return encode_heartbeat(HeartbeatData("c1@1", consumers=(consumer,)))


async def test_heartbeat_creates_and_routes_the_retry_topic(tmp_path: Path) -> None:
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
            assert broker.topics is not None
            config = encode_subscription_group(SubscriptionGroupConfig("cg2", retry_queue_nums=3))
            resp = await client.invoke(
                addr, req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, config)
            )
            assert resp.code == ResponseCode.SUCCESS
            for group, queues in (("cg", 1), ("cg2", 3)):
                resp = await client.invoke(addr, req(RequestCode.HEART_BEAT, heartbeat(group)))
                assert resp.code == ResponseCode.SUCCESS
                topic = broker.topics.select(f"%RETRY%{group}")
                assert topic is not None
                assert (topic.read_queue_nums, topic.write_queue_nums) == (queues, queues)
                assert topic.perm == PermName.PERM_READ | PermName.PERM_WRITE
                route_req = req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=f"%RETRY%{group}")
                resp = await client.invoke(ns_addr, route_req)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                route = decode_route_body(resp.body)
                assert [q.read_queue_nums for q in route.queue_datas] == [queues]
            assert broker.groups is not None
            assert broker.groups.select("cg") is not None
            version = broker.topics.data_version
            resp = await client.invoke(addr, req(RequestCode.HEART_BEAT, heartbeat("cg")))
            assert broker.topics.data_version == version, "a known group creates nothing"


def test_a_group_change_that_cannot_be_written_is_not_kept(tmp_path: Path) -> None:
    """As for topics (tests/broker/test_topic_config.py), but a group auto-created by a pull or
    a heartbeat is kept and served: it holds the defaults an absent group gets anyway, and
    failing the consumer's request for a file write would be worse."""
    mgr = SubscriptionGroupManager(tmp_path)
    mgr.create_or_update(SubscriptionGroupConfig("kept", retry_max_times=3))
    blocker = tmp_path / (SUBSCRIPTION_GROUP_FILE + ".tmp")
    blocker.mkdir()
    with pytest.raises(IsADirectoryError):
        mgr.create_or_update(SubscriptionGroupConfig("g1", retry_max_times=5))
    with pytest.raises(IsADirectoryError):
        mgr.delete("kept")
    assert mgr.select("g1") is None
    assert mgr.select("kept") == SubscriptionGroupConfig("kept", retry_max_times=3)
    assert mgr.find("auto") == SubscriptionGroupConfig("auto")
    blocker.rmdir()
    mgr.create_or_update(SubscriptionGroupConfig("g1", retry_max_times=5))
    again = SubscriptionGroupManager(tmp_path)
    assert again.select("g1") == SubscriptionGroupConfig("g1", retry_max_times=5)
    assert again.select("auto") == SubscriptionGroupConfig("auto")
    assert again.select("kept") is not None
