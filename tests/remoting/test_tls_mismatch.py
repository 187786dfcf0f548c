"""TLS mode mismatches say what is wrong: a plaintext client calling a TLS server is told the
server requires TLS (:class:`TlsRequiredError`), a TLS client calling a plaintext server that
the server does not speak TLS (:class:`ServerNotTlsError`); mqadmin prints that one line.

Real servers on loopback sockets (RemotingServer, NameServer), real clients and mqadmin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from client.aio import ClientInstance
from client.config import ClientConfig
from client.errors import MQClientError
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import PeerSpeaksTlsError, RemoteProtocolError, RemotingSendRequestError
from remoting.frame import FrameDecoder
from remoting.server import RemotingServer
from remoting.tls import (
    ServerNotTlsError,
    TlsHandshakeError,
    TlsRequiredError,
    client_ssl_context,
    server_ssl_context,
)
from remoting.tls_config import server_not_tls_hint
from tests.admin.harness import mqadmin
from tests.remoting.tls_certs import Pki, pki

__all__ = ["pki"]

LIMIT = 20
ECHO = RequestCode.SEND_MESSAGE
REQUIRES_TLS = "the server speaks TLS and this client does not: it likely requires TLS"
LIKELY_NOT_TLS = "the server closed the connection without a TLS answer: it likely does not"
NOT_TLS = "the server answered with bytes that are not TLS: it does not speak TLS"


def echo(req: RemotingCommand, _: Channel) -> RemotingCommand:
    return RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=req.body)


def request(body: bytes = b"hi") -> RemotingCommand:
    return RemotingCommand.request(ECHO, {}, body, opaque=0)


@asynccontextmanager
async def serving(server: RemotingServer) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        yield f"127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


def plain_client() -> RemotingClient:
    return RemotingClient(default_timeout_s=LIMIT, connect_timeout_s=LIMIT)


def tls_client(pki: Pki) -> RemotingClient:
    context = client_ssl_context(pki.client())
    return RemotingClient(default_timeout_s=LIMIT, connect_timeout_s=LIMIT, ssl_context=context)


# ---------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("reason", "hint"),
    [
        ("wrong version number", NOT_TLS),
        ("packet length too long", NOT_TLS),
        ("record layer failure", NOT_TLS),
        ("unexpected eof while reading", LIKELY_NOT_TLS),
        ("eof occurred in violation of protocol", LIKELY_NOT_TLS),
        ("connection closed during the handshake", LIKELY_NOT_TLS),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", LIKELY_NOT_TLS),
        ("certificate verify failed: unable to get local issuer certificate", None),
        ("tlsv1 alert protocol version", None),
        ("no handshake within 30 s", None),
    ],
)
def test_handshake_reasons_that_mean_the_server_does_not_speak_tls(
    reason: str, hint: str | None
) -> None:
    said = server_not_tls_hint(reason)
    if hint is None:
        assert said is None
    else:
        assert said is not None
        assert said.startswith(hint)
        assert "tls.enable=false" in said


@pytest.mark.parametrize(
    ("prefix", "kind"),
    [
        (b"\x15\x03\x03\x00\x02\x02\x46", PeerSpeaksTlsError),  # a TLS alert
        (b"\x16\x03\x01\x02\x00\x01\x00\x01", PeerSpeaksTlsError),  # a ClientHello
        (b"\x7f\xff\xff\xff", RemoteProtocolError),  # too long, not TLS
        (b"GET / HTTP/1.1\r\n", RemoteProtocolError),
    ],
)
def test_an_oversized_prefix_is_peer_speaks_tls_only_when_it_is_a_tls_record(
    prefix: bytes, kind: type[RemoteProtocolError]
) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(prefix)
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_command()
    assert type(info.value) is kind


# ---------------------------------------------------------------------- real servers


async def test_a_plaintext_client_is_told_the_server_requires_tls(pki: Pki) -> None:
    server = RemotingServer({ECHO: echo}, ssl_context=server_ssl_context(pki.server()))
    with trio.fail_after(LIMIT):
        async with serving(server) as addr, plain_client() as client:
            for _ in range(2):  # every new connection says it again
                with pytest.raises(TlsRequiredError) as info:
                    await client.invoke(addr, request())
                assert isinstance(info.value, RemotingSendRequestError)  # callers' except
                message = str(info.value)
                assert message.startswith(f"send request to <{addr}> failed: {REQUIRES_TLS}")
                assert "tls.enable=true" in message
                assert "MINIMQ_TLS_ENABLE=true" in message
            assert server.tls_handshake_failures == 2


async def test_a_plaintext_server_closing_an_other_connection_is_no_tls_mismatch() -> None:
    """A plaintext connection that ends for any other reason is still a bare send failure."""

    async def close_at_once(req: RemotingCommand, ctx: Channel) -> None:
        await ctx.connection.aclose()

    server = RemotingServer({ECHO: close_at_once})
    with trio.fail_after(LIMIT):
        async with serving(server) as addr, plain_client() as client:
            with pytest.raises(RemotingSendRequestError) as info:
                await client.invoke(addr, request())
            assert not isinstance(info.value, TlsRequiredError)


async def test_a_tls_client_is_told_a_minimq_plaintext_server_likely_does_not_speak_tls(
    pki: Pki,
) -> None:
    server = RemotingServer({ECHO: echo})
    with trio.fail_after(LIMIT):
        async with serving(server) as addr, tls_client(pki) as client:
            with pytest.raises(ServerNotTlsError) as info:
                await client.invoke(addr, request())
            message = str(info.value)
            assert message.startswith(f"TLS handshake with {addr} failed: ")
            assert LIKELY_NOT_TLS in message
            assert not client.connected(addr)


async def test_a_tls_client_is_told_a_server_answering_plaintext_does_not_speak_tls(
    pki: Pki,
) -> None:
    """A server that answers the ClientHello with plaintext (here: an HTTP error)."""

    async def answer_http(stream: trio.SocketStream) -> None:
        await stream.receive_some(4096)
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await stream.aclose()

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            serve = partial(trio.serve_tcp, answer_http, 0, host="127.0.0.1")
            (listener,) = await nursery.start(serve)
            addr = f"127.0.0.1:{listener.socket.getsockname()[1]}"
            async with tls_client(pki) as client:
                with pytest.raises(ServerNotTlsError, match=NOT_TLS) as info:
                    await client.invoke(addr, request())
                assert info.value.reason == "wrong version number"
            nursery.cancel_scope.cancel()


async def test_other_handshake_failures_do_not_blame_the_server_mode(pki: Pki) -> None:
    server = RemotingServer({ECHO: echo}, ssl_context=server_ssl_context(pki.server()))
    context = client_ssl_context(pki.client(trust=pki.other_ca))
    with trio.fail_after(LIMIT):
        async with serving(server) as addr, RemotingClient(ssl_context=context) as client:
            with pytest.raises(TlsHandshakeError, match="certificate verify failed") as info:
                await client.invoke(addr, request())
            assert not isinstance(info.value, ServerNotTlsError)
            assert "speak TLS" not in str(info.value)


# ---------------------------------------------------------------------- clients, mqadmin


@asynccontextmanager
async def name_server(tmp_path: Path, tls: dict[str, str]) -> AsyncIterator[str]:
    config = NamesrvConfig.from_properties(
        {
            "listenPort": "0",
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(tmp_path / "kv.json"),
            **tls,
        }
    )
    namesrv = NameServer(config)
    async with trio.open_nursery() as nursery:
        yield f"127.0.0.1:{await nursery.start(namesrv.run)}"
        nursery.cancel_scope.cancel()


async def test_a_plaintext_client_instance_names_the_mismatch(tmp_path: Path, pki: Pki) -> None:
    with trio.fail_after(LIMIT):
        async with name_server(tmp_path, pki.server_properties()) as addr:
            config = ClientConfig((addr,), request_timeout_s=LIMIT, connect_timeout_s=LIMIT)
            async with ClientInstance(config) as instance:
                with pytest.raises(MQClientError, match=REQUIRES_TLS):
                    await instance.topic_route("AnyTopic")


async def test_mqadmin_without_tls_against_a_tls_name_server_says_it_requires_tls(
    tmp_path: Path, pki: Pki
) -> None:
    with trio.fail_after(LIMIT):
        async with name_server(tmp_path, pki.server_properties()) as addr:
            env: dict[str, str | None] = {"MINIMQ_TLS_CONFIG_FILE": None, "MINIMQ_TLS_ENABLE": None}
            result = await mqadmin("clusterList", "-n", addr, env=env)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("mqadmin clusterList: ")
    assert REQUIRES_TLS in result.stderr


async def test_mqadmin_with_tls_against_a_plaintext_name_server_says_it_does_not_speak_tls(
    tmp_path: Path, pki: Pki
) -> None:
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text("".join(f"{k}={v}\n" for k, v in pki.client_properties().items()))
    with trio.fail_after(LIMIT):
        async with name_server(tmp_path, {}) as addr:
            env: dict[str, str | None] = {"MINIMQ_TLS_CONFIG_FILE": str(tls_file)}
            result = await mqadmin("clusterList", "-n", addr, env=env)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("mqadmin clusterList: ")
    assert LIKELY_NOT_TLS in result.stderr
