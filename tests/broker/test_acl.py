"""ACL on a real broker and name server (in process, real sockets on 127.0.0.1): who may send,
pull and administer, replay and clock-skew refusals, signed registration, reloads; and that
with ``aclEnable=false`` nothing changes."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from broker.controller import BrokerController
from client.aio import ClientInstance, ConsumeFromWhere, Producer, PullConsumer
from client.config import ClientConfig
from client.errors import MQClientError
from client.message import Message
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.acl.config import AclConfigError
from remoting.acl.signing import RequestSigner, SessionCredentials
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import LIMIT, req, running_broker, send_req, wait_until
from tests.conftest import ManualClock

TOPIC = "Orders"
ADMIN = SessionCredentials("rocketmq2", "12345678")
PRODUCER = SessionCredentials("producer1", "s3cret-key-1")  # PUB on Orders only
READER = SessionCredentials("reader01", "s3cret-key-4")  # PUB|SUB on every topic but Secret
ACCOUNTS = """
accounts:
  - accessKey: producer1
    secretKey: s3cret-key-1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [Orders=PUB]
  - accessKey: reader01
    secretKey: s3cret-key-4
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: [Secret=DENY]
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: true
"""


def write_accounts(path: Path, text: str = ACCOUNTS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    return path


def acl_overrides(acl_file: Path, creds: SessionCredentials | None = ADMIN) -> dict[str, str]:
    out = {"aclEnable": "true", "aclFileFullPath": str(acl_file)}
    if creds is not None:
        out |= {"accessKey": creds.access_key, "secretKey": creds.secret_key}
    return out


@asynccontextmanager
async def acl_namesrv(tmp_path: Path, acl_file: Path) -> AsyncIterator[tuple[NameServer, str]]:
    config = NamesrvConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=str(tmp_path / "ns" / "kv.json"),
        config_store_path=str(tmp_path / "ns" / "namesrv.properties"),
        acl_enable=True,
        acl_file_full_path=str(acl_file),
    )
    server = NameServer(config)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        yield server, f"127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def acl_broker(
    tmp_path: Path, namesrv: str | None = None, **extra: str
) -> AsyncIterator[tuple[BrokerController, str]]:
    acl_file = write_accounts(tmp_path / "plain_acl.yml")
    overrides: Mapping[str, str] = {**acl_overrides(acl_file), **extra}
    async with running_broker(tmp_path, namesrv, overrides=overrides) as (broker, addr):
        yield broker, addr


@asynccontextmanager
async def signed_client(creds: SessionCredentials | None) -> AsyncIterator[RemotingClient]:
    hook = RequestSigner(creds) if creds is not None else None
    async with RemotingClient(default_timeout_s=LIMIT, rpc_hook=hook) as client:
        yield client


def create_topic_req(topic: str = TOPIC) -> RemotingCommand:
    return req(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        topic=topic,
        readQueueNums="1",
        writeQueueNums="1",
        perm="6",
    )


def pull_req(topic: str = TOPIC, group: str = "cg") -> RemotingCommand:
    return req(
        RequestCode.PULL_MESSAGE,
        consumerGroup=group,
        topic=topic,
        queueId="0",
        queueOffset="0",
        maxMsgNums="8",
        sysFlag="0",
        commitOffset="0",
        suspendTimeoutMillis="0",
        subscription="*",
        subVersion="0",
    )


async def create_topic(addr: str, topic: str = TOPIC) -> None:
    async with signed_client(ADMIN) as client:
        resp = await client.invoke(addr, create_topic_req(topic))
        assert resp.code == ResponseCode.SUCCESS, resp.remark


# ---------------------------------------------------------------------- broker


async def test_unsigned_requests_get_no_permission(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr), signed_client(None) as client:
        await create_topic(addr)
        for request in (send_req(TOPIC, b"x"), pull_req(), create_topic_req("Other")):
            resp = await client.invoke(addr, request)
            assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
            assert "AccessKey missing" in resp.remark
        assert broker.topics is not None
        assert broker.topics.select("Other") is None
        # an unknown code is answered as ever, before any ACL work
        resp = await client.invoke(addr, req(9999))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert broker.acl is not None
        assert broker.acl.validator.denied == 3


async def test_permissions_on_the_broker(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr):
        await create_topic(addr)
        await create_topic(addr, "Secret")
        async with signed_client(PRODUCER) as producer:
            resp = await producer.invoke(addr, send_req(TOPIC, b"hello"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            pulled = await producer.invoke(addr, pull_req())  # PUB only: may not pull
            assert pulled.code == ResponseCode.NO_PERMISSION
            assert "no SUB permission on topic:Orders" in pulled.remark
            other = await producer.invoke(addr, send_req("Secret", b"x"))  # default DENY
            assert other.code == ResponseCode.NO_PERMISSION
        async with signed_client(READER) as reader:
            pulled = await reader.invoke(addr, pull_req())
            assert pulled.code == ResponseCode.SUCCESS, pulled.remark
            denied = await reader.invoke(addr, send_req("Secret", b"x"))  # DENY wins
            assert denied.code == ResponseCode.NO_PERMISSION
            assert "topic:Secret" in denied.remark
            for admin_only in (
                create_topic_req("Other"),
                req(RequestCode.UPDATE_BROKER_CONFIG, b"autoCreateTopicEnable=false"),
            ):
                resp = await reader.invoke(addr, admin_only)
                assert resp.code == ResponseCode.NO_PERMISSION
                assert "needs an admin account" in resp.remark
        assert broker.topics is not None
        assert broker.topics.select("Other") is None
        assert broker.config.auto_create_topic_enable
        async with signed_client(ADMIN) as admin:
            resp = await admin.invoke(
                addr, req(RequestCode.UPDATE_BROKER_CONFIG, b"autoCreateTopicEnable=false")
            )
            assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_replayed_frame_refused(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr), signed_client(None) as raw:
        await create_topic(addr)
        captured = RequestSigner(PRODUCER)(send_req(TOPIC, b"once"))
        first = await raw.invoke(addr, captured)
        assert first.code == ResponseCode.SUCCESS, first.remark
        again = await raw.invoke(addr, captured)
        assert again.code == ResponseCode.NO_PERMISSION
        assert "replayed" in again.remark
        assert broker.store is not None
        assert broker.store.get_max_offset_in_queue(TOPIC, 0) == 1


async def test_timestamp_window_against_the_broker_clock(tmp_path: Path) -> None:
    """R9: the broker's clock is injected; requests dated 301 s away are refused, 299 s
    away accepted, both ways."""
    async with acl_broker(tmp_path) as (broker, addr), signed_client(None) as raw:
        await create_topic(addr)
        assert broker.acl is not None
        server_clock = ManualClock()
        broker.acl.validator.now_ms = server_clock
        client_clock = ManualClock()
        signer = RequestSigner(PRODUCER, now_ms=client_clock)
        for skew_s, ok in ((-301, False), (301, False), (299, True), (-299, True)):
            client_clock.now = server_clock.now + skew_s * 1000
            resp = await raw.invoke(addr, signer(send_req(TOPIC, b"t")))
            assert (resp.code == ResponseCode.SUCCESS) is ok, (skew_s, resp.remark)
            if not ok:
                assert resp.code == ResponseCode.NO_PERMISSION
                assert "from the server's clock" in resp.remark


async def test_tampered_body_or_header_refused(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr), signed_client(None) as raw:
        await create_topic(addr)
        await create_topic(addr, "Secret")
        signed = RequestSigner(PRODUCER)(send_req(TOPIC, b"original"))
        body = dataclasses.replace(signed, body=b"tampered")
        header = dataclasses.replace(signed, ext_fields={**signed.ext_fields, "topic": "Secret"})
        for forged in (body, header):
            resp = await raw.invoke(addr, forged)
            assert resp.code == ResponseCode.NO_PERMISSION
            assert "signature check failed" in resp.remark
            assert PRODUCER.secret_key not in resp.remark
        assert broker.store is not None
        assert broker.store.get_max_offset_in_queue(TOPIC, 0) == 0


async def test_reload_on_change(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr), signed_client(PRODUCER) as client:
        await create_topic(addr)
        assert (await client.invoke(addr, pull_req())).code == ResponseCode.NO_PERMISSION
        assert broker.acl is not None
        acl_file = broker.acl.path
        write_accounts(acl_file, ACCOUNTS.replace("[Orders=PUB]", "[Orders=PUB|SUB]"))
        os.utime(acl_file, ns=(1, 1))  # a modification time surely other than before
        assert broker.acl.reload_if_changed()
        assert (await client.invoke(addr, pull_req())).code != ResponseCode.NO_PERMISSION
        acl_file.write_text("accounts: [")  # broken: the accounts in force stay
        assert not broker.acl.reload_if_changed()
        assert (await client.invoke(addr, pull_req())).code != ResponseCode.NO_PERMISSION


async def test_watch_reloads_the_file(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, _):
        assert broker.acl is not None
        acl = broker.acl
        write_accounts(acl.path, ACCOUNTS + "\n")  # another size
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acl.watch, 0.01)
            await wait_until(lambda: acl.reloads == 1, "the watcher's reload")
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("text", [None, "accounts: [{accessKey: abc}]"])
def test_missing_or_malformed_file_refuses_to_start(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "plain_acl.yml"
    if text is not None:
        path.write_text(text)
    config = BrokerConfig.from_properties(
        {"storePathRootDir": str(tmp_path), "brokerIP1": "127.0.0.1", **acl_overrides(path)}
    )
    with pytest.raises(AclConfigError, match=str(path)):
        BrokerController(config)


def test_default_file_is_in_the_store_config_dir(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({"storePathRootDir": str(tmp_path)})
    assert config.acl_file() == tmp_path / "config" / "plain_acl.yml"
    assert not config.acl_enable


async def test_broker_config_answer_hides_the_secret(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (_, addr), signed_client(ADMIN) as client:
        resp = await client.invoke(addr, req(RequestCode.GET_BROKER_CONFIG))
        text = resp.body.decode()
        assert "secretKey=******" in text
        assert ADMIN.secret_key not in text


# ---------------------------------------------------------------------- off by default


async def test_acl_off_serves_the_table_unwrapped(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as (broker, addr), signed_client(None) as client:
        assert broker.acl is None
        assert broker.server is not None
        # a compiled wrapper (make test-compiled) is an object named after its function
        handlers = broker.server.handlers.values()
        names = [getattr(h, "__qualname__", type(h).__name__) for h in handlers]
        assert all("checked" not in name for name in names)
        resp = await client.invoke(addr, send_req(TOPIC, b"unsigned"))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    async with running_broker(tmp_path / "signed") as (_, addr), signed_client(PRODUCER) as c:
        resp = await c.invoke(addr, send_req(TOPIC, b"signed, ignored"))  # extra fields: fine
        assert resp.code == ResponseCode.SUCCESS, resp.remark


# ---------------------------------------------------------------------- name server + clients


async def test_acl_broker_registers_with_acl_namesrv_and_clients_work(tmp_path: Path) -> None:
    acl_file = write_accounts(tmp_path / "plain_acl.yml")
    async with (
        acl_namesrv(tmp_path, acl_file) as (namesrv, ns_addr),
        acl_broker(tmp_path / "b", ns_addr, registerNameServerPeriod="200") as (_, addr),
    ):
        await create_topic(addr)  # registers at once
        assert namesrv.route_info.pick_topic_route(TOPIC) is not None
        config = ClientConfig.create(
            ns_addr, access_key=READER.access_key, secret_key=READER.secret_key
        )
        async with ClientInstance(config) as instance:
            async with Producer("pg", instance=instance) as producer:
                result = await producer.send(Message(TOPIC, b"signed end to end"))
                assert result.msg_id
            async with PullConsumer(
                "cg", instance=instance, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            ) as consumer:
                consumer.assign(await consumer.fetch_queues(TOPIC))
                got = []
                with trio.fail_after(LIMIT):
                    while not got:
                        got = await consumer.poll()
                assert got[0].body == b"signed end to end"
        unsigned = ClientConfig.create(ns_addr)
        async with ClientInstance(unsigned) as instance, Producer("pg", instance=instance) as p:
            with pytest.raises(MQClientError, match="AccessKey missing"):
                await p.send(Message(TOPIC, b"unsigned"))


async def test_namesrv_refuses_unsigned_registration_keeps_routes_open(tmp_path: Path) -> None:
    acl_file = write_accounts(tmp_path / "plain_acl.yml")
    async with acl_namesrv(tmp_path, acl_file) as (namesrv, ns_addr):
        overrides = {"aclEnable": "false", "brokerName": "unsigned"}
        async with running_broker(tmp_path / "b", ns_addr, overrides=overrides) as (_, addr):
            async with signed_client(None) as client:
                resp = await client.invoke(addr, create_topic_req())
                assert resp.code == ResponseCode.SUCCESS
                assert namesrv.route_info.pick_topic_route(TOPIC) is None
                route = await client.invoke(
                    ns_addr, req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
                )
                assert route.code == ResponseCode.TOPIC_NOT_EXIST  # open, and no broker
                kv = req(RequestCode.PUT_KV_CONFIG, namespace="n", key="k", value="v")
                resp = await client.invoke(ns_addr, kv)
                assert resp.code == ResponseCode.NO_PERMISSION
            async with signed_client(READER) as reader:  # signed, but not an admin
                resp = await reader.invoke(
                    ns_addr, req(RequestCode.PUT_KV_CONFIG, namespace="n", key="k", value="v")
                )
                assert resp.code == ResponseCode.NO_PERMISSION
                assert "needs an admin account" in resp.remark
        assert namesrv.acl is not None
        assert namesrv.acl.validator.denied >= 3
