"""The server's bound on requests waiting for their answer (``remoting.flow_control``), over real
loopback sockets: past the per-connection or the total limit a request is answered SYSTEM_BUSY
at once and its handler never runs; answered or abandoned requests free their places."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.flow_control import BUSY_REMARK, PendingLimit
from remoting.server import RemotingServer
from tests.broker.inprocess import wait_until

LIMIT = 10
WAIT = RequestCode.PULL_MESSAGE
INSTANT = RequestCode.HEART_BEAT


class Handlers:
    """A handler that waits for :attr:`release` and one that answers at once; both count."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.calls = {WAIT: 0, INSTANT: 0}

    def table(self) -> dict[int, object]:
        return {WAIT: self.wait, INSTANT: self.instant}

    async def wait(self, req: RemotingCommand, ctx: Channel) -> RemotingCommand:
        self.calls[WAIT] += 1
        await self.release.wait()
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS)

    def instant(self, req: RemotingCommand, ctx: Channel) -> RemotingCommand:
        self.calls[INSTANT] += 1
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS)


@asynccontextmanager
async def serving(h: Handlers, total: int, per_connection: int) -> AsyncIterator[RemotingServer]:
    async with trio.open_nursery() as nursery:
        server = RemotingServer(
            h.table(),  # type: ignore[arg-type]
            max_pending=total,
            max_pending_per_connection=per_connection,
        )
        await nursery.start(server.run)
        yield server
        nursery.cancel_scope.cancel()


def request(code: int) -> RemotingCommand:
    return RemotingCommand.request(code, {}, b"", opaque=0)


async def call(client: RemotingClient, addr: str, code: int, out: list[int]) -> None:
    out.append((await client.invoke(addr, request(code), timeout_s=LIMIT)).code)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        PendingLimit(0, 1)
    with pytest.raises(ValueError, match="> 0"):
        PendingLimit(1, 0)


async def test_requests_past_either_limit_are_answered_busy_and_never_handled() -> None:
    h = Handlers()
    with trio.fail_after(LIMIT):
        async with serving(h, total=5, per_connection=3) as server:
            addr = f"127.0.0.1:{server.port}"
            limit = server.pending_limit
            async with (
                RemotingClient() as a,
                RemotingClient() as b,
                trio.open_nursery() as nursery,
            ):
                answered: list[int] = []
                for _ in range(3):
                    nursery.start_soon(call, a, addr, WAIT, answered)
                await wait_until(lambda: limit.pending == 3, "3 waiting on a")
                # a is at its own limit: busy at once, whatever the request
                for code in (WAIT, INSTANT):
                    busy = await a.invoke(addr, request(code), timeout_s=LIMIT)
                    assert (busy.code, busy.remark) == (ResponseCode.SYSTEM_BUSY, BUSY_REMARK)
                await a.invoke_oneway(addr, request(INSTANT))  # dropped
                for _ in range(2):
                    nursery.start_soon(call, b, addr, WAIT, answered)
                await wait_until(lambda: limit.pending == 5, "2 more waiting on b")
                # the server is at its total: b, below its own limit, is busy too
                assert (await b.invoke(addr, request(WAIT))).code == ResponseCode.SYSTEM_BUSY
                assert h.calls == {WAIT: 5, INSTANT: 0}  # no refused request reached a handler
                assert limit.rejected == 4
                h.release.set()
                await wait_until(lambda: len(answered) == 5, "the waiting ones answered")
                assert answered == [ResponseCode.SUCCESS] * 5
                assert limit.pending == 0
                # room again
                assert (await a.invoke(addr, request(WAIT))).code == ResponseCode.SUCCESS
                assert (await a.invoke(addr, request(INSTANT))).code == ResponseCode.SUCCESS


async def test_a_closed_connection_frees_its_places() -> None:
    h = Handlers()
    with trio.fail_after(LIMIT):
        async with serving(h, total=2, per_connection=2) as server:
            addr = f"127.0.0.1:{server.port}"
            limit = server.pending_limit
            async with RemotingClient() as a, trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(a.invoke_oneway, addr, request(WAIT))
                await wait_until(lambda: limit.pending == 2, "2 waiting")
                await a.close_connection(addr)
                await wait_until(lambda: limit.pending == 0, "freed by the close")
            async with RemotingClient() as b:
                assert (await b.invoke(addr, request(INSTANT))).code == ResponseCode.SUCCESS
