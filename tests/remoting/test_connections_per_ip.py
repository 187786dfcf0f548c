"""The per-IP connection cap of :class:`~remoting.server.RemotingServer` (the reliability plan's
§4.3 "too many connections" row): one peer address holds at most ``max_connections_per_ip``
connections, further ones from it are closed at once, other addresses are served, and an
address's count drops however its connection ends.

Real sockets on 127.0.0.1 and 127.0.0.2 (both loopback on Linux: a client socket bound to
127.0.0.2 reaches a server on 127.0.0.1 from that address).
"""

from __future__ import annotations

import logging
import socket
import struct

import pytest
import trio

from remoting.channel import Channel
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.frame import FrameDecoder, encode_frame
from remoting.server import RemotingServer
from tests.broker.inprocess import wait_until

LIMIT = 30.0
CAP = 3
OTHER_IP = "127.0.0.2"


def answer(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
    """Echo handler: SUCCESS with the request's body."""
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=request.body)


def capped_server(cap: int = CAP, idle_timeout_s: float = 120.0) -> RemotingServer:
    """A server of the echo handler on 127.0.0.1 with the per-IP cap under test."""
    return RemotingServer(
        {RequestCode.HEART_BEAT: answer},
        host="127.0.0.1",
        max_connections_per_ip=cap,
        idle_timeout_s=idle_timeout_s,
        warning_interval_s=3600.0,
    )


async def connect(port: int, source_ip: str = "127.0.0.1") -> trio.SocketStream:
    """A TCP connection to 127.0.0.1:``port`` from ``source_ip``."""
    sock = trio.socket.socket()
    await sock.bind((source_ip, 0))
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def exchange(stream: trio.SocketStream, request: RemotingCommand) -> RemotingCommand:
    """Send ``request`` on ``stream`` and read its response."""
    await stream.send_all(encode_frame(request))
    decoder = FrameDecoder()
    with trio.fail_after(LIMIT):
        while (cmd := decoder.next_command()) is None:
            data = await stream.receive_some()
            assert data, "the server closed the connection"
            decoder.receive_data(data)
    return cmd


async def echo(stream: trio.SocketStream, body: bytes = b"ping") -> bytes:
    """One request/response on ``stream``: the body the server echoed."""
    request = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body, opaque=1)
    cmd = await exchange(stream, request)
    assert cmd.code == ResponseCode.SUCCESS
    return cmd.body


async def closed_by_server(stream: trio.SocketStream, limit: float = LIMIT) -> bool:
    """True when the server ends ``stream`` (end of stream or a reset) within ``limit``."""
    with trio.fail_after(limit):
        try:
            return await stream.receive_some() == b""
        except trio.BrokenResourceError:
            return True


async def fill_to_cap(server: RemotingServer, port: int) -> list[trio.SocketStream]:
    """``CAP`` served connections from 127.0.0.1 (each answered once)."""
    held = [await connect(port) for _ in range(CAP)]
    for stream in held:
        assert await echo(stream) == b"ping"
    assert server.connections_by_ip() == {"127.0.0.1": CAP}
    return held


async def test_connections_past_the_per_ip_cap_are_closed_and_other_ips_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = capped_server()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(server.run)
            held = await fill_to_cap(server, port)
            over = [await connect(port) for _ in range(2)]
            for stream in over:
                assert await closed_by_server(stream)
            assert server.refused_per_ip == 2
            assert server.refused == 0  # the global cap had room
            other = await connect(port, OTHER_IP)  # another address is served
            assert await echo(other, b"other") == b"other"
            for stream in held:  # and so are those within the cap
                assert await echo(stream) == b"ping"
            assert server.connections_by_ip() == {"127.0.0.1": CAP, OTHER_IP: 1}
            for stream in [*held, *over, other]:
                await stream.aclose()
            await wait_until(lambda: not server.connections_by_ip(), "every count released")
            nursery.cancel_scope.cancel()
    messages = [r.getMessage() for r in caplog.records]
    warnings = [m for m in messages if "serverMaxConnectionsPerIp" in m]
    assert len(warnings) == 1, warnings  # rate-limited: the second refusal is not logged
    assert warnings[0].startswith("127.0.0.1 already holds 3 connections"), warnings


def reset(stream: trio.SocketStream) -> None:
    """Close ``stream`` with an RST (SO_LINGER 0) instead of a FIN."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def test_a_close_a_reset_and_a_protocol_error_release_their_counts() -> None:
    """Each way a peer ends its connection gives the slot back: afterwards the address again
    gets ``CAP`` served connections."""
    server = capped_server()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(server.run)
            held = await fill_to_cap(server, port)
            await held[0].aclose()  # normal close
            reset(held[1])  # peer reset
            await held[2].send_all(struct.pack(">i", -1))  # a frame length no frame has
            assert await closed_by_server(held[2])  # protocol error
            await wait_until(lambda: not server.connections_by_ip(), "three ends released")
            again = await fill_to_cap(server, port)
            assert server.refused_per_ip == 0
            for stream in [held[0], held[2], *again]:
                await stream.aclose()
            nursery.cancel_scope.cancel()
    assert not server.connections_by_ip()


async def test_the_idle_timeout_releases_its_counts(autojump_clock: trio.abc.Clock) -> None:
    """Connections closed by the idle timeout (virtual time) give their slots back."""
    server = capped_server(idle_timeout_s=120.0)
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(server.run)
            idle = await fill_to_cap(server, port)
            for stream in idle:  # nothing more sent: each ends by the idle timeout
                assert await closed_by_server(stream, limit=1000)
            await wait_until(lambda: not server.connections_by_ip(), "idle ends released")
            again = await fill_to_cap(server, port)
            assert server.refused_per_ip == 0
            for stream in [*idle, *again]:
                await stream.aclose()
            nursery.cancel_scope.cancel()


async def test_cap_zero_means_no_per_ip_cap() -> None:
    server = capped_server(cap=0)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(server.run)
            streams = [await connect(port) for _ in range(CAP + 2)]
            for stream in streams:
                assert await echo(stream) == b"ping"
            assert server.refused_per_ip == 0
            for stream in streams:
                await stream.aclose()
            nursery.cancel_scope.cancel()


def test_a_negative_cap_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="max_connections_per_ip must be >= 0"):
        RemotingServer({}, max_connections_per_ip=-1)


async def test_cancelling_the_server_releases_every_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopping the server ends every connection: the table is empty afterwards."""
    caplog.set_level(logging.WARNING)
    server = capped_server()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(server.run)
            held = await fill_to_cap(server, port)
            nursery.cancel_scope.cancel()
        for stream in held:
            await stream.aclose()
    assert server.connections_by_ip() == {}
