"""RemotingServer + RemotingClient over TLS on real loopback sockets (127.0.0.1, port 0).

Certificates come from ``trustme`` (:mod:`tests.remoting.tls_certs`). Every test is bounded by
``trio.fail_after(LIMIT)``; the handshake deadline is checked in virtual time (autojump clock).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError, RemotingSendRequestError
from remoting.frame import FrameDecoder, encode_frame
from remoting.server import RemotingServer
from remoting.tls import TlsHandshakeError, client_ssl_context, server_ssl_context
from remoting.tls_config import ClientAuth, ClientTlsConfig
from tests.broker.inprocess import wait_until
from tests.remoting.tls_certs import Pki, make_pki, pki

__all__ = ["pki"]

LIMIT = 20
ECHO = RequestCode.SEND_MESSAGE
SLOW_ECHO = RequestCode.PULL_MESSAGE
BIG = 3 * 1024 * 1024 + 17
"""Larger than a TLS record (16 KiB) and than one receive (64 KiB): frames arrive in parts."""


async def echo(req: RemotingCommand, ctx: Channel) -> RemotingCommand:
    peer = ctx.remote_addr
    return RemotingCommand.response_to(
        req, ResponseCode.SUCCESS, body=req.body, ext_fields={"peer": peer}
    )


async def slow_echo(req: RemotingCommand, ctx: Channel) -> RemotingCommand:
    await trio.sleep(3600)
    return await echo(req, ctx)


HANDLERS = {ECHO: echo, SLOW_ECHO: slow_echo}


async def receive_until_closed(stream: trio.abc.ReceiveStream) -> bytes:
    """What ``stream`` receives until the peer closes it (b"" after a close without
    close_notify, which trio reports as broken)."""
    data = b""
    try:
        while chunk := await stream.receive_some():
            data += chunk
    except trio.BrokenResourceError:
        pass
    return data


def request(body: bytes = b"hi", code: int = ECHO) -> RemotingCommand:
    return RemotingCommand.request(code, {}, body, opaque=0)


@asynccontextmanager
async def tls_server(
    context: ssl.SSLContext | None, **kwargs: float
) -> AsyncIterator[tuple[RemotingServer, str]]:
    server = RemotingServer(HANDLERS, ssl_context=context, **kwargs)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        yield server, f"127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


def client_for(config: ClientTlsConfig | None) -> RemotingClient:
    context = client_ssl_context(config) if config is not None else None
    return RemotingClient(default_timeout_s=LIMIT, connect_timeout_s=LIMIT, ssl_context=context)


async def test_requests_round_trip_over_tls_with_big_and_concurrent_frames(pki: Pki) -> None:
    """Frames far larger than a TLS record, sent by many tasks at once over one connection
    (the send gate keeps them whole) all come back intact; the server names the real peer."""
    with trio.fail_after(LIMIT):
        async with (
            tls_server(server_ssl_context(pki.server())) as (server, addr),
            client_for(pki.client()) as client,
        ):
            bodies = [bytes([i]) * (BIG if i % 3 == 0 else 1000 + i) for i in range(12)]
            answers: dict[int, RemotingCommand] = {}

            async def call(i: int) -> None:
                answers[i] = await client.invoke(addr, request(bodies[i]))

            async with trio.open_nursery() as nursery:
                for i in range(len(bodies)):
                    nursery.start_soon(call, i)
            assert {i: a.body for i, a in answers.items()} == dict(enumerate(bodies))
            (channel,) = server.channels
            assert isinstance(channel.connection.stream, trio.SSLStream)
            assert answers[0].ext_fields["peer"].startswith("127.0.0.1:")
            assert server.tls_handshake_failures == 0


async def test_a_cancelled_call_leaves_the_tls_connection_usable(pki: Pki) -> None:
    """Cancelling a caller waiting for its answer (and one whose big frame is being written)
    does not break the connection the other calls share."""
    with trio.fail_after(LIMIT):
        async with (
            tls_server(server_ssl_context(pki.server())) as (server, addr),
            client_for(pki.client()) as client,
        ):
            with trio.move_on_after(0.2):
                await client.invoke(addr, request(code=SLOW_ECHO))
            with trio.CancelScope() as scope:
                scope.cancel()  # cancelled before it starts: nothing may be half written
                await client.invoke(addr, request(bytes(BIG)))
            answer = await client.invoke(addr, request(b"after"))
            assert answer.body == b"after"
            assert client.connected(addr)
            assert len(server.channels) == 1


async def test_closing_a_tls_client_ends_the_server_side_channel(pki: Pki) -> None:
    with trio.fail_after(LIMIT):
        async with tls_server(server_ssl_context(pki.server())) as (server, addr):
            async with client_for(pki.client()) as client:
                await client.invoke(addr, request())
                assert len(server.channels) == 1
            await wait_until(lambda: not server.channels, "the server-side channel to end")
            assert server.connections_by_ip() == {}


async def test_a_plaintext_client_fails_fast_and_the_server_keeps_serving(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """A plaintext client's request to an enforcing server fails at once (no timeout); the
    server warns, counts it, and still serves TLS clients."""
    with trio.fail_after(LIMIT), caplog.at_level(logging.WARNING):
        async with (
            tls_server(server_ssl_context(pki.server())) as (server, addr),
            client_for(None) as plain,
            client_for(pki.client()) as secure,
        ):
            with pytest.raises(RemotingSendRequestError):
                await plain.invoke(addr, request())
            assert server.tls_handshake_failures == 1
            assert (await secure.invoke(addr, request(b"ok"))).body == b"ok"
    (warning,) = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
    assert "127.0.0.1:" in warning
    assert "wrong version number" in warning or "http request" in warning
    # the server's protocol_version alert tells the plaintext client what it met
    assert any("the peer speaks TLS" in r.getMessage() for r in caplog.records)


async def test_a_tls_client_to_a_plaintext_server_gets_a_clear_error(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """The handshake fails with OpenSSL's reason; the plaintext server's warning says the peer
    speaks TLS."""
    with trio.fail_after(LIMIT), caplog.at_level(logging.WARNING):
        async with tls_server(None) as (_, addr), client_for(pki.client()) as client:
            with pytest.raises(TlsHandshakeError, match=f"TLS handshake with {addr} failed"):
                await client.invoke(addr, request())
    assert any("the peer speaks TLS" in r.getMessage() for r in caplog.records)


async def test_a_client_trusting_another_ca_is_refused_with_the_reason(pki: Pki) -> None:
    with trio.fail_after(LIMIT):
        async with (
            tls_server(server_ssl_context(pki.server())) as (_, addr),
            client_for(pki.client(trust=pki.other_ca)) as client,
        ):
            with pytest.raises(TlsHandshakeError, match="certificate verify failed") as info:
                await client.invoke(addr, request())
            assert "unable to get local issuer certificate" in info.value.reason
            assert not client.connected(addr)


async def test_the_server_certificate_must_name_the_host_dialled(tmp_path: object) -> None:
    """A certificate for ``localhost`` only does not do for 127.0.0.1; with
    ``tls.client.authServer=false`` (encryption only) it does."""
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    only_localhost = make_pki(tmp_path / "pki", server_names=("localhost",))
    with trio.fail_after(LIMIT):
        async with tls_server(server_ssl_context(only_localhost.server())) as (_, addr):
            async with client_for(only_localhost.client()) as client:
                with pytest.raises(TlsHandshakeError, match="IP address mismatch"):
                    await client.invoke(addr, request())
            unverified = ClientTlsConfig(enable=True, auth_server=False)
            async with client_for(unverified) as client:
                assert (await client.invoke(addr, request(b"x"))).body == b"x"


@pytest.mark.parametrize("mode", [ClientAuth.REQUIRE, ClientAuth.OPTIONAL])
async def test_client_certificates_when_the_server_asks_for_them(
    pki: Pki, mode: ClientAuth
) -> None:
    """``require``: no client certificate -> refused; ``optional``: served. Either way a
    certificate the trusted CA signed is served, one it did not sign is refused."""
    with trio.fail_after(LIMIT):
        async with tls_server(server_ssl_context(pki.server(mode))) as (server, addr):
            async with client_for(pki.client(with_cert=True)) as client:
                assert (await client.invoke(addr, request(b"mtls"))).body == b"mtls"
            async with client_for(pki.client()) as client:
                if mode is ClientAuth.REQUIRE:
                    with pytest.raises(RemotingError):
                        await client.invoke(addr, request())
                    assert server.tls_handshake_failures == 1
                else:
                    assert (await client.invoke(addr, request(b"anon"))).body == b"anon"
        untrusting = server_ssl_context(pki.server(mode, trust=pki.other_ca))
        async with (
            tls_server(untrusting) as (server, addr),
            client_for(pki.client(with_cert=True)) as client,
        ):
            with pytest.raises(RemotingError):
                await client.invoke(addr, request())
            assert server.tls_handshake_failures == 1


async def test_a_peer_stalling_in_the_handshake_is_cut_off_at_the_deadline(
    pki: Pki, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A peer that opens a TLS record and sends nothing more is closed after the frame-read
    timeout (virtual time), long before the idle timeout, and its slot is given back."""
    deadline = 30.0
    with trio.fail_after(1000), caplog.at_level(logging.WARNING, logger="remoting.server"):
        async with tls_server(
            server_ssl_context(pki.server()), frame_read_timeout_s=deadline, idle_timeout_s=120
        ) as (server, addr):
            stream = await trio.open_tcp_stream("127.0.0.1", int(addr.rsplit(":", 1)[1]))
            await stream.send_all(b"\x16\x03\x01\x02\x00")  # a ClientHello's header only
            start = trio.current_time()
            await wait_until(
                lambda: bool(server.connections_by_ip()), "the connection to be accepted"
            )
            assert await stream.receive_some() == b""  # closed by the server
            assert deadline <= trio.current_time() - start < deadline + 2
            await stream.aclose()
            assert server.tls_handshake_failures == 1
            await wait_until(lambda: not server.connections_by_ip(), "its slot to be freed")
    assert any("no handshake within 30 s" in r.getMessage() for r in caplog.records)


async def test_a_frame_dribbled_over_tls_is_cut_off_at_the_frame_read_deadline(
    pki: Pki, autojump_clock: trio.testing.MockClock
) -> None:
    """The frame-read deadline works over TLS too (the generic, non-socket receive path)."""
    deadline = 30.0
    context = client_ssl_context(pki.client())
    assert context is not None
    with trio.fail_after(1000):
        async with tls_server(
            server_ssl_context(pki.server()), frame_read_timeout_s=deadline, idle_timeout_s=120
        ) as (server, addr):
            tcp = await trio.open_tcp_stream("127.0.0.1", int(addr.rsplit(":", 1)[1]))
            tls = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
            frame = encode_frame(request(b"x" * 100))
            await tls.send_all(frame)  # one whole frame: answered
            decoder = FrameDecoder()
            while decoder.next_command() is None:
                decoder.receive_data(await tls.receive_some())
            await tls.send_all(frame[:10])  # part of the next one, then nothing
            start = trio.current_time()
            assert await receive_until_closed(tls) == b""
            assert deadline <= trio.current_time() - start < deadline + 2
            await tcp.aclose()
            await wait_until(lambda: not server.channels, "the channel to end")


async def test_handshakes_in_progress_count_against_max_connections(
    pki: Pki, autojump_clock: trio.testing.MockClock
) -> None:
    """With one slot, a peer stalled in its handshake holds it: a second connection is refused
    at once (the cap cannot be overrun by handshakes that never finish)."""
    with trio.fail_after(1000):
        async with tls_server(
            server_ssl_context(pki.server()), max_connections=1, frame_read_timeout_s=30
        ) as (server, addr):
            port = int(addr.rsplit(":", 1)[1])
            staller = await trio.open_tcp_stream("127.0.0.1", port)
            await wait_until(lambda: bool(server.connections_by_ip()), "the staller to be accepted")
            second = await trio.open_tcp_stream("127.0.0.1", port)
            assert await second.receive_some() == b""
            assert server.refused == 1
            await staller.aclose()
            await second.aclose()


async def test_plain_tcp_keeps_its_fast_path() -> None:
    """Without TLS both ends still run over the raw-descriptor fast path (no wrapper, no
    per-request TLS work); with TLS they take the generic stream path."""
    with trio.fail_after(LIMIT):
        async with tls_server(None) as (server, addr), client_for(None) as client:
            await client.invoke(addr, request())
            (channel,) = server.channels
            assert type(channel.connection.stream) is trio.SocketStream
            assert channel.connection._raw is not None
