"""The remoting server: a TCP listener dispatching requests to a ``{code: handler}`` table.

``RemotingServer.run`` is a task tree (RocketMQ's ``NettyRemotingServer``)::

    run                         open_tcp_listeners(port, host); task_status.started(bound port)
    ├─ BusyPoll.run             polls for busy_poll_s after each frame (remoting.busy_poll)
    └─ serve_listeners          one task per accepted connection
       └─ Channel.run           reader; answers ready replies inline; per-connection nursery
          ├─ _watch_idle        closes the connection after idle_timeout_s without traffic
          ├─ _respond_later     one task per reply that must be awaited (long polls, ...)
          └─ _finish_deferred   a deferred reply's write the kernel did not take whole
                                (deferred replies are otherwise answered from the callback
                                that resolves them: SYNC_FLUSH sends, no task)

Rules:

- A handler is ``handler(request, ctx) -> Reply``: the response (or None) when it can answer
  at once, else an awaitable of it (``async def`` handlers), where ``ctx`` is
  the :class:`~remoting.channel.Channel` of the connection: ``ctx.remote_addr`` names the
  client, and ``ctx.invoke`` / ``ctx.invoke_oneway`` / ``ctx.send`` reach it later on the same
  connection. Response, oneway, unknown-code and handler-error behaviour are
  :mod:`remoting.channel`'s.
- A protocol error, a broken transport or ``idle_timeout_s`` without traffic closes that one
  connection; the server keeps serving the others. No connection task ever crashes the server.
- A frame whose first bytes arrived must arrive whole within ``frame_read_timeout_s``
  (:data:`DEFAULT_FRAME_READ_TIMEOUT_S`), else its connection is closed with a warning naming
  the peer (:mod:`remoting.connection`): a peer dribbling a frame (slowloris) gives up its
  connection slot long before the idle timeout. ``0`` turns either timeout off.
- ``on_close(channel)``, when given, is called (synchronously) once a connection has ended, so
  the owner can forget that peer at once; an exception from it is logged and swallowed.
- At most ``max_connections`` connections are served at once (by default half the process's
  file-descriptor limit, so that clients can never take the descriptors the store needs for
  its files); one more is closed as soon as it is accepted, with a warning at most every
  :data:`OVER_CAP_LOG_INTERVAL_S`.
- At most ``max_connections_per_ip`` of them come from one peer IP address (by default
  :data:`DEFAULT_MAX_CONNECTIONS_PER_IP`; ``0``: no per-IP cap), so one host (a client
  leaking connections, a flood) cannot take every slot of ``max_connections`` from the
  others. One more from that address is closed as soon as it is accepted, counted in
  ``refused_per_ip`` and warned about through the server's
  :class:`~remoting.log_limit.WarningLimiter` (the first such warning of an interval names
  the address); connections from other addresses are served as before. An address's count
  drops when its connection ends, however it ends (the peer closing or resetting, the idle
  timeout, a protocol error, the server stopping), and an address with none open is
  forgotten, so the table holds only addresses with connections open.
- At most ``max_pending`` requests wait for their answer at once (long polls, ``SYNC_FLUSH``
  sends), at most ``max_pending_per_connection`` of them on one connection; a request past
  either is answered ``SYSTEM_BUSY`` at once (:mod:`remoting.flow_control`).
- TLS (``ssl_context``, RocketMQ's ``tls.server.mode=enforcing``, :mod:`remoting.tls`):
  each accepted connection must finish its TLS handshake within
  :attr:`RemotingServer.handshake_timeout_s` (the frame-read timeout, or the idle timeout
  when that is shorter), so a peer stalling in the handshake gives up its slot as a peer
  dribbling a frame does; a connection in its handshake counts against ``max_connections``
  and its address's cap. A failed handshake (a plaintext client, an untrusted client
  certificate, the timeout) closes that connection, counted in ``tls_handshake_failures``
  and warned about through the server's :class:`~remoting.log_limit.WarningLimiter`.
  Without a context none of this runs: the accept path checks one attribute and requests
  never see TLS. :meth:`RemotingServer.use_ssl_context` swaps the context (a reloaded
  certificate, :class:`~remoting.tls.ServerTlsReloader`): each connection is wrapped with the
  context in force when it was accepted, and keeps it.
- Cancelling :meth:`RemotingServer.run` stops accepting, cancels every request and closes every
  connection (each close is shielded and bounded).
"""

from __future__ import annotations

import logging
import math
import resource
import ssl
import time
from collections.abc import Callable, Mapping

import trio

from common.net import open_listeners
from remoting.busy_poll import BusyPoll
from remoting.channel import Channel, ConnectionContext, Handler
from remoting.connection import Connection, peer_address
from remoting.flow_control import (
    DEFAULT_MAX_PENDING,
    DEFAULT_MAX_PENDING_PER_CONNECTION,
    PendingLimit,
)
from remoting.log_limit import WARNING_INTERVAL_S, WarningLimiter, suppressed_note
from remoting.tls import TlsHandshakeError, accept_tls

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FRAME_READ_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS_PER_IP",
    "ConnectionContext",
    "Handler",
    "RemotingServer",
    "default_max_connections",
]

OVER_CAP_LOG_INTERVAL_S = 10.0

DEFAULT_MAX_CONNECTIONS_PER_IP = 1024
"""Connections one peer IP address may hold at once. RocketMQ has no such cap; Kafka's
``max.connections.per.ip`` defaults to unlimited. A client process shares one connection per
server (RocketMQ's ``MQClientInstance``), so 1024 is far above what the clients of one host
need, and still keeps one host from taking every slot of a default ``max_connections`` (tens
of thousands once ``mqbroker`` / ``mqnamesrv`` raised the descriptor limit)."""
PER_IP_CAP_WARNING = "connections per IP"
"""The :class:`~remoting.log_limit.WarningLimiter` kind of the per-IP refusal warning."""
TLS_HANDSHAKE_WARNING = "TLS handshake"
"""The :class:`~remoting.log_limit.WarningLimiter` kind of the failed-handshake warning."""

DEFAULT_IDLE_TIMEOUT_S = 120.0
"""RocketMQ's ``serverChannelMaxIdleTimeSeconds``."""
DEFAULT_FRAME_READ_TIMEOUT_S = 30.0
"""How long the rest of a begun frame may take to arrive. Longer than any call a client makes
(a send waits 3 s for its answer, our clients write a frame within 5 s or close the
connection), and a 16 MiB frame, the largest there is, needs only 560 KB/s to make it; well
under the idle timeout, so a slowloris peer holds its slot a quarter as long."""


DESCRIPTORS_PER_CONNECTION = 2
"""A served connection holds its socket and the duplicate :class:`Connection` sends on."""


def default_max_connections() -> int:
    """Connections that take at most half the soft ``RLIMIT_NOFILE`` (at least 1): the other
    half is left for the store's files, however low the limit (no floor that could give the
    clients every descriptor)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(1, soft // 2 // DESCRIPTORS_PER_CONNECTION)


class RemotingServer:
    """Serves the ``handlers`` table on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        frame_read_timeout_s: float = DEFAULT_FRAME_READ_TIMEOUT_S,
        on_close: Callable[[Channel], None] | None = None,
        busy_poll_s: float = 0.0,
        max_connections: int | None = None,
        max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_pending_per_connection: int = DEFAULT_MAX_PENDING_PER_CONNECTION,
        port_setting: str = "listenPort",
        warning_interval_s: float = WARNING_INTERVAL_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.handlers = handlers
        self.ssl_context = ssl_context
        """Every connection speaks TLS with this context (None: plain TCP)."""
        self.tls_handshake_failures = 0
        """Connections closed because their TLS handshake failed or timed out."""
        self._handshaking = 0
        self.port_setting = port_setting
        """The setting ``port`` came from, named when it cannot be bound."""
        self.pending_limit = PendingLimit(max_pending, max_pending_per_connection)
        """Requests waiting for their answer, and how many may (see the module rules)."""
        self.max_connections = (
            max_connections if max_connections is not None else default_max_connections()
        )
        self.refused = 0
        """Connections closed at once because ``max_connections`` were open."""
        self._refusal_logged = -math.inf
        if max_connections_per_ip < 0:
            raise ValueError(
                f"max_connections_per_ip must be >= 0 (0: no cap), got {max_connections_per_ip}"
            )
        self.max_connections_per_ip = max_connections_per_ip
        """Connections one peer IP address may hold at once (0: no cap)."""
        self.refused_per_ip = 0
        """Connections closed at once because their address held ``max_connections_per_ip``."""
        self._per_ip: dict[str, int] = {}
        self.on_close = on_close
        self.host = host
        self.port = port
        self.idle_timeout_s = idle_timeout_s if idle_timeout_s > 0 else math.inf
        self.frame_read_timeout_s = frame_read_timeout_s if frame_read_timeout_s > 0 else math.inf
        self._channels: set[Channel] = set()
        self.warnings = WarningLimiter(warning_interval_s)
        """Limits the warnings about peers' bad input, over all connections."""
        self.busy_poll = BusyPoll(busy_poll_s)
        """Polls for ``busy_poll_s`` after each frame (see :mod:`remoting.busy_poll`)."""

    def use_ssl_context(self, context: ssl.SSLContext) -> None:
        """Wrap connections accepted from now on with ``context`` (a reloaded certificate);
        open connections keep the context they were accepted with."""
        self.ssl_context = context

    @property
    def handshake_timeout_s(self) -> float:
        """How long an accepted connection may take to finish its TLS handshake."""
        return min(self.frame_read_timeout_s, self.idle_timeout_s)

    @property
    def channels(self) -> frozenset[Channel]:
        """The connections open right now (for broadcasting to clients)."""
        return frozenset(self._channels)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled; ``task_status.started`` gets the bound port."""
        listeners = await open_listeners(self.port, self.host, self.port_setting)
        sockname = listeners[0].socket.getsockname()
        self.port = int(sockname[1])
        log.info("remoting server listening on %s:%d", self.host, self.port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.busy_poll.run)
            await nursery.start(trio.serve_listeners, self._serve_connection, listeners)
            task_status.started(self.port)

    def connections_by_ip(self) -> dict[str, int]:
        """Peer IP address -> connections it holds now (addresses with none are absent)."""
        return dict(self._per_ip)

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        """Run one connection's channel unless a cap refuses it; while it runs, count it
        against its peer's address."""
        if len(self._channels) + self._handshaking >= self.max_connections:
            await self._refuse(stream)
            return
        ip = _peer_ip(stream)
        if ip is not None and 0 < self.max_connections_per_ip <= self._per_ip.get(ip, 0):
            await self._refuse_per_ip(stream, ip)
            return
        if ip is not None:
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        try:
            if self.ssl_context is not None:
                await self._serve_tls(stream)
            else:
                await self._run_channel(stream)
        finally:
            if ip is not None:
                self._release_ip(ip)

    def _release_ip(self, ip: str) -> None:
        left = self._per_ip[ip] - 1
        if left:
            self._per_ip[ip] = left
        else:
            del self._per_ip[ip]

    async def _serve_tls(self, stream: trio.SocketStream) -> None:
        """Run the TLS handshake (see the module rules), then the connection's channel."""
        assert self.ssl_context is not None
        addr = peer_address(stream)
        self._handshaking += 1
        try:
            tls = await accept_tls(stream, self.ssl_context, addr, self.handshake_timeout_s)
        except TlsHandshakeError as exc:
            self._warn_handshake_failed(exc)
            return
        finally:
            self._handshaking -= 1
        await self._run_channel(tls)

    def _warn_handshake_failed(self, exc: TlsHandshakeError) -> None:
        self.tls_handshake_failures += 1
        dropped = self.warnings.allow(TLS_HANDSHAKE_WARNING)
        if dropped is not None:
            log.warning(
                "%s; connection closed (tls.server.mode=enforcing)%s",
                exc,
                suppressed_note(dropped),
            )

    async def _run_channel(self, stream: trio.abc.Stream) -> None:
        """Run one connection's channel; log and swallow anything it raises."""
        channel = Channel(
            Connection(stream, frame_read_timeout_s=self.frame_read_timeout_s),
            self.handlers,
            idle_timeout_s=self.idle_timeout_s,
            busy_poll=self.busy_poll,
            pending_limit=self.pending_limit,
            warnings=self.warnings,
        )
        self._channels.add(channel)
        log.debug("accepted connection from %s", channel.remote_addr)
        try:
            await channel.run()
        except Exception:
            log.exception("connection %s failed", channel.remote_addr)
        finally:
            self._channels.discard(channel)
            if self.on_close is not None:
                try:
                    self.on_close(channel)
                except Exception:
                    log.exception("close hook for %s failed", channel.remote_addr)

    async def _refuse_per_ip(self, stream: trio.SocketStream, ip: str) -> None:
        self.refused_per_ip += 1
        dropped = self.warnings.allow(PER_IP_CAP_WARNING)
        if dropped is not None:
            log.warning(
                "%s already holds %d connections, the most one address may "
                "(serverMaxConnectionsPerIp): closing its new one (%d refused so far)%s",
                ip,
                self._per_ip.get(ip, 0),
                self.refused_per_ip,
                suppressed_note(dropped),
            )
        await _close_at_once(stream)

    async def _refuse(self, stream: trio.SocketStream) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._refusal_logged >= OVER_CAP_LOG_INTERVAL_S:
            self._refusal_logged = now
            log.warning(
                "%d connections open (max_connections): closing new ones (%d so far)",
                len(self._channels),
                self.refused,
            )
        await _close_at_once(stream)


def _peer_ip(stream: trio.SocketStream) -> str | None:
    """The peer's IP address, or None when it is unknown (the peer already went away)."""
    addr = peer_address(stream)
    if addr == "?":
        return None
    return addr.rsplit(":", 1)[0]


async def _close_at_once(stream: trio.SocketStream) -> None:
    """Close a refused connection (shielded and bounded, so it works while cancelled)."""
    with trio.move_on_after(1) as scope:
        scope.shield = True
        await stream.aclose()
