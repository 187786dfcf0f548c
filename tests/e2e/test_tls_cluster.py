"""A whole cluster over TLS: name server and broker with ``tls.server.mode=enforcing``, the
broker registering over TLS with its client certificate, producers, consumers and mqadmin.

In-process (name server, broker, clients on one trio loop) and as real processes
(``mqnamesrv -c``, ``mqbroker --tls.* ...``, ``mqadmin`` with ``MINIMQ_TLS_CONFIG_FILE``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from broker.controller import BrokerController
from client.aio import ClientInstance, ConsumeFromWhere, Producer, PullConsumer
from client.config import ClientConfig
from client.errors import MQClientError
from client.message import Message, ReceivedMessage, SendStatus
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.tls import client_ssl_context
from tests.admin.harness import mqadmin
from tests.broker.inprocess import SMALL_STORE, wait_until
from tests.processes import (
    BROKER_BOOT,
    NAMESRV_BOOT,
    console_script,
    read_log,
    start_command,
    stop_process,
)
from tests.remoting.tls_certs import Pki, pki

__all__ = ["pki"]

LIMIT = 30.0
TOPIC = "Secure"


def tls_client_config(namesrv: str, pki: Pki) -> ClientConfig:
    return ClientConfig(
        (namesrv,),
        use_tls=True,
        tls_trust_cert_path=str(pki.ca),
        tls_cert_path=str(pki.client_cert),
        tls_key_path=str(pki.client_key),
    )


@asynccontextmanager
async def tls_cluster(tmp_path: Path, pki: Pki) -> AsyncIterator[tuple[str, str]]:
    """A name server requiring client certificates and a broker serving TLS (and registering
    with its own client certificate); yields their addresses once the broker is registered."""
    namesrv_config = NamesrvConfig.from_properties(
        {"listenPort": "0", "bindAddress": "127.0.0.1", **pki.server_properties("require")}
    )
    namesrv = NameServer(namesrv_config)
    async with trio.open_nursery() as nursery:
        namesrv_addr = f"127.0.0.1:{await nursery.start(namesrv.run)}"
        broker_config = BrokerConfig.from_properties(
            {
                "listenPort": "0",
                "brokerIP1": "127.0.0.1",
                "storePathRootDir": str(tmp_path / "store"),
                "namesrvAddr": namesrv_addr,
                "registerNameServerPeriod": "200",
                **SMALL_STORE,
                **pki.server_properties(),
                **pki.client_properties(with_cert=True),
            }
        )
        broker = BrokerController(broker_config, host="127.0.0.1")
        broker_addr = f"127.0.0.1:{await nursery.start(broker.run)}"
        await wait_until(lambda: bool(namesrv.route_info.broker_addr_table), "registration")
        yield namesrv_addr, broker_addr
        nursery.cancel_scope.cancel()


async def create_topic(broker_addr: str, pki: Pki) -> None:
    async with RemotingClient(ssl_context=client_ssl_context(pki.client())) as client:
        cmd = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
            opaque=0,
        )
        resp = await client.invoke(broker_addr, cmd)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_produce_and_consume_over_tls(tmp_path: Path, pki: Pki) -> None:
    """Every hop speaks TLS: client -> name server (client certificate required), client ->
    broker, broker -> name server; the messages come back whole."""
    with trio.fail_after(LIMIT):
        async with tls_cluster(tmp_path, pki) as (namesrv, broker):
            await create_topic(broker, pki)
            async with ClientInstance(tls_client_config(namesrv, pki)) as instance:
                async with Producer("pg", instance=instance) as producer:
                    results = [
                        await producer.send(Message(TOPIC, b"secret-%d" % i)) for i in range(20)
                    ]
                assert {r.status for r in results} == {SendStatus.SEND_OK}
                consumer = PullConsumer(
                    "cg",
                    instance=instance,
                    consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                )
                async with consumer:
                    consumer.assign(await consumer.fetch_queues(TOPIC))
                    got: list[ReceivedMessage] = []
                    while len(got) < 20:
                        got += await consumer.poll()
    assert sorted(m.body for m in got) == sorted(b"secret-%d" % i for i in range(20))


async def test_a_plaintext_client_cannot_use_a_tls_cluster(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """Without TLS the producer cannot even fetch a route: it fails at once (well within its
    request timeout), and its log says the server speaks TLS."""
    with trio.fail_after(LIMIT), caplog.at_level(logging.WARNING):
        async with tls_cluster(tmp_path, pki) as (namesrv, broker):
            await create_topic(broker, pki)
            plain = ClientConfig((namesrv,), request_timeout_s=LIMIT, connect_timeout_s=LIMIT)
            async with ClientInstance(plain) as instance, Producer("pg", instance=instance) as p:
                with pytest.raises(MQClientError, match="no name server answered"):
                    await p.send(Message(TOPIC, b"x"))
    hints = [r for r in caplog.records if "the peer speaks TLS" in r.getMessage()]
    assert hints, [r.getMessage() for r in caplog.records]


async def test_mqadmin_over_tls(tmp_path: Path, pki: Pki) -> None:
    """mqadmin takes its TLS settings from MINIMQ_TLS_CONFIG_FILE (RocketMQ's tls.config.file);
    without them it fails with one line."""
    tls_file = tmp_path / "tls.properties"
    props = pki.client_properties(with_cert=True)
    tls_file.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    with trio.fail_after(LIMIT):
        async with tls_cluster(tmp_path, pki) as (namesrv, _):
            env: dict[str, str | None] = {"MINIMQ_TLS_CONFIG_FILE": str(tls_file)}
            result = await mqadmin("clusterList", "-n", namesrv, "--json", env=env)
            assert result.exit_code == 0, result.output
            assert "broker-a" in json.dumps(json.loads(result.stdout))
            plain = await mqadmin(
                "clusterList", "-n", namesrv, env={"MINIMQ_TLS_CONFIG_FILE": None}
            )
            assert plain.exit_code == 1
            assert plain.stderr.startswith("mqadmin clusterList: ")


# ---------------------------------------------------------------------- processes


async def test_console_scripts_over_tls(tmp_path: Path, pki: Pki) -> None:
    """mqnamesrv (-c with TLS keys), mqbroker (--tls.* overrides) and mqadmin, as processes."""
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        "".join(f"{k}={v}\n" for k, v in pki.server_properties("require").items())
        + f"kvConfigPath={tmp_path / 'kv.json'}\n"
    )
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        "".join(f"{k}={v}\n" for k, v in pki.client_properties(with_cert=True).items())
    )
    procs: list[trio.Process] = []
    try:
        namesrv_proc, boot = await start_command(
            [
                console_script("mqnamesrv"),
                "-c",
                str(conf),
                "--listenPort",
                "0",
                "--bindAddress",
                "127.0.0.1",
            ],
            tmp_path / "namesrv.log",
            NAMESRV_BOOT,
        )
        procs.append(namesrv_proc)
        namesrv = f"127.0.0.1:{boot[1]}"
        broker_args = [
            console_script("mqbroker"), "-n", namesrv, "--listenPort", "0",
            "--bindAddress", "127.0.0.1", "--brokerIP1", "127.0.0.1",
            "--storePathRootDir", str(tmp_path / "store"), "--diskMaxUsedSpaceRatio", "95",
            "--tls.config.file", str(tls_file),
        ]  # fmt: skip
        for key, value in pki.server_properties().items():
            broker_args += [f"--{key}", value]
        broker_proc, _ = await start_command(broker_args, tmp_path / "broker.log", BROKER_BOOT)
        procs.append(broker_proc)
        env = {**os.environ, "MINIMQ_TLS_CONFIG_FILE": str(tls_file)}
        with trio.fail_after(LIMIT):
            while True:
                done = await trio.run_process(
                    [console_script("mqadmin"), "clusterList", "-n", namesrv, "--json"],
                    env=env, capture_stdout=True, capture_stderr=True, check=False,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                if b"broker-a" in done.stdout:
                    break
                await trio.sleep(0.1)
    finally:
        for proc in procs:
            await stop_process(proc)
    assert "Traceback" not in read_log(tmp_path / "broker.log")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls.server.mode", "enforcing"], "bad config: bad broker properties: "
         "tls.server.mode=enforcing needs tls.server.certPath"),
        (["--tls.server.mode", "permissive"], "downgrade to plaintext"),
        (["--tls.server.mode", "enforcing", "--tls.server.certPath", "/nonexistent/c.pem",
          "--tls.server.keyPath", "/nonexistent/k.pem"],
         "cannot start: tls.server.certPath /nonexistent/c.pem: no such file"),
        (["--tls.enable", "true", "--tls.client.trustCertPath", "/nonexistent/ca.pem"],
         "cannot start: tls.client.trustCertPath /nonexistent/ca.pem: no such file"),
    ],
)  # fmt: skip
def test_broker_tls_misconfiguration_is_a_startup_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = subprocess.run(
        [console_script("mqbroker"), "--listenPort", "0", "--bindAddress", "127.0.0.1",
         "--storePathRootDir", str(tmp_path / "store"), "--diskMaxUsedSpaceRatio", "95", *args],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_namesrv_tls_misconfiguration_is_a_startup_error(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        "tls.server.mode=enforcing\ntls.server.certPath=/nonexistent/c.pem\n"
        f"tls.server.keyPath=/nonexistent/k.pem\nkvConfigPath={tmp_path / 'kv.json'}\n"
    )
    done = subprocess.run(
        [console_script("mqnamesrv"), "-c", str(conf), "--listenPort", "0",
         "--bindAddress", "127.0.0.1"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "cannot start: tls.server.certPath /nonexistent/c.pem: no such file" in done.stderr
