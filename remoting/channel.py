"""One live connection seen as a peer: answers its requests and matches its responses.

Both :class:`~remoting.server.RemotingServer` and :class:`~remoting.client.RemotingClient` wrap
every connection in a :class:`Channel`, so either side can send requests on it (the broker sends
``CHECK_TRANSACTION_STATE`` to producers over the producer's own connection). The handler of a
request receives the channel as its :data:`ConnectionContext`.

Rules:

- :meth:`Channel.run` is the reader task. A handler that can answer at once returns its response
  (a plain value) and the reader sends it inline: no task per request, which is most of a fast
  request's cost. A handler that must wait returns an awaitable (an ``async def`` handler always
  does), and the reader awaits it in a task of its own in its nursery, so slow requests (a long
  poll, a ``SYNC_FLUSH`` send) are processed concurrently and never hold up the others. The
  reader yields to the scheduler at least every ``FAIR_REQUESTS`` inline requests. A handler
  whose answer a callback will give returns a :class:`~common.deferred.Deferred` (a
  ``SYNC_FLUSH`` send, resolved from the group commit's hand-back): the channel answers it from
  that callback, writing at once if the connection is free and the kernel takes the frame
  whole, else finishing the write in a task. No task per request there either.
- :meth:`Channel.run` returns when the peer closes, the transport breaks, a protocol error
  arrives or the channel is idle for longer than ``idle_timeout_s`` (nothing received or sent
  and nothing in flight; a watchdog task checks every quarter of it). Then it waits, shielded
  and for at most ``DEFERRED_DRAIN_S``, for the deferred answers it owes (their requests were
  carried out: a stored send is answered even while the server stops), cancels the request
  tasks, fails every pending call with :class:`RemotingSendRequestError` (its ``__cause__``
  the protocol error or transport failure that ended the reader, if one did) and closes the
  connection. It never raises anything but ``Cancelled``.
- With a :class:`~remoting.flow_control.PendingLimit` (servers), a request arriving while this
  connection or the whole server holds as many requests waiting for their answer as the limit
  allows is answered ``SYSTEM_BUSY`` without calling its handler (a oneway one is dropped).
- Busy polling (:mod:`remoting.busy_poll`): with ``poll_every_frame`` (servers) every frame
  sent or received touches the channel's :class:`~remoting.busy_poll.BusyPoll`, so the process
  keeps polling for the next request a moment instead of sleeping; without it (clients) only
  our own requests that expect an answer do, so a client polls while it waits for a response
  and never because of traffic it did not ask for.
- A response copies its request's ``opaque``; a oneway request gets no response, even on error.
  An unknown code is answered ``REQUEST_CODE_NOT_SUPPORTED``; a handler exception is logged and
  answered ``SYSTEM_ERROR`` (the remark says what failed); a handler returning ``None`` sends
  nothing.
- Our own requests get a fresh ``opaque`` from a per-channel counter (1..2**31-1, wrapping) and a
  :class:`_Call` in the pending table. The caller parks itself (``wait_task_rescheduled``) and
  the reader reschedules it with the response. Timeouts are the pending table's, not a cancel
  scope per call (RocketMQ's ``scanResponseTable``): the ``_expire_calls`` task sleeps until
  the earliest deadline and fails the calls that reached theirs with
  :class:`RemotingTimeoutError`. A response with an unknown ``opaque`` (late, after a timeout)
  is logged and dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, TypeAlias

import outcome
import trio

from common.deferred import Deferred
from common.errors import caused_by
from remoting.busy_poll import BusyPoll
from remoting.codes import ResponseCode
from remoting.command import INT32_MAX, RPC_ONEWAY, RPC_TYPE, RemotingCommand
from remoting.connection import Connection
from remoting.errors import (
    LocalProtocolError,
    RemoteProtocolError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from remoting.flow_control import BUSY_REMARK, PendingLimit
from remoting.headers import failure_response
from remoting.log_limit import WarningLimiter, suppressed_note
from remoting.reply import Reply, Response

log = logging.getLogger(__name__)

_RESPONSE_FLAG: Final = 1 << RPC_TYPE
_ONEWAY_FLAG: Final = 1 << RPC_ONEWAY

Handler: TypeAlias = Callable[[RemotingCommand, "Channel"], Reply]
"""Handles one request (see :data:`~remoting.reply.Reply` and the module rules)."""

FAIR_REQUESTS: Final = 32
"""The reader yields to the scheduler at least once every this many inline requests."""
DEFERRED_DRAIN_S: Final = 10.0
"""How long a closing channel waits for the deferred answers it owes (a store answers a
``SYNC_FLUSH`` put within its ``syncFlushTimeout``, 5 s by default)."""


@dataclasses.dataclass(eq=False, slots=True)
class _Call:
    """One of our requests, waiting for its response."""

    task: trio.lowlevel.Task
    deadline: float
    timeout_s: float
    parked: bool = False
    """True while the caller waits in ``wait_task_rescheduled`` (else it is still sending)."""
    result: outcome.Outcome[RemotingCommand] | None = None
    """The outcome, when it came before the caller parked."""


def check_time_left(addr: str, timeout_s: float) -> None:
    """Refuse a call to ``addr`` that has no time left, before anything is sent: a request
    written with a deadline already passed could be carried out and still be reported as
    timed out (its outcome unknown). ``timeout_s`` 0 or less raises RemotingTimeoutError, as
    RocketMQ's ``invokeSync`` throws ``RemotingTimeoutException`` when ``left <= 0`` before
    writing; NaN, a caller's bug, raises ValueError."""
    if math.isnan(timeout_s):
        raise ValueError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
    if timeout_s <= 0:
        raise RemotingTimeoutError(addr, timeout_s)


class Channel:
    """A connection plus its pending requests and the table of request handlers."""

    def __init__(
        self,
        connection: Connection,
        handlers: Mapping[int, Handler],
        *,
        idle_timeout_s: float = math.inf,
        busy_poll: BusyPoll | None = None,
        poll_every_frame: bool = True,
        pending_limit: PendingLimit | None = None,
        warnings: WarningLimiter | None = None,
    ) -> None:
        self.connection = connection
        self.warnings = warnings if warnings is not None else WarningLimiter()
        self.idle_timeout_s = idle_timeout_s
        self._handlers = handlers
        self._limit = pending_limit
        self._pending: dict[int, _Call] = {}
        self._expiry: trio.CancelScope | None = None  # the sleep of _expire_calls
        self._last_opaque = 0
        self._in_flight = 0
        self._deferred = 0  # deferred answers owed (part of _in_flight)
        self._deferred_drained: trio.Event | None = None  # set when _deferred drops to 0
        self._closed = False
        self._end_cause: Exception | None = None  # what ended the reader, if it failed
        self._activity = 0  # bumped by every send and receive; the idle watchdog reads it
        self._inline_streak = 0
        polling = busy_poll if busy_poll is not None and busy_poll.enabled else None
        self._busy_poll = polling  # touched by our requests, told of every frame received
        self._poll_frames = polling if poll_every_frame else None  # touched by any frame

    @property
    def remote_addr(self) -> str:
        """The peer's ``"host:port"``."""
        return self.connection.remote_addr

    @property
    def closed(self) -> bool:
        """True once the reader stopped or the connection was closed (a failed write closes it
        before the reader notices); calls then fail at once."""
        return self._closed or self.connection.closed

    async def send(self, cmd: RemotingCommand, *, cancellable: bool = True) -> None:
        """Write ``cmd`` as is (no opaque assigned, nothing awaited back); see
        :meth:`Connection.send <remoting.connection.Connection.send>` for ``cancellable``."""
        if self._closed:
            raise RemotingSendRequestError(self.remote_addr)
        await self.connection.send(cmd, cancellable=cancellable)
        self._activity += 1
        if self._poll_frames is not None:
            self._poll_frames.touch()

    async def invoke(self, cmd: RemotingCommand, *, timeout_s: float) -> RemotingCommand:
        """Send ``cmd`` as a request with a fresh opaque and return the peer's response.

        Raises RemotingTimeoutError if no response came within ``timeout_s`` (send included),
        at once and with nothing sent when ``timeout_s`` is 0 or less (see
        :func:`check_time_left`), RemotingSendRequestError if the connection failed or closed
        first.
        """
        check_time_left(self.remote_addr, timeout_s)
        if self.closed:
            raise RemotingSendRequestError(self.remote_addr)
        opaque = self._new_opaque()
        deadline = trio.current_time() + timeout_s
        call = _Call(trio.lowlevel.current_task(), deadline, timeout_s)
        self._pending[opaque] = call
        expiry = self._expiry
        if expiry is not None and deadline < expiry.deadline:
            expiry.deadline = deadline
        try:
            await self.connection.send(
                cmd.with_opaque(opaque, cmd.flag & ~_ONEWAY_FLAG),
                start_by=deadline,
                finish_by=deadline,
            )
        except trio.TooSlowError:
            self._pending.pop(opaque, None)
            raise caused_by(RemotingTimeoutError(self.remote_addr, timeout_s), None)
        except RemotingSendRequestError as exc:
            self._pending.pop(opaque, None)
            if trio.current_time() >= deadline:  # the write ran out of the call's time
                raise caused_by(RemotingTimeoutError(self.remote_addr, timeout_s), exc)
            raise
        except BaseException:
            self._pending.pop(opaque, None)
            raise
        self._activity += 1
        if self._busy_poll is not None:
            self._busy_poll.touch()
        if call.result is not None:  # answered (or failed) while we were still sending
            return call.result.unwrap()
        call.parked = True

        def abort(_: object) -> trio.lowlevel.Abort:
            self._pending.pop(opaque, None)  # cancelled: a late response is dropped
            return trio.lowlevel.Abort.SUCCEEDED

        response: RemotingCommand = await trio.lowlevel.wait_task_rescheduled(abort)
        return response

    async def invoke_oneway(self, cmd: RemotingCommand, *, timeout_s: float = math.inf) -> None:
        """Send ``cmd`` as a oneway request with a fresh opaque.

        Raises RemotingTimeoutError (nothing written) if other senders hold the connection for
        ``timeout_s``; the write itself is bounded as :class:`Connection` says.
        """
        if self._closed:
            raise RemotingSendRequestError(self.remote_addr)
        start_by = trio.current_time() + timeout_s
        try:
            await self.connection.send(
                cmd.with_opaque(self._new_opaque(), _ONEWAY_FLAG), start_by=start_by
            )
        except trio.TooSlowError:
            raise caused_by(RemotingTimeoutError(self.remote_addr, timeout_s), None)
        self._activity += 1
        if self._poll_frames is not None:
            self._poll_frames.touch()

    async def run(self) -> None:
        """Read and dispatch until the connection ends, then clean up (see the module rules)."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._expire_calls)
                try:
                    with trio.CancelScope() as reader:
                        if math.isfinite(self.idle_timeout_s):
                            nursery.start_soon(self._watch_idle, reader)
                        await self._read_loop(nursery)
                finally:
                    await self._drain_deferred()
                nursery.cancel_scope.cancel()
        finally:
            self._closed = True
            error = RemotingSendRequestError(self.remote_addr)
            error.__cause__ = self._end_cause
            for opaque in list(self._pending):
                self._finish(opaque, outcome.Error(error))
            await self.connection.aclose()

    async def _expire_calls(self) -> None:
        """Fail each pending call whose deadline passed (see the module rules)."""
        while True:
            earliest = min((c.deadline for c in self._pending.values()), default=math.inf)
            with trio.CancelScope(deadline=earliest) as self._expiry:
                await trio.sleep_forever()
            self._expiry = None
            now = trio.current_time()
            for opaque, call in list(self._pending.items()):
                if call.deadline <= now:
                    error = RemotingTimeoutError(self.remote_addr, call.timeout_s)
                    self._finish(opaque, outcome.Error(error))

    def _finish(self, opaque: int, result: outcome.Outcome[RemotingCommand]) -> bool:
        """Hand ``result`` to the call waiting for ``opaque``; False if none waits."""
        call = self._pending.pop(opaque, None)
        if call is None:
            return False
        if call.parked:
            trio.lowlevel.reschedule(call.task, result)
        else:
            call.result = result
        return True

    async def _watch_idle(self, reader: trio.CancelScope) -> None:
        """Cancel ``reader`` once the channel was idle for ``idle_timeout_s``."""
        timeout = self.idle_timeout_s
        seen = self._activity
        last_active = trio.current_time()
        while True:
            await trio.sleep(timeout / 4)
            now = trio.current_time()
            if self._activity != seen or self._in_flight or self._pending:
                seen = self._activity
                last_active = now
            elif now >= last_active + timeout:
                log.info("closing connection %s: idle for %.1f s", self.remote_addr, timeout)
                reader.cancel()
                return

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        """Receive commands until EOF or error; answer requests (see the module rules)."""
        addr = self.remote_addr
        receive = self.connection.receive
        while True:
            try:
                cmd = await receive()
            except RemoteProtocolError as exc:
                self._end_cause = exc
                self._warn_protocol_error(exc)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._end_cause = exc
                log.debug("connection %s ended: %r", addr, exc)
                return
            if cmd is None:
                log.debug("connection %s closed by peer", addr)
                return
            self._activity += 1
            if self._busy_poll is not None:
                self._busy_poll.arrived()
                if self._poll_frames is not None:
                    self._poll_frames.touch()
            if cmd.is_response:
                self._complete(cmd)
            else:
                await self._on_request(cmd, nursery)

    async def _on_request(self, request: RemotingCommand, nursery: trio.Nursery) -> None:
        """Answer ``request`` inline if its handler's reply is ready, else in a new task."""
        # a reader woken just before its server began to stop must not start new work (a
        # send stored now would go unanswered, and a producer's retry would duplicate it)
        await trio.lowlevel.checkpoint_if_cancelled()
        limit = self._limit
        # the reader answers inline requests before it reads on, so every request in flight
        # now is one whose answer is awaited in a task
        if limit is not None and not limit.admits(self._in_flight):
            await self._reject_busy(request, limit)
            return
        self._in_flight += 1
        reply = self._call_handler(request)
        if reply is not None and not isinstance(reply, RemotingCommand):
            if limit is not None:
                limit.pending += 1
            if isinstance(reply, Deferred):
                self._deferred += 1
                reply.on_resolved(functools.partial(self._answer_deferred, request, nursery))
            else:
                nursery.start_soon(self._respond_later, request, reply)
            return
        try:
            await self._respond(request, reply)
        finally:
            self._in_flight -= 1
        self._inline_streak += 1
        if self._inline_streak >= FAIR_REQUESTS:
            self._inline_streak = 0
            await trio.lowlevel.checkpoint()

    async def _respond_later(
        self, request: RemotingCommand, reply: Awaitable[RemotingCommand | None]
    ) -> None:
        """Await a handler's reply and send it."""
        try:
            try:
                response = await reply
            except Exception as exc:  # noqa: BLE001 - answered SYSTEM_ERROR and logged
                response = failure_response(request, self, exc)
            await self._respond(request, response)
        finally:
            self._in_flight -= 1
            if self._limit is not None:
                self._limit.pending -= 1

    def _answer_deferred(
        self, request: RemotingCommand, nursery: trio.Nursery, response: Response
    ) -> None:
        """Send a deferred reply's response, from the callback that resolved it (often an
        event-loop callback: nothing here may raise or wait). A write that cannot be done at
        once is finished by a task in ``nursery``."""
        try:
            later = self._send_response_now(request, response)
        except Exception:
            log.exception("cannot answer request code %s from %s", request.code, self.remote_addr)
            later = None
        if later is None:
            self._deferred_answered()
            return
        try:
            nursery.start_soon(self._finish_deferred, later)
        except RuntimeError:  # the channel ended meanwhile (not reached: it closes first)
            log.debug("response to %s lost: channel ended", self.remote_addr)
            self._deferred_answered()

    def _send_response_now(
        self, request: RemotingCommand, response: Response
    ) -> Callable[[], Awaitable[None]] | None:
        """Write the response at once if possible; else what a task must await to send it."""
        if response is None or request.is_oneway or self.closed:
            return None
        flag = response.flag | _RESPONSE_FLAG
        if response.opaque != request.opaque or response.flag != flag:
            response = response.with_opaque(request.opaque, flag)
        try:
            rest = self.connection.send_now(response)
        except RemotingSendRequestError:
            log.debug("response to %s lost: connection closed", self.remote_addr)
            return None
        except LocalProtocolError:
            return functools.partial(self._respond, request, response)  # answers SYSTEM_ERROR
        if rest is False:  # another sender holds the connection: queue behind it
            return functools.partial(self._respond, request, response)
        self._activity += 1
        if self._poll_frames is not None:
            self._poll_frames.touch()
        if rest is None:
            return None
        return functools.partial(self._send_rest, rest)

    async def _send_rest(self, rest: memoryview) -> None:
        try:
            await self.connection.send_rest(rest)
        except RemotingSendRequestError:
            log.debug("response to %s lost: connection closed", self.remote_addr)

    async def _finish_deferred(self, send: Callable[[], Awaitable[None]]) -> None:
        """Finish answering a deferred reply in a task (see :meth:`_answer_deferred`)."""
        try:
            await send()
        finally:
            self._deferred_answered()

    def _deferred_answered(self) -> None:
        self._deferred -= 1
        self._in_flight -= 1
        if self._limit is not None:
            self._limit.pending -= 1
        if self._deferred == 0 and self._deferred_drained is not None:
            self._deferred_drained.set()

    async def _drain_deferred(self) -> None:
        """Wait (shielded, at most ``DEFERRED_DRAIN_S``) until every deferred answer owed
        was sent or given up (see the module rules)."""
        if self._deferred == 0:
            return
        self._deferred_drained = trio.Event()
        with trio.move_on_after(DEFERRED_DRAIN_S, shield=True) as waited:
            await self._deferred_drained.wait()
        if waited.cancelled_caught:
            log.warning(
                "%s: closing with %d deferred answer(s) still owed",
                self.remote_addr,
                self._deferred,
            )

    async def _reject_busy(self, request: RemotingCommand, limit: PendingLimit) -> None:
        """Answer SYSTEM_BUSY (see the module rules)."""
        if limit.reject():
            log.warning(
                "%s: %d requests waiting on this connection, %d in all: answering SYSTEM_BUSY "
                "(%d so far)",
                self.remote_addr,
                self._in_flight,
                limit.pending,
                limit.rejected,
            )
        busy = RemotingCommand.response_to(request, ResponseCode.SYSTEM_BUSY, remark=BUSY_REMARK)
        await self._respond(request, busy)

    def _complete(self, response: RemotingCommand) -> None:
        """Hand a response to the call waiting for its opaque, or drop it."""
        if not self._finish(response.opaque, outcome.Value(response)):
            # a call that timed out or was cancelled (a consumer seeking, say) gets its answer
            # late: expected, not a fault
            log.debug(
                "dropping response code=%s opaque=%s from %s: no call waits for it",
                response.code,
                response.opaque,
                self.remote_addr,
            )

    async def _respond(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """Send the response to ``request`` (none for a oneway request or a None reply)."""
        if response is None or request.is_oneway:
            return
        flag = response.flag | _RESPONSE_FLAG
        if response.opaque != request.opaque or response.flag != flag:  # not made by response_to
            response = response.with_opaque(request.opaque, flag)
        # not cancellable: a handler that ran (a message stored, say) is answered even when
        # the server began to stop meanwhile; the write itself is bounded (see Connection)
        try:
            try:
                await self.send(response, cancellable=False)
            except LocalProtocolError as exc:
                log.error("cannot send response to code %s: %s", request.code, exc)
                await self.send(
                    RemotingCommand.response_to(
                        request, ResponseCode.SYSTEM_ERROR, remark=f"invalid response: {exc}"
                    ),
                    cancellable=False,
                )
        except RemotingSendRequestError:
            log.debug("response to %s lost: connection closed", self.remote_addr)

    def _warn_protocol_error(self, exc: RemoteProtocolError) -> None:
        dropped = self.warnings.allow("protocol error")
        if dropped is not None:
            log.warning(
                "closing connection %s: protocol error: %s%s",
                self.remote_addr,
                exc,
                suppressed_note(dropped),
            )

    def _warn_unsupported(self, code: int) -> None:
        dropped = self.warnings.allow("unsupported code")
        if dropped is not None:
            log.warning(
                "request code %s from %s not supported%s",
                code,
                self.remote_addr,
                suppressed_note(dropped),
            )

    def _call_handler(self, request: RemotingCommand) -> Reply:
        """The handler's reply, or the error response standing in for it."""
        handler = self._handlers.get(request.code)
        if handler is None:
            self._warn_unsupported(request.code)
            return RemotingCommand.response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {request.code} not supported",
            )
        try:
            return handler(request, self)
        except Exception as exc:  # noqa: BLE001 - answered SYSTEM_ERROR and logged
            return failure_response(request, self, exc)

    def _new_opaque(self) -> int:
        """Return the next request id (1..INT32_MAX, wrapping)."""
        self._last_opaque = self._last_opaque % INT32_MAX + 1
        return self._last_opaque


ConnectionContext: TypeAlias = Channel
"""What a :data:`Handler` receives: the channel the request came on."""
