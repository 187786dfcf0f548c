"""The remoting client: one lazily opened connection per ``"host:port"`` (``NettyRemotingClient``).

Use it as ``async with RemotingClient() as client:``; it owns a nursery holding one reader task
(:meth:`Channel.run <remoting.channel.Channel.run>`) per open connection::

    RemotingClient
    └─ nursery
       ├─ BusyPoll.run               polls for busy_poll_s after each request it sends
       └─ Channel.run per address    reader; requests from the server run in child tasks

Rules:

- The first call to an address connects (under ``connect_timeout_s``); concurrent first calls
  share one connection. Connection refused or timed out raises :class:`RemotingConnectError`.
- With ``ssl_context`` (RocketMQ's ``tls.enable``, :mod:`remoting.tls`) every connection runs
  its TLS handshake right after connecting, under the same ``connect_timeout_s``; the server's
  certificate must name the host dialled when the context checks host names. A failed
  handshake raises :class:`~remoting.tls.TlsHandshakeError` (a :class:`RemotingConnectError`
  saying why: an untrusted certificate, ...); :class:`~remoting.tls.ServerNotTlsError`, one of
  them, when the server answered with plaintext or closed the connection without a TLS word
  (it does not, or likely does not, speak TLS).
- Without ``ssl_context``, a call whose connection ended because the server answered with a
  TLS record (a TLS server's alert) raises :class:`~remoting.tls.TlsRequiredError` (a
  :class:`RemotingSendRequestError` saying the server requires TLS and how to turn it on)
  instead of a bare send failure. Only a failed call looks at why.
- :meth:`RemotingClient.invoke` gives the request a fresh opaque, waits for the response with
  the same opaque under ``timeout_s`` (default ``default_timeout_s``; it covers the send and
  the wait, not the connect) and raises :class:`RemotingTimeoutError` when it runs out; a
  ``timeout_s`` of 0 or less has run out already: it raises at once, nothing sent.
- A connection that fails or closes fails all its pending calls with
  :class:`RemotingSendRequestError` and is forgotten, so the next call to that address
  reconnects.
- Requests the server sends on our connection (``CHECK_TRANSACTION_STATE``,
  ``NOTIFY_CONSUMER_IDS_CHANGED``) go to the ``handlers`` table, as on the server; unknown
  codes are answered ``REQUEST_CODE_NOT_SUPPORTED``.
- ``rpc_hook``, when given, turns each request we send into the one written (RocketMQ's
  client ``RPCHook#doBeforeRequest``): :class:`~remoting.acl.signing.RequestSigner` signs it.
  Without one, requests are written as given.
- Leaving the ``async with`` block cancels every reader and closes every connection. Reader
  tasks never raise, so a broken connection never cancels the caller's block.
- The background tasks (readers, dials, the poller) run under a shielded scope that only
  leaving the block cancels: when a scope around the block is cancelled, the owner's shielded
  close work (persisting offsets, unregistering) still has working connections.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from types import TracebackType

import trio

from common.digits import parse_uint
from common.errors import caused_by
from remoting.busy_poll import BusyPoll
from remoting.channel import Channel, Handler, check_time_left
from remoting.command import RemotingCommand
from remoting.connection import Connection
from remoting.errors import (
    PeerSpeaksTlsError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
)
from remoting.log_limit import WarningLimiter
from remoting.tls import TlsHandshakeError, TlsRequiredError, dial_tls

log = logging.getLogger(__name__)


def split_addr(addr: str) -> tuple[str, int]:
    """Split ``"host:port"`` (``"[v6]:port"`` too); raise RemotingConnectError if malformed."""
    host, sep, port = addr.rpartition(":")
    number = parse_uint(port, max_digits=5)
    if not sep or not host or number is None:
        raise RemotingConnectError(addr)
    return host.strip("[]"), number


class _Dial:
    """One connection attempt to an address; its callers wait on ``done``."""

    __slots__ = ("channel", "done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.channel: Channel | None = None
        self.error: BaseException | None = None


class RemotingClient:
    """Calls servers by address; see the module rules."""

    def __init__(
        self,
        *,
        handlers: Mapping[int, Handler] | None = None,
        default_timeout_s: float = 3.0,
        connect_timeout_s: float = 3.0,
        busy_poll_s: float = 0.0,
        rpc_hook: Callable[[RemotingCommand], RemotingCommand] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.handlers: Mapping[int, Handler] = handlers or {}
        self.rpc_hook = rpc_hook
        """Applied to every request before it is sent (see the module rules)."""
        self.ssl_context = ssl_context
        """Every connection speaks TLS with this context (None: plain TCP)."""
        self.default_timeout_s = default_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._channels: dict[str, Channel] = {}
        self._dials: dict[str, _Dial] = {}
        self.warnings = WarningLimiter()
        """Limits the warnings about peers' bad input, over all connections."""
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None  # the background tasks' (shielded)
        self._background = trio.CancelScope(shield=True)
        self._closed = False
        self.busy_poll = BusyPoll(busy_poll_s)
        """Polls for ``busy_poll_s`` after each request that expects an answer, so a call
        waiting for its response does not sleep at once (see :mod:`remoting.busy_poll`)."""

    async def __aenter__(self) -> RemotingClient:
        if self._nursery_cm is not None or self._closed:
            raise RuntimeError("a RemotingClient can be entered only once")
        self._nursery_cm = trio.open_nursery()
        outer = await self._nursery_cm.__aenter__()
        try:
            self._nursery = await outer.start(self._host_background)
        except BaseException:
            await self._nursery_cm.__aexit__(None, None, None)
            raise
        self._nursery.start_soon(self.busy_poll.run)
        return self

    async def _host_background(self, *, task_status: trio.TaskStatus[trio.Nursery]) -> None:
        """Hold the background tasks' nursery under the shielded scope (see the module rules)."""
        with self._background:
            async with trio.open_nursery() as nursery:
                task_status.started(nursery)
                await trio.sleep_forever()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Readers never raise, so the nursery exits cleanly; the block's own exception (if any)
        # propagates unchanged instead of being wrapped in an ExceptionGroup.
        assert self._nursery is not None
        assert self._nursery_cm is not None
        self._closed = True
        self._background.cancel()
        await self._nursery_cm.__aexit__(None, None, None)

    def connected(self, addr: str) -> bool:
        """True if a live connection to ``addr`` is open."""
        channel = self._channels.get(addr)
        return channel is not None and not channel.closed

    async def invoke(
        self, addr: str, cmd: RemotingCommand, *, timeout_s: float | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` as a request and return the response (see the module
        rules; a ``timeout_s`` of 0 or less raises RemotingTimeoutError before connecting or
        sending anything)."""
        timeout = self.default_timeout_s if timeout_s is None else timeout_s
        check_time_left(addr, timeout)
        channel = await self._channel(addr)
        if self.rpc_hook is not None:
            cmd = self.rpc_hook(cmd)
        try:  # free unless raised (zero-cost try): the plain path does no more work
            return await channel.invoke(cmd, timeout_s=timeout)
        except RemotingSendRequestError as exc:
            if isinstance(exc.__cause__, PeerSpeaksTlsError) and self.ssl_context is None:
                raise caused_by(TlsRequiredError(addr), exc)
            raise

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` to ``addr`` as a oneway request (no response)."""
        channel = await self._channel(addr)
        if self.rpc_hook is not None:
            cmd = self.rpc_hook(cmd)
        await channel.invoke_oneway(cmd, timeout_s=self.default_timeout_s)

    async def close_connection(self, addr: str) -> None:
        """Close the connection to ``addr`` if one is open (its pending calls fail)."""
        channel = self._channels.pop(addr, None)
        if channel is not None:
            await channel.connection.aclose()

    async def _channel(self, addr: str) -> Channel:
        """Return the live channel to ``addr``, connecting if there is none."""
        channel = self._channels.get(addr)
        if channel is not None and not channel.closed:
            return channel
        if self._nursery is None or self._closed:
            raise RemotingError("RemotingClient is not running; use 'async with'")
        host, port = split_addr(addr)
        dial = self._dials.get(addr)
        if dial is None:  # one attempt per address, shared by every caller that comes meanwhile
            dial = self._dials[addr] = _Dial()
            self._nursery.start_soon(self._dial, addr, host, port, dial)
        await dial.done.wait()
        if dial.channel is None:
            if isinstance(dial.error, TlsHandshakeError):
                raise type(dial.error)(addr, dial.error.reason)
            raise caused_by(RemotingConnectError(addr), dial.error)
        return dial.channel

    async def _dial(self, addr: str, host: str, port: int, dial: _Dial) -> None:
        """Connect to ``addr`` for every caller waiting on ``dial``: a background task, so one
        caller's cancellation does not fail the others, bounded by ``connect_timeout_s``."""
        try:
            with trio.fail_after(self.connect_timeout_s):
                stream = await self._connect(addr, host, port)
        except (OSError, trio.TooSlowError, TlsHandshakeError) as exc:
            dial.error = exc
        else:
            channel = Channel(
                Connection(stream, addr),
                self.handlers,
                busy_poll=self.busy_poll,
                poll_every_frame=False,
                warnings=self.warnings,
            )
            self._channels[addr] = channel
            assert self._nursery is not None
            self._nursery.start_soon(self._run_channel, addr, channel)
            log.debug("connected to %s", addr)
            dial.channel = channel
        finally:
            if self._dials.get(addr) is dial:
                del self._dials[addr]
            dial.done.set()

    async def _connect(self, addr: str, host: str, port: int) -> trio.abc.Stream:
        """A TCP connection to ``host:port``, with TLS on it when the client uses TLS."""
        stream = await trio.open_tcp_stream(host, port)
        if self.ssl_context is None:
            return stream
        return await dial_tls(stream, self.ssl_context, host, addr)

    async def _run_channel(self, addr: str, channel: Channel) -> None:
        """Reader task of one connection; forgets the connection when it ends."""
        try:
            await channel.run()
        except Exception:
            log.exception("connection to %s failed", addr)
        finally:
            if self._channels.get(addr) is channel:
                del self._channels[addr]
