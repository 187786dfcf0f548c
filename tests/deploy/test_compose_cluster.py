"""The compose file's services started as local processes: its commands and environment, with
ports remapped to free ones, stores under tmp_path and service names resolved to 127.0.0.1.
Together they must form a working cluster (produce and consume with the blocking client)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from client import ConsumeFromWhere, Message, Producer, PullConsumer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.route_bodies import decode_cluster_info_body
from tests.broker.inprocess import SMALL_STORE
from tests.deploy.compose import console_scripts, host_command, load_compose
from tests.deploy.netutil import free_port, http_get, samples
from tests.processes import (
    BOOT_LIMIT_S,
    BROKER_BOOT_ANY,
    NAMESRV_BOOT,
    REPO,
    console_script,
    read_log,
    stop_process,
)

TOPIC = "ComposeTopic"
COUNT = 24
LIMIT_S = 30.0


async def start(
    argv: list[str], env: Mapping[str, str], log: Path, boot: re.Pattern[str]
) -> tuple[trio.Process, re.Match[str]]:
    """Start ``argv`` with ``env``; return it and the match of its boot line."""
    with log.open("ab") as stderr:
        proc = await trio.lowlevel.open_process(
            argv, cwd=REPO, env=dict(env), stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        assert proc.stdout is not None
        buf = b""
        with trio.fail_after(BOOT_LIMIT_S):
            while b"\n" not in buf:
                chunk = await proc.stdout.receive_some()
                assert chunk, f"{argv[0]} exited early: {read_log(log)}"
                buf += chunk
        match = boot.fullmatch(buf.split(b"\n", 1)[0].decode())
        assert match is not None, buf
    except BaseException:
        await stop_process(proc)
        raise
    return proc, match


async def terminate(proc: trio.Process, log: Path) -> None:
    """SIGTERM by pid, wait for the exit; it must be a clean one."""
    os.kill(proc.pid, signal.SIGTERM)
    with trio.fail_after(LIMIT_S):
        await proc.wait()
    assert proc.returncode == 0, read_log(log)


def service_env(service: Mapping[str, Any], names: Mapping[str, str], home: Path) -> dict[str, str]:
    """The process environment: ours, then the service's with compose names resolved."""
    env = {**os.environ, "HOME": str(home)}
    for key, value in service.get("environment", {}).items():
        env[key] = names.get(str(value), str(value))
    return env


async def create_topic(client: RemotingClient, broker: str) -> None:
    fields: dict[str, ExtValue] = {
        "topic": TOPIC,
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
    }
    cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields, opaque=0)
    resp = await client.invoke(broker, cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def produce_and_consume(namesrv: str) -> tuple[set[str], list[bytes]]:
    """The blocking client, as a program on the docker host would use it."""
    with Producer(group="compose-pg", namesrv=namesrv) as producer:
        results = [
            producer.send(Message(TOPIC, b"m-%d" % i), timeout=LIMIT_S) for i in range(COUNT)
        ]
    bodies: list[bytes] = []
    with PullConsumer(
        group="compose-cg",
        namesrv=namesrv,
        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    ) as consumer:
        consumer.assign(consumer.fetch_queues(TOPIC, timeout=LIMIT_S))
        for _ in range(200):
            bodies += [m.body for m in consumer.poll(timeout=0.5)]
            if len(bodies) >= COUNT:
                break
        consumer.commit()
    return {r.queue.broker_name for r in results}, bodies


async def test_compose_services_form_a_working_cluster(tmp_path: Path) -> None:
    doc = load_compose()
    services: dict[str, Any] = doc["services"]
    procs: list[tuple[trio.Process, Path]] = []
    try:
        namesrv = services["namesrv"]
        command = host_command(namesrv)
        log = tmp_path / "namesrv.log"
        (tmp_path / "namesrv").mkdir()
        proc, match = await start(
            [
                console_script(command[0]),
                *command[1:],
                *("--listenPort", "0", "--bindAddress", "127.0.0.1"),
            ],
            service_env(namesrv, {}, tmp_path / "namesrv"),
            log,
            NAMESRV_BOOT,
        )
        procs.append((proc, log))
        namesrv_addr = f"127.0.0.1:{match[1]}"
        names = {"namesrv:9876": namesrv_addr}

        brokers: dict[str, str] = {}
        metrics: dict[str, int] = {}
        for name in ("broker-a", "broker-b"):
            service = services[name]
            command = host_command(service)
            metrics[name] = free_port()
            small = [arg for key, value in SMALL_STORE.items() for arg in (f"--{key}", value)]
            argv = [
                console_script(command[0]),
                *command[1:],
                *("--listenPort", "0", "--bindAddress", "127.0.0.1"),
                *("--storePathRootDir", str(tmp_path / name / "store")),
                *("--metricsPort", str(metrics[name])),
                *small,
            ]
            (tmp_path / name).mkdir()
            log = tmp_path / f"{name}.log"
            env = service_env(service, names, tmp_path / name)
            proc, match = await start(argv, env, log, BROKER_BOOT_ANY)
            procs.append((proc, log))
            assert match[1] == name
            assert match[3] == namesrv_addr  # NAMESRV_ADDR from the compose environment
            brokers[name] = f"127.0.0.1:{match[2]}"  # brokerIP1 = the BROKER_IP default

        async with RemotingClient(default_timeout_s=LIMIT_S) as client:
            cmd = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}, opaque=0)
            info = decode_cluster_info_body((await client.invoke(namesrv_addr, cmd)).body)
            advertised = {n: d.broker_addrs[0] for n, d in info.broker_addr_table.items()}
            assert advertised == brokers
            for addr in brokers.values():
                await create_topic(client, addr)

        used, bodies = await trio.to_thread.run_sync(produce_and_consume, namesrv_addr)
        assert used == set(brokers)
        assert sorted(bodies) == sorted(b"m-%d" % i for i in range(COUNT))

        stored = 0.0
        for port in metrics.values():
            status, _, text = await http_get(f"http://127.0.0.1:{port}/metrics")
            assert status == 200
            stored += sum(
                s.value
                for s in samples(text)
                if s.name == "rocketmq_messages_in_total" and s.labels["topic"] == TOPIC
            )
        assert stored == COUNT

        await run_broker_healthchecks(services, names)

        for proc, log in reversed(procs):
            await terminate(proc, log)
    finally:
        for proc, _ in procs:
            await stop_process(proc)


async def run_broker_healthchecks(services: Mapping[str, Any], names: Mapping[str, str]) -> None:
    """Each broker's compose healthcheck, run against the local name server, succeeds."""
    if "mqadmin" not in console_scripts():
        return  # see test_broker_healthchecks_need_mqadmin
    for name in ("broker-a", "broker-b"):
        shell = services[name]["healthcheck"]["test"][1]
        for compose_addr, addr in names.items():
            shell = shell.replace(compose_addr, addr)
        bin_dir = Path(console_script("mqadmin")).parent
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
        done = await trio.run_process(["sh", "-c", shell], env=env, check=False)
        assert done.returncode == 0, f"{name} healthcheck failed: {shell}"
        unknown = shell.replace(name, "broker-z")  # not registered: unhealthy
        done = await trio.run_process(["sh", "-c", unknown], env=env, check=False)
        assert done.returncode != 0


def test_broker_healthchecks_need_mqadmin() -> None:
    if "mqadmin" not in console_scripts():
        pytest.skip("mqadmin (the brokers' healthcheck) is not a console script yet")
    console_script("mqadmin")
