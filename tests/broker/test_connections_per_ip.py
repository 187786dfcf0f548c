"""``serverMaxConnectionsPerIp`` on a live in-process broker and name server: one address's
connections past it are closed at once, another address (127.0.0.2, loopback on Linux) is
served, and the broker's runtime info and metrics show the counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgpack
import pytest
import trio

from broker.config import BrokerConfig
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.codes import RequestCode, ResponseCode
from remoting.server import DEFAULT_MAX_CONNECTIONS_PER_IP
from tests.broker.inprocess import req, running_broker
from tests.deploy.netutil import free_port
from tests.deploy.test_metrics import scrape, value
from tests.remoting.test_connections_per_ip import LIMIT, connect, exchange


async def refused(stream: trio.SocketStream) -> bool:
    """True when the server ends ``stream`` at once, whatever it was sent."""
    with trio.fail_after(LIMIT):
        try:
            return await stream.receive_some() == b""
        except trio.BrokenResourceError:
            return True


async def test_broker_caps_connections_per_ip_and_reports_them(tmp_path: Path) -> None:
    metrics_port = free_port()
    overrides = {"serverMaxConnectionsPerIp": "2", "metricsPort": str(metrics_port)}
    runtime = req(RequestCode.GET_BROKER_RUNTIME_INFO)
    with trio.fail_after(4 * LIMIT):
        async with running_broker(tmp_path, overrides=overrides) as (broker, addr):
            port = int(addr.rsplit(":", 1)[1])
            held = [await connect(port) for _ in range(2)]
            for stream in held:
                assert (await exchange(stream, runtime)).code == ResponseCode.SUCCESS
            over = await connect(port)
            assert await refused(over)
            other = await connect(port, "127.0.0.2")
            answer = await exchange(other, runtime)
            table = msgpack.unpackb(answer.body)["table"]
            assert table["refusedConnectionsPerIp"] == "1"
            assert table["refusedConnections"] == "0"
            found = await scrape(metrics_port)
            assert value(found, "minimq_connections_refused_per_ip_total") == 1
            assert value(found, "minimq_connections") == 3
            assert value(found, "minimq_connections_top_ip") == 2
            for stream in [*held, over, other]:
                await stream.aclose()
            assert broker.server is not None
            assert broker.server.max_connections_per_ip == 2


@asynccontextmanager
async def name_server_port(tmp_path: Path, **settings: int) -> AsyncIterator[int]:
    """An in-process name server with ``settings``; yields its port."""
    config = NamesrvConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=str(tmp_path / "kvConfig.json"),
        **settings,  # type: ignore[arg-type]
    )
    async with trio.open_nursery() as nursery:
        yield await nursery.start(NameServer(config).run)
        nursery.cancel_scope.cancel()


GET_CONFIG = req(RequestCode.GET_NAMESRV_CONFIG)


async def test_name_server_caps_connections_per_ip(tmp_path: Path) -> None:
    get_config = GET_CONFIG
    with trio.fail_after(LIMIT):
        async with name_server_port(tmp_path, server_max_connections_per_ip=1) as port:
            first = await connect(port)
            answer = await exchange(first, get_config)
            assert "serverMaxConnectionsPerIp=1\n" in answer.body.decode()
            second = await connect(port)
            assert await refused(second)
            other = await connect(port, "127.0.0.2")
            assert (await exchange(other, get_config)).code == ResponseCode.SUCCESS
            for stream in (first, second, other):
                await stream.aclose()


def test_a_negative_per_ip_cap_is_refused(tmp_path: Path) -> None:
    bad = {"serverMaxConnectionsPerIp": "-1"}
    with pytest.raises(ValueError, match="serverMaxConnectionsPerIp must be >= 0"):
        NamesrvConfig.from_properties(bad)
    with pytest.raises(ValueError, match="serverMaxConnectionsPerIp must be >= 0"):
        BrokerConfig.from_properties({"storePathRootDir": str(tmp_path), **bad})
    assert NamesrvConfig().server_max_connections_per_ip == DEFAULT_MAX_CONNECTIONS_PER_IP
    assert BrokerConfig().server_max_connections_per_ip == DEFAULT_MAX_CONNECTIONS_PER_IP


async def test_name_server_caps_connections(tmp_path: Path) -> None:
    get_config = GET_CONFIG
    caps = {"server_max_connections": 2, "server_max_connections_per_ip": 0}
    with trio.fail_after(LIMIT):
        async with name_server_port(tmp_path, **caps) as port:
            held = [await connect(port), await connect(port, "127.0.0.2")]
            answer = await exchange(held[0], get_config)
            assert "serverMaxConnections=2\n" in answer.body.decode()
            assert (await exchange(held[1], get_config)).code == ResponseCode.SUCCESS
            third = await connect(port, "127.0.0.3")
            assert await refused(third)
            await held[0].aclose()
            # the slot comes back once the server has seen the close
            with trio.fail_after(LIMIT):
                while True:
                    again = await connect(port)
                    try:
                        answer = await exchange(again, get_config)
                        break
                    except (trio.BrokenResourceError, trio.EndOfChannel, AssertionError):
                        await again.aclose()
                        await trio.sleep(0.05)
            assert answer.code == ResponseCode.SUCCESS
            for stream in (held[1], third, again):
                await stream.aclose()


def test_a_negative_connection_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="serverMaxConnections must be >= 0"):
        NamesrvConfig.from_properties({"serverMaxConnections": "-1"})
    assert NamesrvConfig().server_max_connections == 0
