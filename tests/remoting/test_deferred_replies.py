"""Handlers whose answer a callback gives later (a ``common.deferred.Deferred``): the channel
answers from that callback with no task, as the broker answers ``SYNC_FLUSH`` sends from the
group commit's hand-back.

Real loopback sockets (127.0.0.1, port 0); each deferred is resolved the way the store does it,
from an event-loop callback (``run_sync_soon``), outside any task. Every test is bounded by
``trio.fail_after(LIMIT)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import trio
import trio.testing

from common.deferred import Deferred
from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import guarded
from remoting.reply import Reply, Response, then
from remoting.server import Handler, RemotingServer
from tests.remoting.test_rpc import LIMIT, req, serving

DEFER = RequestCode.SEND_MESSAGE
ECHO = RequestCode.PULL_MESSAGE


class Owed:
    """The deferred replies handed out so far, with their requests."""

    def __init__(self) -> None:
        self.replies: list[tuple[RemotingCommand, Deferred[Response]]] = []
        self._added = trio.Event()

    def handler(self, request: RemotingCommand, ctx: Channel) -> Reply:
        reply: Deferred[Response] = Deferred()
        self.replies.append((request, reply))
        self._added.set()
        return reply

    async def wait_for(self, n: int) -> None:
        while len(self.replies) < n:
            await self._added.wait()
            self._added = trio.Event()

    def resolve_soon(self, index: int, body: bytes | None = None) -> None:
        """Resolve reply ``index`` with its request's body (or ``body``) from an event-loop
        callback, as the group commit's hand-back does."""
        request, reply = self.replies[index]
        response = RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=request.body if body is None else body
        )
        trio.lowlevel.current_trio_token().run_sync_soon(reply.resolve, response)


def echo(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=request.body)


def handlers(owed: Owed) -> dict[int, Handler]:
    return {DEFER: owed.handler, ECHO: echo}


async def test_a_deferred_reply_is_answered_when_resolved_and_others_pass_meanwhile() -> None:
    owed = Owed()
    got: list[bytes] = []
    with trio.fail_after(LIMIT):
        async with serving(handlers(owed)) as addr, RemotingClient() as client:
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    got.append((await client.invoke(addr, req(DEFER, b"later"))).body)

                nursery.start_soon(call)
                await owed.wait_for(1)
                assert (await client.invoke(addr, req(ECHO, b"now"))).body == b"now"
                assert got == []
                owed.resolve_soon(0)
            assert got == [b"later"]


async def test_deferred_replies_larger_than_the_socket_buffer_arrive_whole() -> None:
    """Two big answers resolved in one callback: the first is begun at once and finished by a
    task, the second queues behind it; both arrive intact and in their own frames."""
    owed = Owed()
    big = [bytes([i]) * (6 * 1024 * 1024) for i in (1, 2)]
    got: dict[int, bytes] = {}
    with trio.fail_after(LIMIT):
        async with serving(handlers(owed)) as addr, RemotingClient() as client:
            async with trio.open_nursery() as nursery:
                for i in range(2):

                    async def call(i: int = i) -> None:
                        resp = await client.invoke(addr, req(DEFER, b"%d" % i), timeout_s=LIMIT)
                        got[i] = resp.body

                    nursery.start_soon(call)
                await owed.wait_for(2)

                def resolve_both() -> None:
                    for i in range(2):
                        request, reply = owed.replies[i]
                        which = int(request.body)
                        reply.resolve(
                            RemotingCommand.response_to(
                                request, ResponseCode.SUCCESS, body=big[which]
                            )
                        )

                trio.lowlevel.current_trio_token().run_sync_soon(resolve_both)
            assert got == {0: big[0], 1: big[1]}
            assert (await client.invoke(addr, req(ECHO, b"after"))).body == b"after"


@asynccontextmanager
async def server_in(
    nursery: trio.Nursery, owed: Owed
) -> AsyncIterator[tuple[str, trio.CancelScope]]:
    """A server under a cancel scope of its own, so a test can stop it while replies are
    owed."""
    scope = trio.CancelScope()

    async def run(*, task_status: trio.TaskStatus[int]) -> None:
        with scope:
            await RemotingServer(handlers(owed), host="127.0.0.1", port=0).run(
                task_status=task_status
            )

    port = await nursery.start(run)
    yield f"127.0.0.1:{port}", scope
    scope.cancel()


async def test_a_stopping_server_still_answers_the_deferred_replies_it_owes() -> None:
    """A broker that begins to stop answers the SYNC_FLUSH sends it stored once their flush
    comes: a producer told nothing would send them again."""
    owed = Owed()
    got: list[int] = []
    answered = trio.Event()
    with trio.fail_after(LIMIT):
        async with (
            trio.open_nursery() as nursery,
            RemotingClient() as client,
            server_in(nursery, owed) as (addr, server),
        ):

            async def call() -> None:
                got.append((await client.invoke(addr, req(DEFER, b"x"))).code)
                answered.set()

            nursery.start_soon(call)
            await owed.wait_for(1)
            server.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert got == []  # the channel waits for what it owes
            owed.resolve_soon(0)
            await answered.wait()
            assert got == [ResponseCode.SUCCESS]


async def test_a_deferred_reply_to_a_closed_connection_is_dropped_and_the_server_serves_on() -> (
    None
):
    owed = Owed()
    with trio.fail_after(LIMIT):
        async with serving(handlers(owed)) as addr:
            async with RemotingClient() as gone, trio.open_nursery() as nursery:

                async def call() -> None:
                    with suppress(RemotingError):
                        await gone.invoke(addr, req(DEFER, b"x"))

                nursery.start_soon(call)
                await owed.wait_for(1)
                nursery.cancel_scope.cancel()
            owed.resolve_soon(0)  # its connection is closed (or closing): nothing to send
            await trio.testing.wait_all_tasks_blocked()
            async with RemotingClient() as client:
                assert (await client.invoke(addr, req(ECHO, b"ok"))).body == b"ok"


async def test_wrappers_keep_a_deferred_reply_deferred() -> None:
    """``guarded`` passes a deferred reply through and ``then`` maps it when it comes; a
    failing wrapper function leaves the response as it was instead of breaking the resolver."""
    owed = Owed()
    seen: list[int] = []

    def count(response: Response) -> Response:
        assert response is not None
        seen.append(response.code)
        return response

    def broken(response: Response) -> Response:
        raise ValueError("wrapper boom")

    wrapped: dict[int, Handler] = {
        DEFER: guarded(lambda r, c: then(then(owed.handler(r, c), count), broken)),
    }
    with trio.fail_after(LIMIT):
        async with serving(wrapped) as addr, RemotingClient() as client:
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    assert (await client.invoke(addr, req(DEFER, b"w"))).body == b"w"

                nursery.start_soon(call)
                await owed.wait_for(1)
                owed.resolve_soon(0)
            assert seen == [ResponseCode.SUCCESS]
