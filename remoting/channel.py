"""One live connection seen as a peer: answers its requests and matches its responses.

Both :class:`~remoting.server.RemotingServer` and :class:`~remoting.client.RemotingClient` wrap
every connection in a :class:`Channel`, so either side can send requests on it (the broker sends
``CHECK_TRANSACTION_STATE`` to producers over the producer's own connection). The handler of a
request receives the channel as its :data:`ConnectionContext`.

Rules:

- :meth:`Channel.run` is the reader task: it owns a nursery in which every incoming request is
  handled in its own task, so requests are processed concurrently. It returns when the peer
  closes, the transport breaks, a protocol error arrives or the channel is idle for longer than
  ``idle_timeout_s`` (nothing received or sent and nothing in flight). Then it cancels the request
  tasks, fails every pending call with :class:`RemotingSendRequestError` and closes the
  connection. It never raises anything but ``Cancelled``.
- A response copies its request's ``opaque``; a oneway request gets no response, even on error.
  An unknown code is answered ``REQUEST_CODE_NOT_SUPPORTED``; a handler exception is logged and
  answered ``SYSTEM_ERROR`` (the remark says what failed); a handler returning ``None`` sends
  nothing.
- Our own requests get a fresh ``opaque`` from a per-channel counter (1..2**31-1, wrapping) and a
  one-shot slot in the pending table; :meth:`Channel.invoke` waits under ``trio.fail_after``.
  A response with an unknown ``opaque`` (late, after a timeout) is logged and dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, TypeAlias

import trio

from remoting.codes import ResponseCode
from remoting.command import INT32_MAX, RPC_ONEWAY, RPC_TYPE, RemotingCommand
from remoting.connection import Connection
from remoting.errors import (
    LocalProtocolError,
    RemoteProtocolError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)

log = logging.getLogger(__name__)

_RESPONSE_FLAG: Final = 1 << RPC_TYPE
_ONEWAY_FLAG: Final = 1 << RPC_ONEWAY

Handler: TypeAlias = Callable[[RemotingCommand, "Channel"], Awaitable[RemotingCommand | None]]
"""Handles one request; returns the response (its opaque is set for it) or None for no reply."""


@dataclasses.dataclass(eq=False, slots=True)
class _Slot:
    """A one-shot place for the response to one of our requests."""

    event: trio.Event = dataclasses.field(default_factory=trio.Event)
    response: RemotingCommand | None = None
    error: RemotingError | None = None


class Channel:
    """A connection plus its pending requests and the table of request handlers."""

    def __init__(
        self,
        connection: Connection,
        handlers: Mapping[int, Handler],
        *,
        idle_timeout_s: float = math.inf,
    ) -> None:
        self.connection = connection
        self.idle_timeout_s = idle_timeout_s
        self._handlers = handlers
        self._pending: dict[int, _Slot] = {}
        self._last_opaque = 0
        self._in_flight = 0
        self._closed = False
        self._last_activity = trio.current_time()

    @property
    def remote_addr(self) -> str:
        """The peer's ``"host:port"``."""
        return self.connection.remote_addr

    @property
    def closed(self) -> bool:
        """True once the reader stopped; calls then fail at once."""
        return self._closed

    async def send(self, cmd: RemotingCommand) -> None:
        """Write ``cmd`` as is (no opaque assigned, nothing awaited back)."""
        if self._closed:
            raise RemotingSendRequestError(self.remote_addr)
        await self.connection.send(cmd)
        self._last_activity = trio.current_time()

    async def invoke(self, cmd: RemotingCommand, *, timeout_s: float) -> RemotingCommand:
        """Send ``cmd`` as a request with a fresh opaque and return the peer's response.

        Raises RemotingTimeoutError if no response came within ``timeout_s`` (send included),
        RemotingSendRequestError if the connection failed or closed first.
        """
        opaque = self._new_opaque()
        request = cmd.with_opaque(opaque, cmd.flag & ~_ONEWAY_FLAG)
        slot = _Slot()
        self._pending[opaque] = slot
        try:
            # a bare scope rather than trio.fail_after: the same, without a generator-based
            # context manager on every call
            with trio.CancelScope(deadline=trio.current_time() + timeout_s) as scope:
                await self.send(request)
                await slot.event.wait()
        finally:
            self._pending.pop(opaque, None)
        if scope.cancelled_caught:
            raise RemotingTimeoutError(self.remote_addr, timeout_s)
        if slot.error is not None:
            raise slot.error
        assert slot.response is not None
        return slot.response

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request with a fresh opaque."""
        await self.send(cmd.with_opaque(self._new_opaque(), _ONEWAY_FLAG))

    async def run(self) -> None:
        """Read and dispatch until the connection ends, then clean up (see the module rules)."""
        try:
            async with trio.open_nursery() as nursery:
                await self._read_loop(nursery)
                nursery.cancel_scope.cancel()
        finally:
            self._closed = True
            error = RemotingSendRequestError(self.remote_addr)
            for slot in self._pending.values():
                if not slot.event.is_set():
                    slot.error = error
                    slot.event.set()
            self._pending.clear()
            await self.connection.aclose()

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        """Receive commands until EOF, error or idle timeout."""
        addr = self.remote_addr
        while True:
            with trio.CancelScope(deadline=self._last_activity + self.idle_timeout_s) as idle:
                try:
                    cmd = await self.connection.receive()
                except RemoteProtocolError as exc:
                    log.warning("closing connection %s: protocol error: %s", addr, exc)
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    log.debug("connection %s ended: %r", addr, exc)
                    return
            if idle.cancelled_caught:
                now = trio.current_time()
                if self._in_flight or self._pending:
                    self._last_activity = now
                elif now >= self._last_activity + self.idle_timeout_s:
                    log.info("closing connection %s: idle for %.1f s", addr, self.idle_timeout_s)
                    return
                continue
            if cmd is None:
                log.debug("connection %s closed by peer", addr)
                return
            self._last_activity = trio.current_time()
            if cmd.is_response:
                self._complete(cmd)
            else:
                self._in_flight += 1
                nursery.start_soon(self._handle, cmd)

    def _complete(self, response: RemotingCommand) -> None:
        """Hand a response to the call waiting for its opaque, or drop it."""
        slot = self._pending.get(response.opaque)
        if slot is None or slot.event.is_set():
            # a call that timed out or was cancelled (a consumer seeking, say) gets its answer
            # late: expected, not a fault
            log.debug(
                "dropping response code=%s opaque=%s from %s: no call waits for it",
                response.code,
                response.opaque,
                self.remote_addr,
            )
            return
        slot.response = response
        slot.event.set()

    async def _handle(self, request: RemotingCommand) -> None:
        """Run the handler for one request and send its response (unless oneway)."""
        try:
            response = await self._dispatch(request)
            if response is None or request.is_oneway:
                return
            response = response.with_opaque(request.opaque, response.flag | _RESPONSE_FLAG)
            try:
                await self.send(response)
            except LocalProtocolError as exc:
                log.error("cannot send response to code %s: %s", request.code, exc)
                await self.send(
                    RemotingCommand.response_to(
                        request, ResponseCode.SYSTEM_ERROR, remark=f"invalid response: {exc}"
                    )
                )
        except RemotingSendRequestError:
            log.debug("response to %s lost: connection closed", self.remote_addr)
        finally:
            self._in_flight -= 1

    async def _dispatch(self, request: RemotingCommand) -> RemotingCommand | None:
        """Return the handler's response, or the error response standing in for it."""
        handler = self._handlers.get(request.code)
        if handler is None:
            log.warning("request code %s from %s not supported", request.code, self.remote_addr)
            return RemotingCommand.response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {request.code} not supported",
            )
        try:
            return await handler(request, self)
        except Exception as exc:
            log.exception("handler for code %s from %s failed", request.code, self.remote_addr)
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"{type(exc).__name__}: {exc}",
            )

    def _new_opaque(self) -> int:
        """Return the next request id (1..INT32_MAX, wrapping)."""
        self._last_opaque = self._last_opaque % INT32_MAX + 1
        return self._last_opaque


ConnectionContext: TypeAlias = Channel
"""What a :data:`Handler` receives: the channel the request came on."""
