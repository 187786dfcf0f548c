"""Partitions between a broker and its name server, through the loopback fault proxy (the
reliability plan's R8): a blackhole longer than the route expiry, and a reset of every
connection. Real name server and broker (in process), real sockets, short but real timers.

The name server must drop the silent broker's routes after ``brokerChannelExpiredTime``; the
broker must keep serving the clients that already know it, keep retrying its registration
without stalling anything else, and be routable again within one registration period of the
heal. Nothing a producer was told is stored may be lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.fault_proxy import FaultProxy
from tests.broker.inprocess import LIMIT, req, running_broker, wait_until
from tests.broker.pulls import pull_all, send

TOPIC = "PartitionTopic"
EXPIRY_MS = 1500
pytestmark = pytest.mark.timeout(120)


async def routed(client: RemotingClient, namesrv: str) -> bool:
    """True when the name server has a route for :data:`TOPIC`."""
    resp = await client.invoke(namesrv, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC))
    assert resp.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST), resp.remark
    return resp.code == ResponseCode.SUCCESS


async def create_topic(client: RemotingClient, addr: str) -> None:
    create = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=TOPIC, readQueueNums="1",
                 writeQueueNums="1", perm="6")  # fmt: skip
    assert (await client.invoke(addr, create)).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("fault", ["blackhole", "reset"])
async def test_a_partition_from_the_name_server_drops_routes_until_it_heals(
    tmp_path: Path, fault: str
) -> None:
    namesrv = NameServer(
        NamesrvConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            scan_not_active_broker_interval_ms=100,
            broker_channel_expired_time_ms=EXPIRY_MS,
        )
    )
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(namesrv.run)
            proxy = FaultProxy("127.0.0.1", port)
            await nursery.start(proxy.run)
            overrides = {"registerNameServerPeriod": "300"}
            async with (
                running_broker(tmp_path, proxy.address, overrides=overrides) as (_, addr),
                RemotingClient(default_timeout_s=LIMIT) as client,
            ):
                namesrv_addr = f"127.0.0.1:{port}"
                await create_topic(client, addr)
                await wait_until(lambda: routed(client, namesrv_addr), "the route")
                sent = [b"before"]
                await send(client, addr, TOPIC, sent[-1])
                if fault == "blackhole":
                    proxy.blackhole()
                    await wait_until(lambda: not_routed(client, namesrv_addr), "the route gone")
                    sent.append(b"during")  # the broker itself is fine: who knows it goes on
                    await send(client, addr, TOPIC, sent[-1])
                    proxy.heal()
                else:
                    before = proxy.connections
                    proxy.reset_all()
                    await wait_until(lambda: proxy.connections > before, "a new connection")
                await wait_until(lambda: routed(client, namesrv_addr), "the route back")
                sent.append(b"after")
                await send(client, addr, TOPIC, sent[-1])
                assert [m.body for m in await pull_all(client, addr, TOPIC)] == sent
            nursery.cancel_scope.cancel()


async def not_routed(client: RemotingClient, namesrv: str) -> bool:
    return not await routed(client, namesrv)
