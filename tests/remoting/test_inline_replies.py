"""Handlers whose reply is ready: answered inline by the reader, next to awaited ones.

Real loopback sockets (127.0.0.1, port 0); every test is bounded by ``trio.fail_after(LIMIT)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable

import trio
import trio.testing

from remoting.channel import FAIR_REQUESTS, Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import Connection
from remoting.frame import FrameDecoder, encode_frame
from remoting.headers import guarded
from remoting.reply import Reply, then
from remoting.server import Handler
from tests.remoting.test_rpc import LIMIT, hang, req, serving

READY = RequestCode.SEND_MESSAGE
BROKEN = RequestCode.QUERY_MESSAGE
MAYBE = RequestCode.PULL_MESSAGE
HANG = RequestCode.HEART_BEAT


def ready_echo(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=request.body)


def broken(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
    raise ValueError("boom")


def maybe_later(request: RemotingCommand, ctx: Channel) -> Reply:
    """Answers at once unless asked to wait; then returns an awaitable."""
    if request.body != b"wait":
        return ready_echo(request, ctx)

    async def later() -> RemotingCommand:
        await trio.sleep(0.01)
        return ready_echo(request, ctx)

    return later()


HANDLERS: dict[int, Handler] = {READY: ready_echo, BROKEN: broken, MAYBE: maybe_later, HANG: hang}


async def test_ready_reply_is_sent() -> None:
    with trio.fail_after(LIMIT):
        async with serving(HANDLERS) as addr, RemotingClient() as client:
            resp = await client.invoke(addr, req(READY, b"now"))
            assert resp.code == ResponseCode.SUCCESS
            assert resp.body == b"now"


async def test_handler_choosing_per_request_between_ready_and_awaited() -> None:
    with trio.fail_after(LIMIT):
        async with serving(HANDLERS) as addr, RemotingClient() as client:
            assert (await client.invoke(addr, req(MAYBE, b"now"))).body == b"now"
            assert (await client.invoke(addr, req(MAYBE, b"wait"))).body == b"wait"


async def test_exception_from_plain_handler_is_system_error_and_connection_survives() -> None:
    with trio.fail_after(LIMIT):
        async with serving(HANDLERS) as addr, RemotingClient() as client:
            resp = await client.invoke(addr, req(BROKEN))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "ValueError: boom" in (resp.remark or "")
            assert (await client.invoke(addr, req(READY, b"after"))).body == b"after"


async def test_inline_replies_pass_a_request_that_waits() -> None:
    """A hanging request on the same connection holds up neither the reader nor its replies."""
    with trio.fail_after(LIMIT):
        async with (
            serving(HANDLERS) as addr,
            RemotingClient() as client,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(lambda: client.invoke(addr, req(HANG), timeout_s=LIMIT))
            for i in range(20):
                assert (await client.invoke(addr, req(READY, b"%d" % i))).body == b"%d" % i
            nursery.cancel_scope.cancel()


async def test_guarded_keeps_ready_replies_ready_and_guards_awaited_ones() -> None:
    calls: list[str] = []

    async def async_broken(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        calls.append("awaited")
        raise ValueError("later boom")

    def count(response: RemotingCommand | None) -> RemotingCommand | None:
        calls.append("counted")
        return response

    ready: Handler = guarded(ready_echo)
    awaited: Handler = guarded(async_broken)
    stream, _ = trio.testing.memory_stream_pair()
    channel = Channel(Connection(stream, "peer:1"), {})
    reply = then(ready(req(READY, b"x"), channel), count)
    assert isinstance(reply, RemotingCommand)
    assert reply.body == b"x"
    assert calls == ["counted"]
    later = then(awaited(req(READY), channel), count)
    assert isinstance(later, Awaitable)
    assert calls == ["counted"]  # nothing ran yet
    response = await later
    assert response is not None
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "later boom" in (response.remark or "")
    assert calls == ["counted", "awaited", "counted"]


async def test_reader_yields_while_answering_a_flood_inline() -> None:
    """Pipelined requests answered inline still let other tasks run every FAIR_REQUESTS."""
    ticks = 0
    seen: list[int] = []

    def note_tick(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        seen.append(ticks)
        return ready_echo(request, ctx)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    count = 20 * FAIR_REQUESTS
    frames = b"".join(
        encode_frame(req(READY, b"%d" % i).with_opaque(i + 1, 0)) for i in range(count)
    )
    with trio.fail_after(LIMIT):
        async with serving({READY: note_tick}) as addr, trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            host, port = addr.split(":")
            async with await trio.open_tcp_stream(host, int(port)) as raw:
                await raw.send_all(frames)
                decoder = FrameDecoder()
                answered = 0
                while answered < count:
                    decoder.receive_data(await raw.receive_some(65536))
                    while decoder.next_command() is not None:
                        answered += 1
            nursery.cancel_scope.cancel()
    assert len(seen) == count
    longest = max(len(list(run)) for _, run in itertools.groupby(seen))
    # trio may run the reader twice in a row (once at the end of one scheduling batch and once
    # at the start of the next) before the ticker gets its turn
    assert longest <= 2 * FAIR_REQUESTS


async def test_idle_timeout_spares_a_connection_in_steady_use(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Virtual time: a request every 50 s keeps a 120 s idle timeout away for 600 s; once the
    requests stop, the server side closes between 1 and 1.25 timeouts after the last one."""
    ours, theirs = trio.testing.memory_stream_pair()
    client = Channel(Connection(ours, "server:1"), {})
    server = Channel(Connection(theirs, "client:1"), HANDLERS, idle_timeout_s=120.0)
    closed_at: list[float] = []
    closed = trio.Event()

    async def serve() -> None:
        await server.run()
        closed_at.append(trio.current_time())
        closed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(serve)
        last = trio.current_time()
        for i in range(12):
            await trio.sleep_until(last + 50.0)
            resp = await client.invoke(req(READY, b"%d" % i), timeout_s=10.0)
            assert resp.body == b"%d" % i
            assert not closed_at
            last = trio.current_time()
        with trio.fail_after(1000):
            await closed.wait()
        nursery.cancel_scope.cancel()
    assert 120.0 <= closed_at[0] - last <= 150.0
