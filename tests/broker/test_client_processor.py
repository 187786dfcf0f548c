"""HEART_BEAT / UNREGISTER_CLIENT / GET_CONSUMER_LIST_BY_GROUP on an in-process BrokerController,
with real RemotingClients; NOTIFY_CONSUMER_IDS_CHANGED arrives through the client's handlers."""

from __future__ import annotations

from pathlib import Path

import trio

from common.json_store import temp_path
from common.subscription import build_subscription
from common.topic import retry_topic
from remoting.channel import Channel, Handler
from remoting.client import RemotingClient
from remoting.client_bodies import (
    ConsumerData,
    HeartbeatData,
    decode_consumer_list,
    encode_heartbeat,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import req, running_broker, wait_until

GROUP = "cg"


def heartbeat(client_id: str, group: str = GROUP) -> RemotingCommand:
    consumer = ConsumerData(group, subscriptions=(build_subscription("T", "*"),))
    data = HeartbeatData(client_id, producer_groups=("pg",), consumers=(consumer,))
    return req(RequestCode.HEART_BEAT, encode_heartbeat(data))


class Notified:
    """A client-side handler table recording NOTIFY_CONSUMER_IDS_CHANGED groups."""

    def __init__(self) -> None:
        self.groups: list[str] = []

    async def handle(self, request: RemotingCommand, channel: Channel) -> None:
        self.groups.append(str(request.ext_fields["consumerGroup"]))

    def table(self) -> dict[int, Handler]:
        return {int(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED): self.handle}


async def consumer_list(client: RemotingClient, addr: str) -> RemotingCommand:
    return await client.invoke(
        addr, req(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=GROUP)
    )


async def test_group_membership_follows_heartbeats_and_closes(tmp_path: Path) -> None:
    n1, n2 = Notified(), Notified()
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path) as (broker, addr),
            RemotingClient(handlers=n1.table()) as c1,
            RemotingClient(handlers=n2.table()) as c2,
        ):
            assert (await c1.invoke(addr, heartbeat("c1@1"))).code == ResponseCode.SUCCESS
            await wait_until(lambda: n1.groups == [GROUP], "c1 notified of its own join")
            assert (await c2.invoke(addr, heartbeat("c2@2"))).code == ResponseCode.SUCCESS
            resp = await consumer_list(c1, addr)
            assert resp.code == ResponseCode.SUCCESS
            assert decode_consumer_list(resp.body) == ["c1@1", "c2@2"]
            assert broker.clients.manager.producer_ids("pg") == ["c1@1", "c2@2"]
            # c2's join is announced to both members
            await wait_until(lambda: n2.groups == [GROUP], "c2 notified of its join")
            await wait_until(lambda: n1.groups == [GROUP, GROUP], "c1 notified twice")
            # a refresh changes nothing and notifies nobody
            assert (await c2.invoke(addr, heartbeat("c2@2"))).code == ResponseCode.SUCCESS

            await c1.close_connection(addr)
            await wait_until(lambda: n2.groups == [GROUP, GROUP], "c2 notified of c1 leaving")
            resp = await consumer_list(c2, addr)
            assert decode_consumer_list(resp.body) == ["c2@2"]
            assert broker.clients.manager.producer_ids("pg") == ["c2@2"]


async def test_unregister_client_and_empty_group(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            assert (await client.invoke(addr, heartbeat("c1@1"))).code == ResponseCode.SUCCESS
            unregister = req(RequestCode.UNREGISTER_CLIENT, clientID="c1@1", consumerGroup=GROUP)
            assert (await client.invoke(addr, unregister)).code == ResponseCode.SUCCESS
            resp = await consumer_list(client, addr)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert resp.remark == f"no consumer for this group, {GROUP}"
            # the producer registration is untouched until its own group is named
            assert broker.clients.manager.producer_ids("pg") == ["c1@1"]
            unregister = req(RequestCode.UNREGISTER_CLIENT, clientID="c1@1", producerGroup="pg")
            assert (await client.invoke(addr, unregister)).code == ResponseCode.SUCCESS
            assert broker.clients.manager.producer_ids("pg") == []
            resp = await client.invoke(addr, req(RequestCode.UNREGISTER_CLIENT))
            assert resp.code == ResponseCode.SYSTEM_ERROR  # clientID is required


async def test_malformed_heartbeat_is_refused_and_server_keeps_serving(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (_, addr), RemotingClient() as client:
            for body in (b"\xc1", b"\x93\x01\x02\x03", encode_heartbeat(HeartbeatData("x"))[:-3]):
                resp = await client.invoke(addr, req(RequestCode.HEART_BEAT, body))
                assert resp.code == ResponseCode.SYSTEM_ERROR
            assert (await client.invoke(addr, heartbeat("c1@1"))).code == ResponseCode.SUCCESS
            resp = await consumer_list(client, addr)
            assert decode_consumer_list(resp.body) == ["c1@1"]


async def test_scan_drops_expired_clients_and_notifies(tmp_path: Path) -> None:
    notified = Notified()
    now = [1_000_000]
    with trio.fail_after(30):
        async with running_broker(tmp_path, overrides={"channelExpiredTimeout": "1000"}) as (
            broker,
            addr,
        ):
            broker.clients.clock_ms = lambda: now[0]
            async with (
                RemotingClient() as old,
                RemotingClient(handlers=notified.table()) as fresh,
            ):
                await old.invoke(addr, heartbeat("old@1"))
                now[0] += 900
                await fresh.invoke(addr, heartbeat("fresh@2"))
                await wait_until(lambda: notified.groups == [GROUP], "join notification")
                now[0] += 200  # old: 1100 ms silent, fresh: 200 ms
                assert broker.clients.scan_once() == {GROUP}
                await wait_until(lambda: notified.groups == [GROUP, GROUP], "expiry notification")
                resp = await consumer_list(fresh, addr)
                assert decode_consumer_list(resp.body) == ["fresh@2"]


async def test_a_new_group_joins_when_its_retry_topic_cannot_be_written(tmp_path: Path) -> None:
    """A full disk (here: topics.json's temp name is a directory, so the write fails for real
    with EISDIR as it would with ENOSPC) must not refuse a new group's heartbeat: its consumers
    could not rebalance, and so read nothing from a broker that still serves reads. The retry
    topic is created by a later heartbeat once the write works."""
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            assert broker.topics is not None
            blocker = temp_path(broker.topics.path)
            blocker.mkdir(parents=True)
            assert (await client.invoke(addr, heartbeat("c1@1"))).code == ResponseCode.SUCCESS
            resp = await consumer_list(client, addr)
            assert resp.code == ResponseCode.SUCCESS
            assert decode_consumer_list(resp.body) == ["c1@1"]
            assert broker.topics.select(retry_topic(GROUP)) is None
            blocker.rmdir()
            assert (await client.invoke(addr, heartbeat("c1@1"))).code == ResponseCode.SUCCESS
            assert broker.topics.select(retry_topic(GROUP)) is not None
