"""The name server end to end: handlers over loopback, the expiry loop, the ``mqnamesrv`` process.

- In-process tests start :class:`NameServer` on 127.0.0.1 port 0 and talk to it through a
  :class:`RemotingClient`, each bounded by ``trio.fail_after(LIMIT)``.
- Expiry runs :func:`expire_loop` against a :class:`RouteInfoManager` under trio's
  ``autojump_clock``: virtual time, no real waiting, no sockets.
- Process tests run ``python -m namesrv`` and always kill it by pid in a ``finally``.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgpack
import pytest
import trio

from common.route import DataVersion, TopicConfig
from namesrv.config import NamesrvConfig
from namesrv.route_info import RouteInfoManager
from namesrv.server import NameServer, expire_loop, trio_now_ms
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.route_bodies import (
    decode_cluster_info_body,
    decode_register_body,
    decode_route_body,
    decode_topic_list_body,
    encode_register_body,
)
from tests.broker.inprocess import wait_until
from tests.processes import NAMESRV_BOOT, read_log, run_cli, start_process, stop_process

LIMIT = 10
CLUSTER = "DefaultCluster"
TOPIC = "TopicTest"


def req(code: int, body: bytes = b"", **ext: ExtValue) -> RemotingCommand:
    return RemotingCommand.request(code, ext, body, opaque=0)


def register_req(
    name: str, addr: str, broker_id: int = 0, body: bytes | None = None
) -> RemotingCommand:
    if body is None:
        body = encode_register_body({TOPIC: TopicConfig(TOPIC, 4, 4)})
    return req(
        RequestCode.REGISTER_BROKER,
        body,
        brokerName=name,
        brokerAddr=addr,
        clusterName=CLUSTER,
        haServerAddr=addr.replace(":109", ":110"),
        brokerId=str(broker_id),
    )


@asynccontextmanager
async def running_namesrv() -> AsyncIterator[tuple[NameServer, RemotingClient, str]]:
    """A NameServer on 127.0.0.1:0 and a client; yields (server, client, "host:port")."""
    server = NameServer(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run)
            async with RemotingClient() as client:
                yield server, client, f"127.0.0.1:{port}"
            nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------- body helpers


def test_register_body_round_trip() -> None:
    configs = {TOPIC: TopicConfig(TOPIC, 8, 4, perm=6)}
    version = DataVersion(1_700_000_000_000, 7)
    body = encode_register_body(configs, ["f:1"], version)
    assert decode_register_body(body) == (configs, ["f:1"], version)
    assert decode_register_body(encode_register_body(configs)) == (configs, [], None)
    assert decode_register_body(b"") == ({}, None, None)


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # never-used msgpack byte
        msgpack.packb([1, 2]),
        msgpack.packb({"topicConfigTable": []}),
        msgpack.packb({"topicConfigTable": {TOPIC: {"topicName": TOPIC, "perm": 99}}}),
        msgpack.packb({"filterServerList": [1]}),
        msgpack.packb({"dataVersion": [1, 2]}),
        msgpack.packb({"dataVersion": {"timestamp": 1, "counter": "2"}}),
    ],
)
def test_register_body_rejects_garbage(body: bytes) -> None:
    with pytest.raises(ValueError, match="REGISTER_BROKER"):
        decode_register_body(body)


# --------------------------------------------------------------------------- in-process


async def test_register_route_and_queries() -> None:
    async with running_namesrv() as (_server, client, addr):
        for name, broker_addr in (("broker-a", "10.0.0.1:10911"), ("broker-b", "10.0.0.2:10911")):
            resp = await client.invoke(addr, register_req(name, broker_addr))
            assert resp.code == ResponseCode.SUCCESS, resp.remark

        resp = await client.invoke(addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC))
        assert resp.code == ResponseCode.SUCCESS
        route = decode_route_body(resp.body)
        assert [qd.broker_name for qd in route.queue_datas] == ["broker-a", "broker-b"]
        assert all(qd.read_queue_nums == 4 for qd in route.queue_datas)
        assert {bd.broker_name: bd.broker_addrs for bd in route.broker_datas} == {
            "broker-a": {0: "10.0.0.1:10911"},
            "broker-b": {0: "10.0.0.2:10911"},
        }

        resp = await client.invoke(addr, req(RequestCode.GET_BROKER_CLUSTER_INFO))
        info = decode_cluster_info_body(resp.body)
        assert info.cluster_addr_table == {CLUSTER: {"broker-a", "broker-b"}}
        assert set(info.broker_addr_table) == {"broker-a", "broker-b"}

        resp = await client.invoke(addr, req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert decode_topic_list_body(resp.body) == [TOPIC]
        resp = await client.invoke(addr, req(RequestCode.GET_TOPICS_BY_CLUSTER, cluster=CLUSTER))
        assert decode_topic_list_body(resp.body) == [TOPIC]
        resp = await client.invoke(addr, req(RequestCode.GET_TOPICS_BY_CLUSTER, cluster="nope"))
        assert decode_topic_list_body(resp.body) == []

        resp = await client.invoke(
            addr,
            req(
                RequestCode.UNREGISTER_BROKER,
                clusterName=CLUSTER,
                brokerAddr="10.0.0.2:10911",
                brokerName="broker-b",
                brokerId=0,
            ),
        )
        assert resp.code == ResponseCode.SUCCESS
        resp = await client.invoke(addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC))
        route = decode_route_body(resp.body)
        assert [bd.broker_name for bd in route.broker_datas] == ["broker-a"]

        resp = await client.invoke(addr, req(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic=TOPIC))
        assert resp.code == ResponseCode.SUCCESS
        resp = await client.invoke(addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC))
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        resp = await client.invoke(addr, req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert decode_topic_list_body(resp.body) == []


async def test_slave_registration_gets_master_addresses() -> None:
    async with running_namesrv() as (_server, client, addr):
        await client.invoke(addr, register_req("broker-a", "10.0.0.1:10911"))
        resp = await client.invoke(addr, register_req("broker-a", "10.0.0.9:10911", broker_id=1))
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:11011"}


async def test_unknown_topic() -> None:
    async with running_namesrv() as (_server, client, addr):
        resp = await client.invoke(addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Nope"))
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert "Nope" in resp.remark


async def test_bad_requests_answered_and_server_keeps_serving() -> None:
    async with running_namesrv() as (server, client, addr):
        resp = await client.invoke(addr, register_req("broker-a", "10.0.0.1:10911", body=b"\xc1"))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "msgpack" in resp.remark

        no_name = register_req("broker-a", "10.0.0.1:10911")
        del no_name.ext_fields["brokerName"]
        resp = await client.invoke(addr, no_name)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "brokerName" in resp.remark

        bad_id = register_req("broker-a", "10.0.0.1:10911")
        bad_id.ext_fields["brokerId"] = "zero"
        resp = await client.invoke(addr, bad_id)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "brokerId" in resp.remark

        resp = await client.invoke(addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=7))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "topic" in resp.remark
        assert server.route_info.broker_addr_table == {}

        # Same connection still served.
        resp = await client.invoke(addr, register_req("broker-a", "10.0.0.1:10911"))
        assert resp.code == ResponseCode.SUCCESS
        resp = await client.invoke(addr, req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert decode_topic_list_body(resp.body) == [TOPIC]


# --------------------------------------------------------------------------- expiry


async def test_silent_broker_expires_after_window_plus_one_scan(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rim = RouteInfoManager(broker_channel_expired_time_ms=120_000)
    start = trio.current_time()

    def register(name: str, addr: str) -> None:
        rim.register_broker(
            CLUSTER, addr, name, 0, addr, {TOPIC: TopicConfig(TOPIC)}, trio_now_ms()
        )

    async def heartbeat() -> None:
        while True:
            register("broker-live", "10.0.0.2:10911")
            await trio.sleep(30)

    def brokers() -> list[str]:
        route = rim.pick_topic_route(TOPIC)
        return [] if route is None else [bd.broker_name for bd in route.broker_datas]

    async with trio.open_nursery() as nursery:
        register("broker-silent", "10.0.0.1:10911")
        nursery.start_soon(heartbeat)
        nursery.start_soon(expire_loop, rim, 5000)
        # Scans at 5 s, 10 s, ...; at 120 s the broker is exactly at the window (not expired).
        await trio.sleep_until(start + 124.9)
        assert brokers() == ["broker-live", "broker-silent"]
        await trio.sleep_until(start + 125.1)
        assert brokers() == ["broker-live"]
        assert "10.0.0.1:10911" not in rim.broker_live_table
        await trio.sleep(600)
        assert brokers() == ["broker-live"]
        nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------- the process


async def test_process_boots_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr.log"
    proc, boot = await start_process(
        ["namesrv", "--listenPort", "0", "--bindAddress", "127.0.0.1"], stderr_path, NAMESRV_BOOT
    )
    try:
        port = int(boot.group(1))
        assert port > 0
        with trio.fail_after(LIMIT):
            async with RemotingClient() as client:
                resp = await client.invoke(
                    f"127.0.0.1:{port}", req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
                )
                assert resp.code == ResponseCode.SUCCESS
                assert decode_topic_list_body(resp.body) == []

        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            rc = await proc.wait()
        assert rc == 0, read_log(stderr_path)
    finally:
        await stop_process(proc)


def test_print_config_exits_zero() -> None:
    out = run_cli("namesrv", "-p", "--listenPort", "1234")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "listenPort=1234" in lines
    assert "bindAddress=0.0.0.0" in lines
    assert "brokerChannelExpiredTime=120000" in lines


def test_bad_config_file_exits_one(tmp_path: Path) -> None:
    bad = tmp_path / "namesrv.properties"
    bad.write_text("listenPort=9876\nnoSuchKey=1\n", encoding="utf-8")
    out = run_cli("namesrv", "-c", str(bad))
    assert out.returncode == 1
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert "noSuchKey" in out.stderr


def test_port_in_use_exits_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_cli("namesrv", "--listenPort", str(port), "--bindAddress", "127.0.0.1")
    assert out.returncode == 1
    assert "cannot start" in out.stderr.strip().splitlines()[-1]


async def test_a_broker_whose_connection_closes_leaves_the_routes_at_once() -> None:
    """As RocketMQ's BrokerHousekeepingService: a killed broker's connection closes and its
    routes go then, not after the 120 s expiry; a broker whose latest registration came over
    another connection stays until that one closes."""
    a_addr, b_addr = "127.0.0.1:10911", "127.0.0.1:10921"
    route_req = req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
    async with running_namesrv() as (server, client, addr):

        async def routed_brokers() -> list[str]:
            resp = await client.invoke(addr, route_req)
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                return []
            return [bd.broker_name for bd in decode_route_body(resp.body).broker_datas]

        async with RemotingClient() as b_latest:
            async with RemotingClient() as a_conn, RemotingClient() as b_first:
                assert (await a_conn.invoke(addr, register_req("broker-a", a_addr))).code == 0
                assert (await b_first.invoke(addr, register_req("broker-b", b_addr))).code == 0
                assert (await b_latest.invoke(addr, register_req("broker-b", b_addr))).code == 0
                assert await routed_brokers() == ["broker-a", "broker-b"]

            async def only_b() -> bool:
                return await routed_brokers() == ["broker-b"]

            await wait_until(only_b, "broker-a dropped once its connection closed")
            assert server.route_info.broker_live_table.keys() == {b_addr}

        async def none_left() -> bool:
            return await routed_brokers() == []

        await wait_until(none_left, "broker-b dropped once its latest connection closed")


async def test_a_late_older_registration_does_not_move_the_brokers_connection() -> None:
    """A registration older than the applied one (its ``dataVersion``) changes nothing: the
    broker's topics stay, and so does the connection whose closing removes it."""
    a_addr, c_addr = "127.0.0.1:10911", "127.0.0.1:10931"
    newer = encode_register_body({TOPIC: TopicConfig(TOPIC, 8, 8)}, (), DataVersion(2000, 2))
    older = encode_register_body({TOPIC: TopicConfig(TOPIC, 4, 4)}, (), DataVersion(1000, 1))
    route_req = req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
    async with running_namesrv() as (_, client, addr):

        async def routed() -> dict[str, int]:
            resp = await client.invoke(addr, route_req)
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                return {}
            return {
                q.broker_name: q.write_queue_nums for q in decode_route_body(resp.body).queue_datas
            }

        async with RemotingClient() as a_conn:
            assert (
                await a_conn.invoke(addr, register_req("broker-a", a_addr, body=newer))
            ).code == 0
            async with RemotingClient() as late:
                assert (
                    await late.invoke(addr, register_req("broker-a", a_addr, body=older))
                ).code == 0
                assert (await late.invoke(addr, register_req("broker-c", c_addr))).code == 0
                assert await routed() == {"broker-a": 8, "broker-c": 4}

            async def c_gone() -> bool:
                return "broker-c" not in await routed()

            await wait_until(c_gone, "broker-c dropped once the late connection closed")
            assert await routed() == {"broker-a": 8}


async def test_wipe_and_add_write_perm_answer_their_topic_counts() -> None:
    """WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER answer ``wipeTopicCount`` /
    ``addTopicCount`` (0 for an unknown broker name); a request without ``brokerName`` is
    SYSTEM_ERROR naming the field."""
    async with running_namesrv() as (_, client, addr):
        assert (await client.invoke(addr, register_req("broker-a", "127.0.0.1:10911"))).code == 0

        async def perm_of_a() -> int:
            resp = await client.invoke(addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC))
            return decode_route_body(resp.body).queue_datas[0].perm

        wipe = await client.invoke(
            addr, req(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-a")
        )
        assert (wipe.code, wipe.ext_fields["wipeTopicCount"]) == (ResponseCode.SUCCESS, "1")
        assert await perm_of_a() == 4
        unknown = await client.invoke(
            addr, req(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-x")
        )
        assert (unknown.code, unknown.ext_fields["wipeTopicCount"]) == (ResponseCode.SUCCESS, "0")
        add = await client.invoke(
            addr, req(RequestCode.ADD_WRITE_PERM_OF_BROKER, brokerName="broker-a")
        )
        assert (add.code, add.ext_fields["addTopicCount"]) == (ResponseCode.SUCCESS, "1")
        assert await perm_of_a() == 6
        bad = await client.invoke(addr, req(RequestCode.ADD_WRITE_PERM_OF_BROKER))
        assert bad.code == ResponseCode.SYSTEM_ERROR
        assert "brokerName" in (bad.remark or "")
