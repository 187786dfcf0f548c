"""Certificate reload (RocketMQ's ``FileWatchService`` on ``tls.server.*``): the reload step
called directly, the watch loop in virtual time, and real servers (RemotingServer, NameServer,
BrokerController) over loopback sockets whose certificate is swapped for one from a new CA.

A swap renames new files over the old paths (``os.replace``), as an operator should.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.controller import BrokerController
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.server import RemotingServer
from remoting.tls import (
    ServerTlsReloader,
    TlsHandshakeError,
    client_ssl_context,
    server_ssl_context,
)
from remoting.tls_config import ClientAuth, ClientTlsConfig
from tests.broker.inprocess import SMALL_STORE, wait_until
from tests.remoting.tls_certs import Pki, make_pki, pki

__all__ = ["pki"]

LIMIT = 20
ECHO = RequestCode.SEND_MESSAGE


def swap_certificate(old: Pki, new: Pki) -> None:
    """Put ``new``'s server certificate and key at ``old``'s paths (renamed over them)."""
    os.replace(new.server_cert, old.server_cert)
    os.replace(new.server_key, old.server_key)


def echo(req: RemotingCommand, _: Channel) -> RemotingCommand:
    return RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=req.body)


def request(body: bytes = b"hi", code: int = ECHO) -> RemotingCommand:
    return RemotingCommand.request(code, {}, body, opaque=0)


def trusting(ca: Path) -> RemotingClient:
    """A client that trusts only ``ca``."""
    context = client_ssl_context(ClientTlsConfig(enable=True, trust_cert_path=str(ca)))
    return RemotingClient(default_timeout_s=LIMIT, connect_timeout_s=LIMIT, ssl_context=context)


# ---------------------------------------------------------------------- the reload step


def test_nothing_changed_nothing_reloaded(pki: Pki) -> None:
    installed: list[ssl.SSLContext] = []
    reloader = ServerTlsReloader(pki.server(), installed.append)
    assert not reloader.reload_if_changed()
    assert installed == []


def test_a_swapped_certificate_is_installed(pki: Pki, tmp_path: Path) -> None:
    installed: list[ssl.SSLContext] = []
    reloader = ServerTlsReloader(pki.server(), installed.append)
    swap_certificate(pki, make_pki(tmp_path / "new"))
    assert reloader.reload_if_changed()
    assert len(installed) == 1
    assert reloader.reloads == 1
    assert not reloader.reload_if_changed()  # each change once


def test_the_ca_bundle_is_watched_only_when_client_certificates_are_checked(pki: Pki) -> None:
    assert str(pki.ca) not in ServerTlsReloader(pki.server(), print).files.paths
    checked = ServerTlsReloader(pki.server(ClientAuth.REQUIRE), print)
    assert str(pki.ca) in checked.files.paths


def test_a_broken_new_file_logs_an_error_and_keeps_the_old_context(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    installed: list[ssl.SSLContext] = []
    reloader = ServerTlsReloader(pki.server(), installed.append)
    good = pki.server_cert.read_bytes()
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    os.replace(broken, pki.server_cert)
    with caplog.at_level(logging.ERROR, logger="remoting.tls"):
        assert not reloader.reload_if_changed()
    assert installed == []
    assert reloader.failures == 1
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "TLS files not reloaded, the certificate in force stays" in record.getMessage()
    assert str(pki.server_cert) in record.getMessage()
    # mended: the next look reloads
    fixed = tmp_path / "fixed.pem"
    fixed.write_bytes(good)
    os.replace(fixed, pki.server_cert)
    assert reloader.reload_if_changed()
    assert len(installed) == 1


async def test_the_watch_loop_reloads_within_an_interval(
    pki: Pki, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    installed: list[ssl.SSLContext] = []
    reloader = ServerTlsReloader(pki.server(), installed.append)
    new = make_pki(tmp_path / "new")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reloader.watch, 5.0)
        await trio.sleep(12)
        assert installed == []
        swap_certificate(pki, new)
        start = trio.current_time()
        await wait_until(lambda: bool(installed), "the reload", limit=60)
        assert trio.current_time() - start <= 5.0 + 0.01
        nursery.cancel_scope.cancel()
    assert len(installed) == 1


# ---------------------------------------------------------------------- real servers


@asynccontextmanager
async def serving(server: RemotingServer) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        yield f"127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def test_new_connections_get_the_new_certificate_and_open_ones_keep_theirs(
    pki: Pki, tmp_path: Path
) -> None:
    new = make_pki(tmp_path / "new")
    server = RemotingServer({ECHO: echo}, ssl_context=server_ssl_context(pki.server()))
    reloader = ServerTlsReloader(pki.server(), server.use_ssl_context)
    with trio.fail_after(LIMIT):
        async with serving(server) as addr, trusting(pki.ca) as old_client:
            assert (await old_client.invoke(addr, request(b"before"))).body == b"before"
            async with trusting(new.ca) as early:
                with pytest.raises(TlsHandshakeError, match="certificate verify failed"):
                    await early.invoke(addr, request())
            swap_certificate(pki, new)
            assert reloader.reload_if_changed()
            async with trusting(new.ca) as new_client:
                assert (await new_client.invoke(addr, request(b"after"))).body == b"after"
            # the connection opened before the swap still works, on its old certificate
            assert old_client.connected(addr)
            assert (await old_client.invoke(addr, request(b"still"))).body == b"still"
            async with trusting(pki.ca) as late_old:
                with pytest.raises(TlsHandshakeError, match="certificate verify failed"):
                    await late_old.invoke(addr, request())


async def test_the_name_server_reloads_its_certificate(pki: Pki, tmp_path: Path) -> None:
    new = make_pki(tmp_path / "new")
    config = NamesrvConfig.from_properties(
        {
            "listenPort": "0",
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(tmp_path / "kv.json"),
            **pki.server_properties(),
        }
    )
    namesrv = NameServer(config)
    namesrv.tls_watch_interval_s = 0.05
    query = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}, opaque=0)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            addr = f"127.0.0.1:{await nursery.start(namesrv.run)}"
            swap_certificate(pki, new)
            await wait_until(
                lambda: namesrv.tls_reloader is not None and namesrv.tls_reloader.reloads > 0,
                "the name server's reload",
            )
            async with trusting(new.ca) as client:
                assert (await client.invoke(addr, query)).code == ResponseCode.SUCCESS
            nursery.cancel_scope.cancel()


async def test_the_broker_reloads_its_certificate(pki: Pki, tmp_path: Path) -> None:
    new = make_pki(tmp_path / "new")
    config = BrokerConfig.from_properties(
        {
            "listenPort": "0",
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(tmp_path / "store"),
            **SMALL_STORE,
            **pki.server_properties(),
        }
    )
    broker = BrokerController(config, host="127.0.0.1")
    broker.tls_watch_interval_s = 0.05
    query = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}, opaque=0)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            addr = f"127.0.0.1:{await nursery.start(broker.run)}"
            first = broker.server_ssl_context
            swap_certificate(pki, new)
            await wait_until(
                lambda: broker.tls_reloader is not None and broker.tls_reloader.reloads > 0,
                "the broker's reload",
            )
            assert broker.server_ssl_context is not first
            assert broker.server is not None
            assert broker.server.ssl_context is broker.server_ssl_context
            async with trusting(new.ca) as client:
                assert (await client.invoke(addr, query)).code == ResponseCode.SUCCESS
            nursery.cancel_scope.cancel()
