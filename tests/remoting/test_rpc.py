"""RemotingServer + RemotingClient over real loopback sockets (127.0.0.1, port 0).

Every test is bounded by ``trio.fail_after(LIMIT)``; the only short durations are the ones being
tested (an invoke timeout, an idle timeout) and handler sleeps that reorder responses.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import msgpack
import pytest
import trio
import trio.testing

from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import Connection
from remoting.errors import (
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from remoting.frame import FrameDecoder, encode_frame
from remoting.server import Handler, RemotingServer

LIMIT = 10
ECHO = RequestCode.SEND_MESSAGE
SLOW_ECHO = RequestCode.PULL_MESSAGE
FAIL = RequestCode.QUERY_MESSAGE
HANG = RequestCode.HEART_BEAT
NOTE = RequestCode.UNREGISTER_CLIENT


async def echo(req: RemotingCommand, ctx: Channel) -> RemotingCommand:
    return RemotingCommand.response_to(
        req, ResponseCode.SUCCESS, body=req.body, ext_fields=req.ext_fields
    )


async def slow_echo(req: RemotingCommand, ctx: Channel) -> RemotingCommand:
    delay = req.ext_fields["delay"]
    assert isinstance(delay, float)
    await trio.sleep(delay)
    return await echo(req, ctx)


async def fail(req: RemotingCommand, ctx: Channel) -> RemotingCommand:
    raise ValueError("boom")


async def hang(req: RemotingCommand, ctx: Channel) -> RemotingCommand:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def req(code: int, body: bytes = b"", **ext: str | float) -> RemotingCommand:
    return RemotingCommand.request(code, ext, body, opaque=0)


@asynccontextmanager
async def serving(
    handlers: dict[int, Handler], *, port: int = 0, idle_timeout_s: float = 120.0
) -> AsyncIterator[str]:
    """Run a server for the block; yield its ``"127.0.0.1:port"``."""
    async with trio.open_nursery() as nursery:
        server = RemotingServer(handlers, port=port, idle_timeout_s=idle_timeout_s)
        bound = await nursery.start(server.run)
        yield f"127.0.0.1:{bound}"
        nursery.cancel_scope.cancel()


BASIC: dict[int, Handler] = {ECHO: echo, SLOW_ECHO: slow_echo, FAIL: fail, HANG: hang}


async def test_round_trip() -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr, RemotingClient() as client:
            resp = await client.invoke(addr, req(ECHO, b"hello", k="v"))
            assert resp.is_response
            assert resp.code == ResponseCode.SUCCESS
            assert resp.body == b"hello"
            assert resp.ext_fields == {"k": "v"}


async def test_a_reply_not_made_by_response_to_is_sent_as_the_response() -> None:
    """A handler's reply with another opaque and no response bit still answers the call."""

    async def stray(req: RemotingCommand, ctx: Channel) -> RemotingCommand:
        return RemotingCommand(ResponseCode.SUCCESS, opaque=12345, body=b"stray")

    with trio.fail_after(LIMIT):
        async with serving({ECHO: stray}) as addr, RemotingClient() as client:
            for _ in range(3):
                resp = await client.invoke(addr, req(ECHO))
                assert resp.is_response
                assert resp.body == b"stray"


async def test_concurrent_invokes_matched_by_opaque() -> None:
    results: dict[int, RemotingCommand] = {}
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr, RemotingClient() as client:

            async def call(i: int) -> None:
                # later calls answer sooner, so responses come back out of order
                cmd = req(SLOW_ECHO, str(i).encode(), delay=(50 - i) * 0.002)
                results[i] = await client.invoke(addr, cmd)

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(call, i)
    assert sorted(results) == list(range(50))
    for i, resp in results.items():
        assert resp.body == str(i).encode()
    assert len({resp.opaque for resp in results.values()}) == 50


async def test_oneway_delivered() -> None:
    got = trio.Event()
    seen: list[RemotingCommand] = []

    async def note(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        seen.append(request)
        got.set()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)  # must not be sent

    with trio.fail_after(LIMIT):
        async with serving({NOTE: note, ECHO: echo}) as addr, RemotingClient() as client:
            await client.invoke_oneway(addr, req(NOTE, b"x"))
            await got.wait()
            # the connection still answers, and no stray response confused it
            assert (await client.invoke(addr, req(ECHO, b"after"))).body == b"after"
    assert seen[0].is_oneway
    assert seen[0].body == b"x"


async def test_unknown_code_not_supported() -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr, RemotingClient() as client:
            resp = await client.invoke(addr, req(9999))
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert "9999" in resp.remark


async def test_handler_exception_is_system_error_and_connection_survives() -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr, RemotingClient() as client:
            resp = await client.invoke(addr, req(FAIL))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "boom" in resp.remark
            assert (await client.invoke(addr, req(ECHO, b"ok"))).body == b"ok"


async def test_timeout() -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr, RemotingClient() as client:
            with pytest.raises(RemotingTimeoutError) as info:
                await client.invoke(addr, req(HANG), timeout_s=0.2)
            assert info.value.addr == addr
            assert info.value.timeout == 0.2
            assert (await client.invoke(addr, req(ECHO, b"ok"))).body == b"ok"


async def test_connection_refused() -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # bound, never listened, now closed: nobody accepts on this port
    addr = f"127.0.0.1:{port}"
    with trio.fail_after(LIMIT):
        async with RemotingClient() as client:
            with pytest.raises(RemotingConnectError) as info:
                await client.invoke(addr, req(ECHO))
            assert info.value.addr == addr
            assert isinstance(info.value.__cause__, OSError)  # the dial's own error (also compiled)


async def test_server_restart_fails_pending_and_next_call_reconnects() -> None:
    with trio.fail_after(LIMIT):
        async with RemotingClient() as client, trio.open_nursery() as outer:
            server = RemotingServer(BASIC)
            scope = trio.CancelScope()

            async def run_server(task_status: trio.TaskStatus[int]) -> None:
                with scope:
                    await server.run(task_status=task_status)

            port = await outer.start(run_server)
            addr = f"127.0.0.1:{port}"
            assert (await client.invoke(addr, req(ECHO, b"1"))).body == b"1"

            failed = trio.Event()

            async def pending_call() -> None:
                with pytest.raises(RemotingSendRequestError):
                    await client.invoke(addr, req(HANG), timeout_s=LIMIT)
                failed.set()

            outer.start_soon(pending_call)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()  # server goes away with the call in flight
            await failed.wait()
            assert not client.connected(addr)

            await outer.start(RemotingServer(BASIC, port=port).run)
            assert (await client.invoke(addr, req(ECHO, b"2"))).body == b"2"
            outer.cancel_scope.cancel()


async def test_client_closing_connection_fails_pending() -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr, RemotingClient() as client:
            assert (await client.invoke(addr, req(ECHO))).code == ResponseCode.SUCCESS

            async def close_soon() -> None:
                await trio.testing.wait_all_tasks_blocked()
                await client.close_connection(addr)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(close_soon)
                with pytest.raises(RemotingSendRequestError):
                    await client.invoke(addr, req(HANG), timeout_s=LIMIT)
            assert (await client.invoke(addr, req(ECHO, b"again"))).body == b"again"


async def _closed_by_peer(stream: trio.SocketStream) -> bool:
    """Read until the peer closes; True if it did (EOF or reset) without sending anything."""
    try:
        data = await stream.receive_some(1024)
    except trio.BrokenResourceError:
        return True
    return data == b""


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(lambda: struct.pack(">I", 16 * 1024 * 1024 + 1), id="oversize-length"),
        pytest.param(lambda: b"\xff\xff\xff\xff" + b"x" * 100, id="max-length"),
        pytest.param(lambda: _frame(b"\xc1\xc1\xc1"), id="undecodable-msgpack"),
        pytest.param(lambda: _frame(msgpack.packb([1, 2, 3])), id="not-a-map"),
        pytest.param(lambda: _frame(msgpack.packb({"code": "x", "opaque": 1})), id="bad-field"),
    ],
)
async def test_protocol_error_closes_only_that_connection(garbage: Callable[[], bytes]) -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr, RemotingClient() as client:
            assert (await client.invoke(addr, req(ECHO, b"before"))).body == b"before"
            host, port = addr.split(":")
            raw = await trio.open_tcp_stream(host, int(port))
            async with raw:
                await raw.send_all(garbage())
                assert await _closed_by_peer(raw)
            assert (await client.invoke(addr, req(ECHO, b"after"))).body == b"after"


async def test_idle_connection_closed() -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC, idle_timeout_s=0.2) as addr:
            host, port = addr.split(":")
            raw = await trio.open_tcp_stream(host, int(port))
            async with raw:
                assert await _closed_by_peer(raw)


async def test_idle_timeout_spares_connection_with_request_in_flight() -> None:
    with trio.fail_after(LIMIT):
        async with serving(BASIC, idle_timeout_s=0.1) as addr, RemotingClient() as client:
            resp = await client.invoke(addr, req(SLOW_ECHO, b"slow", delay=0.5))
            assert resp.body == b"slow"


async def test_server_to_client_request() -> None:
    contexts: list[Channel] = []
    registered = trio.Event()

    async def register(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        contexts.append(ctx)
        registered.set()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def check_state(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        return RemotingCommand.response_to(
            request, ResponseCode.TRANSACTION_SHOULD_COMMIT, body=b"tx:" + request.body
        )

    client_handlers: dict[int, Handler] = {RequestCode.CHECK_TRANSACTION_STATE: check_state}
    with trio.fail_after(LIMIT):
        async with (
            serving({RequestCode.HEART_BEAT: register}) as addr,
            RemotingClient(handlers=client_handlers) as client,
        ):
            await client.invoke(addr, req(RequestCode.HEART_BEAT))
            await registered.wait()
            ctx = contexts[0]
            assert ctx.remote_addr.startswith("127.0.0.1:")
            resp = await ctx.invoke(
                req(RequestCode.CHECK_TRANSACTION_STATE, b"42"), timeout_s=LIMIT
            )
            assert resp.code == ResponseCode.TRANSACTION_SHOULD_COMMIT
            assert resp.body == b"tx:42"
            unknown = await ctx.invoke(
                req(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED), timeout_s=LIMIT
            )
            assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


class _OnDrop(logging.Handler):
    """Sets an event when the channel logs that it dropped a response nobody waits for."""

    def __init__(self, event: trio.Event) -> None:
        super().__init__()
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if "no call waits for it" in record.getMessage():
            self.event.set()


async def test_late_response_with_unknown_opaque_is_dropped() -> None:
    release, dropped = trio.Event(), trio.Event()

    async def late(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        await release.wait()  # answer only once the caller has given up
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=b"late")

    async def echo(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=request.body)

    channel_log = logging.getLogger("remoting.channel")
    handler = _OnDrop(dropped)
    channel_log.addHandler(handler)
    level = channel_log.level
    channel_log.setLevel(logging.DEBUG)  # a dropped late response is logged at DEBUG
    try:
        with trio.fail_after(LIMIT):
            async with serving({SLOW_ECHO: late, ECHO: echo}) as addr, RemotingClient() as c:
                with pytest.raises(RemotingTimeoutError):
                    await c.invoke(addr, req(SLOW_ECHO), timeout_s=0.05)
                release.set()
                await dropped.wait()  # the late response reached the client and was dropped
                assert (await c.invoke(addr, req(ECHO, b"ok"))).body == b"ok"
    finally:
        channel_log.setLevel(level)
        channel_log.removeHandler(handler)


async def test_client_block_exception_propagates_unwrapped() -> None:
    async def use_client(addr: str) -> None:
        async with RemotingClient() as client:
            await client.invoke(addr, req(ECHO))
            raise KeyError("mine")

    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr:
            with pytest.raises(KeyError):
                await use_client(addr)


async def test_each_call_times_out_at_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A later call with a sooner deadline is not held to the earlier call's (virtual time)."""
    ours, theirs = trio.testing.memory_stream_pair()
    client = Channel(Connection(ours, "server:1"), {})
    server = Channel(Connection(theirs, "client:1"), {HANG: hang})
    took: dict[str, float] = {}

    async def call(name: str, timeout_s: float) -> None:
        start = trio.current_time()
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(req(HANG), timeout_s=timeout_s)
        took[name] = trio.current_time() - start

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        async with trio.open_nursery() as calls:
            calls.start_soon(call, "long", 30.0)
            await trio.testing.wait_all_tasks_blocked()
            calls.start_soon(call, "short", 0.5)
        nursery.cancel_scope.cancel()
    assert took == {"long": pytest.approx(30.0), "short": pytest.approx(0.5)}


async def test_cancelled_call_leaves_nothing_behind(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    client = Channel(Connection(ours, "server:1"), {})
    server = Channel(Connection(theirs, "client:1"), {SLOW_ECHO: slow_echo})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        with trio.move_on_after(1.0):
            await client.invoke(req(SLOW_ECHO, b"late", delay=2.0), timeout_s=60.0)
        # the late answer comes at 2 s and is dropped; the next call gets its own answer
        resp = await client.invoke(req(SLOW_ECHO, b"next", delay=3.0), timeout_s=60.0)
        assert resp.body == b"next"
        nursery.cancel_scope.cancel()


async def test_idle_channel_closes_within_a_quarter_past_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Virtual time: the watchdog sleeps between its checks (a spinning one would never let the
    autojump clock move, and the test would hang)."""
    ours, _theirs = trio.testing.memory_stream_pair()
    channel = Channel(Connection(ours, "peer:1"), {}, idle_timeout_s=120.0)
    start = trio.current_time()
    with trio.fail_after(1000):
        await channel.run()
    assert 120.0 <= trio.current_time() - start <= 150.0
    assert channel.closed


async def test_a_peer_dribbling_a_frame_is_closed_as_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A slowloris peer (a byte of a frame now and then, never a whole frame) keeps nothing
    alive: only whole frames count as activity, so the idle timeout closes it all the same."""
    ours, theirs = trio.testing.memory_stream_pair()
    channel = Channel(Connection(ours, "peer:1"), {}, idle_timeout_s=120.0)
    frame = struct.pack(">I", 1000) + bytes(1000)

    async def dribble() -> None:
        for byte in frame:
            await theirs.send_all(bytes([byte]))
            await trio.sleep(5.0)

    start = trio.current_time()
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dribble)
            await channel.run()
            nursery.cancel_scope.cancel()
    assert 120.0 <= trio.current_time() - start <= 150.0
    assert channel.closed


def test_the_default_connection_cap_leaves_half_the_descriptors_for_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each served connection holds two descriptors (its socket and the duplicate it sends
    on): at the cap, half the limit must still be free for the store's files."""
    import resource

    from remoting import server

    for soft in (8, 64, 100, 256, 1024, 65536):  # a low ulimit -n too: no floor above half
        monkeypatch.setattr(resource, "getrlimit", lambda _kind, s=soft: (s, s))
        cap = server.default_max_connections()
        assert cap >= 1
        assert cap * server.DESCRIPTORS_PER_CONNECTION <= soft // 2


async def test_callers_of_an_unanswering_address_share_one_connect_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SYNs to a host that does not answer: five concurrent calls fail together after one
    connect timeout, not one after another (the fifth after five)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):  # a full accept queue: the kernel drops further SYNs
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        fillers.append(s)
    try:
        failed_at: list[float] = []
        async with RemotingClient(connect_timeout_s=1.0, default_timeout_s=1.0) as client:
            start = trio.current_time()

            async def call() -> None:
                with pytest.raises(RemotingError):
                    await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(105, opaque=0))
                failed_at.append(trio.current_time() - start)

            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(call)
        assert len(failed_at) == 5
        assert max(failed_at) < 1.5
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_a_write_to_a_peer_that_stopped_reading_keeps_the_calls_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The peer reads nothing (a lockstep stream: no buffer at all), so the frame's write
    blocks. The call's own timeout ends it, not the 5 s bound of a shielded write: the
    connection is closed at once (half a frame may be out) and the call times out."""
    ours, _theirs = trio.testing.lockstep_stream_pair()
    client = Channel(Connection(ours, "server:1"), {})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        start = trio.current_time()
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(req(ECHO, b"x" * 1000), timeout_s=0.5)
        assert trio.current_time() - start == pytest.approx(0.5)
        assert client.closed  # before its reader noticed: the next call must not pick it
        nursery.cancel_scope.cancel()


async def test_a_write_to_a_peer_that_stopped_reading_keeps_the_callers_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The same with a scope of the caller's (``fail_after``) shorter than the call's timeout."""
    ours, _theirs = trio.testing.lockstep_stream_pair()
    client = Channel(Connection(ours, "server:1"), {})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError), trio.fail_after(0.5):
            await client.invoke(req(ECHO, b"x" * 1000), timeout_s=60.0)
        assert trio.current_time() - start == pytest.approx(0.5)
        nursery.cancel_scope.cancel()


async def test_connections_outlive_a_cancelled_scope_around_the_client_until_it_closes() -> None:
    """Cancelling a scope around ``async with RemotingClient()`` must not take the readers
    with it: the owner's shielded close work (commit offsets, unregister) still needs them."""
    with trio.fail_after(LIMIT):
        async with serving(BASIC) as addr:
            with trio.CancelScope() as outer:
                async with RemotingClient() as client:
                    await client.invoke(addr, req(ECHO))
                    outer.cancel()
                    await trio.lowlevel.cancel_shielded_checkpoint()  # readers see the cancel
                    with trio.CancelScope(shield=True):
                        resp = await client.invoke(addr, req(ECHO, b"at close"))
                    await trio.sleep_forever()
            assert outer.cancelled_caught
            assert resp.body == b"at close"
            assert not client.connected(addr)


class StoppingServer:
    """A server whose ECHO handler begins the server's stop (cancels its scope) and answers
    ``body`` (the request's own body when None), as a send handled while SIGTERM arrives."""

    def __init__(self, body: bytes | None = None) -> None:
        self.scope = trio.CancelScope()
        self.body = body
        self.handled: list[bytes] = []
        self.server = RemotingServer({ECHO: self._store_and_stop}, port=0)

    def _store_and_stop(self, request: RemotingCommand, ctx: Channel) -> RemotingCommand:
        self.handled.append(request.body)
        self.scope.cancel()
        body = request.body if self.body is None else self.body
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def run(self, *, task_status: trio.TaskStatus[int]) -> None:
        with self.scope:
            await self.server.run(task_status=task_status)


async def test_a_request_handled_as_the_server_begins_to_stop_is_still_answered() -> None:
    """The handler ran (a message stored, say) and the server's scope was cancelled meanwhile:
    the answer is still written, or the client, told nothing, would send the request again."""
    stopping = StoppingServer(b"stored")
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery, RemotingClient() as client:
            port = await nursery.start(stopping.run)
            resp = await client.invoke(f"127.0.0.1:{port}", req(ECHO))
            assert resp.body == b"stored"


async def test_a_large_answer_of_a_server_that_began_to_stop_is_written_whole() -> None:
    """The answer's task is cancelled (its scope's effective deadline is -inf then): a frame
    larger than the socket buffers must still be written whole, bounded only by the write's
    own limit, not cut at once."""
    big = b"x" * (8 << 20)
    stopping = StoppingServer(big)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery, RemotingClient() as client:
            port = await nursery.start(stopping.run)
            resp = await client.invoke(f"127.0.0.1:{port}", req(ECHO))
            assert resp.body == big


async def test_a_request_read_after_the_server_began_to_stop_is_not_handled() -> None:
    """Two requests arrive in one segment; handling the first begins the stop. The second,
    read from the buffer after that, must not be handled: its answer could not be relied on
    (a send stored and never answered is sent again by the client, a duplicate)."""
    stopping = StoppingServer()
    first = RemotingCommand.request(ECHO, {}, b"first", opaque=1)
    second = RemotingCommand.request(ECHO, {}, b"second", opaque=2)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(stopping.run)
            raw = await trio.open_tcp_stream("127.0.0.1", port)
            async with raw:
                await raw.send_all(encode_frame(first) + encode_frame(second))
                decoder = FrameDecoder()
                answers: list[RemotingCommand] = []
                while chunk := await raw.receive_some():
                    decoder.receive_data(chunk)
                    while (answer := decoder.next_command()) is not None:
                        answers.append(answer)
    assert stopping.handled == [b"first"]
    assert [(a.opaque, a.body) for a in answers] == [(1, b"first")]
