"""ACL and TLS together (in process, real sockets): a name server and a broker both enforcing
TLS with ACL on, the broker registering over TLS with its admin account. A signed client over
TLS produces and consumes; an unsigned one over TLS is refused ``NO_PERMISSION``; a signed one
in plaintext never gets past the TLS layer."""

from __future__ import annotations

import logging
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
from remoting.acl.signing import RequestSigner, SessionCredentials
from remoting.client import RemotingClient
from remoting.codes import ResponseCode
from remoting.tls import client_ssl_context
from tests.broker.inprocess import SMALL_STORE, wait_until
from tests.broker.test_acl import (
    ADMIN,
    READER,
    TOPIC,
    acl_overrides,
    create_topic_req,
    write_accounts,
)
from tests.remoting.tls_certs import Pki, pki

__all__ = ["pki"]

LIMIT = 30.0
COUNT = 10


@asynccontextmanager
async def secure_cluster(tmp_path: Path, pki: Pki) -> AsyncIterator[tuple[str, str]]:
    """Name server and broker: TLS enforcing, ACL on (one accounts file, chmod 600); the
    broker registers over TLS signed by the admin account. Yields their addresses."""
    acl_file = write_accounts(tmp_path / "plain_acl.yml")
    namesrv = NameServer(
        NamesrvConfig.from_properties(
            {
                "listenPort": "0",
                "bindAddress": "127.0.0.1",
                "kvConfigPath": str(tmp_path / "ns" / "kv.json"),
                "configStorePath": str(tmp_path / "ns" / "namesrv.properties"),
                **pki.server_properties(),
                **acl_overrides(acl_file, creds=None),
            }
        )
    )
    async with trio.open_nursery() as nursery:
        namesrv_addr = f"127.0.0.1:{await nursery.start(namesrv.run)}"
        broker = BrokerController(
            BrokerConfig.from_properties(
                {
                    "listenPort": "0",
                    "brokerIP1": "127.0.0.1",
                    "storePathRootDir": str(tmp_path / "store"),
                    "namesrvAddr": namesrv_addr,
                    "registerNameServerPeriod": "200",
                    "diskMaxUsedSpaceRatio": "95",
                    **SMALL_STORE,
                    **pki.server_properties(),
                    **pki.client_properties(),
                    **acl_overrides(acl_file, creds=ADMIN),
                }
            ),
            host="127.0.0.1",
        )
        broker_addr = f"127.0.0.1:{await nursery.start(broker.run)}"
        await wait_until(lambda: bool(namesrv.route_info.broker_addr_table), "registration")
        yield namesrv_addr, broker_addr
        nursery.cancel_scope.cancel()


async def create_topic(broker: str, pki: Pki) -> None:
    hook = RequestSigner(ADMIN)
    async with RemotingClient(ssl_context=client_ssl_context(pki.client()), rpc_hook=hook) as c:
        resp = await c.invoke(broker, create_topic_req())
        assert resp.code == ResponseCode.SUCCESS, resp.remark


def client_config(
    namesrv: str, pki: Pki, *, creds: SessionCredentials | None, tls: bool = True
) -> ClientConfig:
    keys = {"access_key": creds.access_key, "secret_key": creds.secret_key} if creds else {}
    tls_keys = {"use_tls": True, "tls_trust_cert_path": str(pki.ca)} if tls else {}
    return ClientConfig(
        (namesrv,), request_timeout_s=LIMIT, connect_timeout_s=LIMIT, **keys, **tls_keys
    )


async def produce_and_consume(config: ClientConfig) -> list[bytes]:
    async with ClientInstance(config) as instance:
        async with Producer("pg", instance=instance) as producer:
            sent = [await producer.send(Message(TOPIC, b"m-%d" % i)) for i in range(COUNT)]
        assert {r.status for r in sent} == {SendStatus.SEND_OK}
        consumer = PullConsumer(
            "cg", instance=instance, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        async with consumer:
            consumer.assign(await consumer.fetch_queues(TOPIC))
            got: list[ReceivedMessage] = []
            while len(got) < COUNT:
                got += await consumer.poll()
    return sorted(m.body for m in got)


async def send_one(config: ClientConfig) -> None:
    async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
        await p.send(Message(TOPIC, b"x"))


async def test_signed_over_tls_works_unsigned_or_plaintext_refused(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(LIMIT), caplog.at_level(logging.WARNING):
        async with secure_cluster(tmp_path, pki) as (namesrv, broker):
            await create_topic(broker, pki)
            signed = client_config(namesrv, pki, creds=READER)
            assert await produce_and_consume(signed) == sorted(b"m-%d" % i for i in range(COUNT))

            unsigned = client_config(namesrv, pki, creds=None)
            with pytest.raises(MQClientError) as refused:
                await send_one(unsigned)
            assert refused.value.code == ResponseCode.NO_PERMISSION
            assert "AccessKey missing" in str(refused.value)

            plaintext = client_config(namesrv, pki, creds=READER, tls=False)
            with pytest.raises(MQClientError, match="no name server answered"):
                await send_one(plaintext)
    hints = [r for r in caplog.records if "the peer speaks TLS" in r.getMessage()]
    assert hints, [r.getMessage() for r in caplog.records]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert READER.secret_key not in logged
    assert ADMIN.secret_key not in logged
