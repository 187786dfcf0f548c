"""The broker wired end to end: BrokerController + NameServer in-process, then real processes.

- In-process: NameServer + BrokerController in one nursery on 127.0.0.1 port 0; registration,
  send, route refresh on the next registration, pull. Every wait is deadline-bounded.
- Processes: ``python -m namesrv`` and ``python -m broker`` bound to 127.0.0.1; boot lines read
  under a deadline; SIGTERM -> exit 0 with no ``abort`` file; a restart on the same store still
  serves the message and the committed consumer offset. Processes are killed by pid in ``finally``.
"""

from __future__ import annotations

import itertools
import re
import resource
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgpack
import trio

from broker.config import BrokerConfig
from broker.controller import BrokerController
from common.compiled import build_description
from common.message_id import decode_offset_msg_id
from common.record import decode_records
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.route_bodies import decode_cluster_info_body, decode_route_body
from tests.processes import (
    BROKER_BOOT,
    LOWERED_SOFT_NOFILE,
    console_script,
    open_files_limits,
    read_log,
    run_cli,
    start_command,
    start_namesrv,
    start_process,
    stop_process,
    with_lowered_soft_nofile,
)

LIMIT = 20.0
TOPIC = "TopicWired"
GROUP = "cg"
_opaque = itertools.count(1)

SMALL_STORE = {
    "mappedFileSizeCommitLog": "1048576",
    "mappedFileSizeConsumeQueue": "6000",
    "maxHashSlotNum": "100",
    "maxIndexNum": "400",
}


def small_broker_args(namesrv: str, store: Path) -> list[str]:
    """``mqbroker`` options for a broker on 127.0.0.1 and a free port with a small store in
    ``store``, registering with ``namesrv`` (with none when it is empty)."""
    return [
        "-n",
        namesrv,
        "--bindAddress",
        "127.0.0.1",
        "--listenPort",
        "0",
        "--brokerIP1",
        "127.0.0.1",
        "--storePathRootDir",
        str(store),
        "--diskMaxUsedSpaceRatio",
        "95",
        *itertools.chain.from_iterable((f"--{k}", v) for k, v in SMALL_STORE.items()),
    ]


def req(code: int, body: bytes = b"", **ext: ExtValue) -> RemotingCommand:
    return RemotingCommand.request(code, ext, body, opaque=next(_opaque))


def send_req(body: bytes) -> RemotingCommand:
    return req(
        RequestCode.SEND_MESSAGE,
        body,
        producerGroup="pg",
        topic=TOPIC,
        queueId="0",
        bornTimestamp="1700000000000",
    )


def pull_req(offset: int = 0) -> RemotingCommand:
    return req(
        RequestCode.PULL_MESSAGE,
        consumerGroup=GROUP,
        topic=TOPIC,
        queueId="0",
        queueOffset=str(offset),
        maxMsgNums="32",
    )


async def wait_until(cond: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``cond`` every 20 ms until it is true; fail after ``LIMIT`` seconds."""
    with trio.move_on_after(LIMIT):
        while True:
            if await cond():
                return
            await trio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def pull_bodies(client: RemotingClient, addr: str) -> list[bytes]:
    """Bodies pulled from queue 0 at offset 0, once the message has been dispatched."""
    bodies: list[bytes] = []

    async def got() -> bool:
        resp = await client.invoke(addr, pull_req())
        if resp.code != ResponseCode.SUCCESS:
            return False
        bodies[:] = [r.body for r in decode_records(resp.body, check_crc=True)]
        return True

    await wait_until(got, "the message to be pullable")
    return bodies


# --------------------------------------------------------------------------- in-process


async def test_broker_registers_serves_and_refreshes_route(tmp_path: Path) -> None:
    namesrv = NameServer(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    with trio.fail_after(LIMIT * 2):
        async with trio.open_nursery() as nursery:
            ns_port = await nursery.start(namesrv.run)
            ns_addr = f"127.0.0.1:{ns_port}"
            config = BrokerConfig.load(
                None,
                ns_addr,
                {},
                {
                    "listenPort": "0",
                    "brokerIP1": "127.0.0.1",
                    "registerNameServerPeriod": "200",
                    "flushConsumerOffsetInterval": "200",
                    "storePathRootDir": str(tmp_path / "store"),
                    **SMALL_STORE,
                },
            )
            broker = BrokerController(config, host="127.0.0.1")
            broker_scope = trio.CancelScope()
            stopped = trio.Event()

            async def run_broker(*, task_status: trio.TaskStatus[int]) -> None:
                with broker_scope:
                    await broker.run(task_status=task_status)
                stopped.set()

            port = await nursery.start(run_broker)
            broker_addr = f"127.0.0.1:{port}"
            assert broker.broker_addr == broker_addr

            async with RemotingClient() as client:

                async def registered() -> bool:
                    resp = await client.invoke(ns_addr, req(RequestCode.GET_BROKER_CLUSTER_INFO))
                    info = decode_cluster_info_body(resp.body)
                    data = info.broker_addr_table.get("broker-a")
                    return data is not None and data.broker_addrs == {0: broker_addr}

                await wait_until(registered, "the broker in the name server's cluster info")

                resp = await client.invoke(broker_addr, send_req(b"hello"))
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                host, msg_port, _ = decode_offset_msg_id(str(resp.ext_fields["msgId"]))
                assert (host, msg_port) == ("127.0.0.1", port)  # the bound port, not 0

                async def routed() -> bool:
                    resp = await client.invoke(
                        ns_addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
                    )
                    if resp.code != ResponseCode.SUCCESS:
                        return False
                    route = decode_route_body(resp.body)
                    return [qd.broker_name for qd in route.queue_datas] == ["broker-a"]

                await wait_until(routed, "the auto-created topic in the route")

                assert await pull_bodies(client, broker_addr) == [b"hello"]

                # Ordered shutdown: UNREGISTER_BROKER reaches the name server before run returns.
                broker_scope.cancel()
                await stopped.wait()
                assert not await registered()
                resp = await client.invoke(ns_addr, req(RequestCode.GET_BROKER_CLUSTER_INFO))
                assert "broker-a" not in decode_cluster_info_body(resp.body).broker_addr_table
            nursery.cancel_scope.cancel()
    assert not (tmp_path / "store" / "abort").exists()


# --------------------------------------------------------------------------- processes


async def test_broker_process_sigterm_and_restart(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr.log"
    store = tmp_path / "store"
    procs: list[trio.Process] = []
    try:
        ns, ns_addr = await start_namesrv(stderr_path)
        procs.append(ns)
        broker_args = ["broker", *small_broker_args(ns_addr, store)]

        broker, match = await start_process(broker_args, stderr_path, BROKER_BOOT)
        procs.append(broker)
        assert match[2] == ns_addr
        addr = f"127.0.0.1:{match[1]}"
        with trio.fail_after(LIMIT):
            async with RemotingClient() as client:
                resp = await client.invoke(addr, send_req(b"durable"))
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                assert await pull_bodies(client, addr) == [b"durable"]
                resp = await client.invoke(
                    addr,
                    req(
                        RequestCode.UPDATE_CONSUMER_OFFSET,
                        consumerGroup=GROUP,
                        topic=TOPIC,
                        queueId="0",
                        commitOffset="1",
                    ),
                )
                assert resp.code == ResponseCode.SUCCESS, resp.remark

        broker.send_signal(signal.SIGTERM)
        with trio.fail_after(LIMIT):
            rc = await broker.wait()
        assert rc == 0, read_log(stderr_path)
        assert not (store / "abort").exists()
        assert "unregister with name server" not in read_log(stderr_path)
        assert f"hot path: {build_description()}" in read_log(stderr_path)

        broker, match = await start_process(broker_args, stderr_path, BROKER_BOOT)
        procs.append(broker)
        addr = f"127.0.0.1:{match[1]}"
        with trio.fail_after(LIMIT):
            async with RemotingClient() as client:
                assert await pull_bodies(client, addr) == [b"durable"]
                resp = await client.invoke(
                    addr,
                    req(
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        consumerGroup=GROUP,
                        topic=TOPIC,
                        queueId="0",
                    ),
                )
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                assert resp.ext_fields["offset"] == "1"

        broker.send_signal(signal.SIGTERM)
        with trio.fail_after(LIMIT):
            assert await broker.wait() == 0, read_log(stderr_path)
        assert not (store / "abort").exists()
    finally:
        for proc in reversed(procs):
            await stop_process(proc)


def test_unknown_override_exits_one() -> None:
    out = run_cli("broker", "--noSuchKey", "1")
    assert out.returncode == 1
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert "noSuchKey" in out.stderr


async def test_broker_raises_its_open_files_limit_to_the_hard_limit(tmp_path: Path) -> None:
    """Started with a low soft ``RLIMIT_NOFILE`` (``ulimit -Sn`` in its own shell), ``mqbroker``
    raises it to the hard limit, as the JVM running RocketMQ does, before its server sizes
    the connection cap from it (half the soft limit, two descriptors a connection)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= LOWERED_SOFT_NOFILE:
        return  # nothing to raise to here
    stderr_path = tmp_path / "stderr.log"
    argv = [console_script("mqbroker"), *small_broker_args("", tmp_path / "store")]
    boot = re.compile(r"The broker\[broker-a, 127\.0\.0\.1:(\d+)\] boot success\..*")
    broker, match = await start_command(with_lowered_soft_nofile(argv), stderr_path, boot)
    try:
        assert open_files_limits(broker.pid) == (hard, hard)
        assert f"raised from {LOWERED_SOFT_NOFILE} to {hard}" in read_log(stderr_path)
        with trio.fail_after(LIMIT):
            async with RemotingClient() as client:
                addr = f"127.0.0.1:{match[1]}"
                resp = await client.invoke(addr, req(RequestCode.GET_BROKER_RUNTIME_INFO))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        table = msgpack.unpackb(resp.body)["table"]
        assert table["connections"] == f"1 of {hard // 4}"
    finally:
        await stop_process(broker)
