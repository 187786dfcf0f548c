"""A broker's registrations carry its topic table's data version; a real name server never lets
a late, older registration replace a newer topic table.

Each test runs a real in-process NameServer and BrokerController on 127.0.0.1 port 0. The late
registration is the broker's own earlier table and version, delivered to the name server after
the newer one (as a hung name server that comes back would receive it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from broker.controller import BrokerController
from common.route import DataVersion, TopicConfig
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.route_bodies import decode_route_body, encode_register_body
from tests.broker.inprocess import LIMIT, req, running_broker

TOPIC = "VersionedTopic"
QUIET = {"registerNameServerPeriod": "60000"}  # only the registrations a test triggers


@asynccontextmanager
async def cluster(
    tmp_path: Path,
) -> AsyncIterator[tuple[NameServer, BrokerController, str, RemotingClient]]:
    """A name server, a broker registered with it, and a client; yields (name server, broker,
    broker address, client)."""
    namesrv = NameServer(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(namesrv.run)
            async with (
                running_broker(tmp_path, f"127.0.0.1:{port}", overrides=QUIET) as (broker, addr),
                RemotingClient(default_timeout_s=LIMIT) as client,
            ):
                yield namesrv, broker, addr, client
            nursery.cancel_scope.cancel()


async def update_topic(client: RemotingClient, addr: str, queues: int) -> None:
    cmd = req(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        topic=TOPIC,
        readQueueNums=str(queues),
        writeQueueNums=str(queues),
        perm="6",
    )
    resp = await client.invoke(addr, cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def applied_version(namesrv: NameServer, addr: str) -> DataVersion | None:
    return namesrv.route_info.broker_live_table[addr].data_version


async def deliver_late(
    client: RemotingClient,
    namesrv: NameServer,
    broker: BrokerController,
    table: dict[str, TopicConfig],
    version: DataVersion,
) -> None:
    """REGISTER_BROKER of ``table`` at ``version`` under the broker's name and address."""
    cmd = req(
        RequestCode.REGISTER_BROKER,
        encode_register_body(table, data_version=version),
        brokerName=broker.config.broker_name,
        brokerAddr=broker.broker_addr,
        clusterName=broker.config.broker_cluster_name,
        haServerAddr="",
        brokerId=str(broker.config.broker_id),
    )
    resp = await client.invoke(f"127.0.0.1:{namesrv.port}", cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def routed_queue(client: RemotingClient, namesrv: NameServer) -> tuple[int, int]:
    """(write queue count, perm) of the topic in the name server's route."""
    cmd = req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
    resp = await client.invoke(f"127.0.0.1:{namesrv.port}", cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    [queue] = decode_route_body(resp.body).queue_datas
    return queue.write_queue_nums, queue.perm


async def test_a_late_older_registration_does_not_replace_the_newer_topic_table(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as (namesrv, broker, addr, client):
        assert broker.topics is not None
        await update_topic(client, addr, 4)
        old_table, old_version = broker.topics.topics(), broker.topics.current_version()
        assert applied_version(namesrv, addr) == old_version  # the broker sends its version
        await update_topic(client, addr, 8)
        assert applied_version(namesrv, addr) == broker.topics.current_version()

        await deliver_late(client, namesrv, broker, old_table, old_version)
        assert await routed_queue(client, namesrv) == (8, 6)
        assert applied_version(namesrv, addr) == broker.topics.current_version()


async def test_a_broker_permission_change_is_a_newer_version(tmp_path: Path) -> None:
    async with cluster(tmp_path) as (namesrv, broker, addr, client):
        assert broker.topics is not None
        await update_topic(client, addr, 4)
        old_table, old_version = broker.topics.topics(), broker.topics.current_version()
        body = b"brokerPermission=4\n"
        resp = await client.invoke(addr, req(RequestCode.UPDATE_BROKER_CONFIG, body=body))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert await routed_queue(client, namesrv) == (4, 4)

        await deliver_late(client, namesrv, broker, old_table, old_version)  # perm 6
        assert await routed_queue(client, namesrv) == (4, 4)
