"""The I/O shell around the sans-IO codec: one trio byte stream carrying frames.

Rules:

- This is the only module that calls ``receive_some``/``send_all`` for remoting frames. It loops
  ``next_command()`` -> ``None`` -> ``receive_some()`` -> ``receive_data()`` (h11's
  ``TrioHTTPWrapper``).
- :meth:`Connection.send` encodes first (so a :class:`LocalProtocolError` leaves the stream
  untouched) and then writes the whole frame while holding the connection's send gate, so
  concurrent senders never interleave bytes (trio-websocket's ``_send``). The gate is a FIFO
  mutex like ``trio.Lock`` but not owned by a task, so a frame begun outside any task (a
  deferred reply answered from an event-loop callback: :meth:`Connection.send_now`) can be
  finished by a task (:meth:`Connection.send_rest`).
- A frame, once its first byte is written, is always written whole: the caller's cancellation
  is honoured before the write starts (while waiting for the lock, say) but the write itself is
  shielded, bounded by ``SEND_TIMEOUT_S`` or the caller's own deadline
  (``trio.current_effective_deadline()``), whichever comes first. So cancelling one caller (a
  consumer seeking) never breaks the connection that other callers share, and a caller's
  deadline is kept even against a peer that stopped reading. A write that fails or runs out of
  time may have left half a frame; the stream is then closed, because the peer can no longer
  find frame boundaries, and :class:`RemotingSendRequestError` is raised.
- Fast path (socket streams only): a send first tries one non-blocking ``send`` on a duplicate of
  the socket's descriptor and a receive first tries one non-blocking ``recv``. Only when the
  kernel would block does a send go through trio's ``send_all``, and a receive wait for the
  duplicate to become readable (``trio.lowlevel.wait_readable``; closing calls
  ``notify_closing`` first, which wakes it with ``ClosedResourceError``). A request/response
  round trip then passes through trio's scheduler only where it must wait, which halves its
  latency. After a read that took less than it asked for (the kernel had nothing more), the
  next receive waits first instead of trying a ``recv`` that would most likely fail.
  Cancellation is still checked on every call, and a receive that never had to wait yields to
  the scheduler every ``FAIR_RECEIVES`` calls so a flooding peer cannot starve other tasks.
  Any other stream (a :class:`trio.SSLStream` when TLS is on, :mod:`remoting.tls`) takes the
  generic path: every send is ``send_all`` under the send gate (shielded and bounded as above)
  and every receive is ``receive_some``; the frame-read deadline applies the same way.
- :meth:`Connection.receive` returns ``None`` on a clean EOF and raises
  :class:`RemoteProtocolError` for bytes the peer got wrong (the connection must then be closed),
  :class:`trio.BrokenResourceError` when the transport broke and
  :class:`trio.ClosedResourceError` once we closed it.
- Frame-read deadline (servers: ``frame_read_timeout_s``): once part of a frame has arrived and
  the receive must wait for the rest, the rest must come within ``frame_read_timeout_s``, else
  :class:`FrameReadTimeoutError` (a :class:`RemoteProtocolError`: close the connection). So a
  peer dribbling a frame a byte at a time (slowloris) cannot hold a connection, its slot under
  the server's connection cap and up to a frame's worth of buffer. The deadline is a cancel
  scope armed only while a frame is incomplete: a frame that arrives whole in one read (the
  hot path) costs one check of the decoder's buffer, no scope and no timer.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
from typing import Final, Literal

import trio

from common.errors import caused_by
from remoting.command import RemotingCommand
from remoting.errors import RemoteProtocolError, RemotingSendRequestError
from remoting.frame import MAX_FRAME_SIZE, FrameDecoder, encode_frame

log = logging.getLogger(__name__)

RECEIVE_SIZE: Final = 64 * 1024
CLOSE_TIMEOUT_S: Final = 1.0
SEND_TIMEOUT_S: Final = 5.0
"""Upper bound of writing one frame; a peer that reads nothing for this long is cut off."""
FAIR_RECEIVES: Final = 32
"""A receive that found data at once yields to the scheduler every this many calls."""
_WOULD_BLOCK: Final = (BlockingIOError, InterruptedError)


class FrameReadTimeoutError(RemoteProtocolError):
    """Part of a frame arrived but not the rest within the frame-read deadline."""

    def __init__(self, timeout_s: float, received: int, size: int | None) -> None:
        whole = f" of {size}" if size is not None else ""
        super().__init__(
            f"frame still incomplete {timeout_s:g} s after its first bytes arrived "
            f"({received}{whole} bytes received)"
        )
        self.timeout_s = timeout_s


def _raw_socket(stream: trio.abc.Stream) -> socket.socket | None:
    """A non-blocking stdlib socket on a duplicate of the stream's descriptor, if it has one."""
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        raw = socket.socket(fileno=os.dup(stream.socket.fileno()))
    except OSError:
        return None
    raw.setblocking(False)
    return raw


def peer_address(stream: trio.abc.Stream) -> str:
    """Return ``"host:port"`` of the peer of a socket stream (or of a TLS stream over one), or
    ``"?"`` if it is unknown."""
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if isinstance(stream, trio.SocketStream):
        try:
            peer = stream.socket.getpeername()
        except OSError:
            return "?"
        if isinstance(peer, tuple) and len(peer) >= 2:
            return f"{peer[0]}:{peer[1]}"
        return str(peer)
    return "?"


class _SendGate:
    """A FIFO mutex for writing frames (``trio.Lock`` without an owning task; see the module).

    ``held`` is taken by setting it when it is False; :meth:`wait_turn` waits for a
    :meth:`release` to hand it over (it stays held meanwhile, so nobody can slip in).
    """

    __slots__ = ("_lot", "held")

    def __init__(self) -> None:
        self.held = False
        self._lot = trio.lowlevel.ParkingLot()

    async def wait_turn(self) -> None:
        """Wait until a release hands the gate to us (call only while it is held)."""
        await self._lot.park()

    def release(self) -> None:
        """Hand the gate to the next waiter, or open it."""
        if self._lot:
            self._lot.unpark()
        else:
            self.held = False


class Connection:
    """Frames over a :class:`trio.abc.Stream`: ``send`` a command, ``receive`` the next one."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        remote_addr: str | None = None,
        *,
        max_frame_size: int = MAX_FRAME_SIZE,
        frame_read_timeout_s: float = math.inf,
    ) -> None:
        self.stream = stream
        self.frame_read_timeout_s = frame_read_timeout_s if frame_read_timeout_s > 0 else math.inf
        """How long the rest of a begun frame may take to arrive (see the module rules)."""
        self.remote_addr = remote_addr if remote_addr is not None else peer_address(stream)
        self.max_frame_size = max_frame_size
        self._decoder = FrameDecoder(max_frame_size)
        self._gate = _SendGate()
        self._closed = False
        self._raw = _raw_socket(stream)
        self._receives_without_yield = 0
        self._drained = False

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran (or a broken send closed the stream)."""
        return self._closed

    async def send(
        self,
        cmd: RemotingCommand,
        *,
        start_by: float = math.inf,
        finish_by: float = math.inf,
        cancellable: bool = True,
    ) -> None:
        """Write ``cmd`` as one frame; raise RemotingSendRequestError if the stream fails.

        Raises :class:`trio.TooSlowError` (nothing written) if other senders hold the stream
        until ``start_by`` (trio time). A write still unfinished at ``finish_by`` or the
        caller's deadline closes the stream (see the module rules). With ``cancellable``
        False the frame is written even if the caller was cancelled (a response to a request
        whose handler ran): no cancellation point, at no cost on the uncontended path.
        """
        frame = encode_frame(cmd, max_frame_size=self.max_frame_size)
        gate = self._gate
        if gate.held:
            with trio.CancelScope(deadline=start_by, shield=not cancellable) as waiting:
                await gate.wait_turn()
            if waiting.cancelled_caught:
                raise caused_by(trio.TooSlowError(), None)
        else:
            gate.held = True  # uncontended: no trip through the scheduler
        try:
            if self._closed:
                raise RemotingSendRequestError(self.remote_addr)
            if cancellable:
                await trio.lowlevel.checkpoint_if_cancelled()  # last point to give up cleanly
                # (not cancelled here, so this is the scopes' earliest deadline, not -inf)
                finish_by = min(finish_by, trio.current_effective_deadline())
            sent = self._send_now(frame)
            if sent < len(frame):
                await self._send_rest(memoryview(frame)[sent:], finish_by)
        finally:
            gate.release()

    def send_now(self, cmd: RemotingCommand) -> memoryview | Literal[False] | None:
        """Write ``cmd`` as one frame without waiting, from anywhere (no task needed).

        Returns None when the kernel took the whole frame; False when nothing was written
        because another sender holds the connection (send it with :meth:`send` instead);
        otherwise the part of the frame not yet written, with the connection held for it:
        pass it to :meth:`send_rest` (in a task), which finishes the frame and lets the next
        sender in. Raises :class:`RemotingSendRequestError` once the connection is closed and
        :class:`LocalProtocolError` for a command that cannot be encoded (nothing written).
        """
        if self._closed:
            raise RemotingSendRequestError(self.remote_addr)
        frame = encode_frame(cmd, max_frame_size=self.max_frame_size)
        gate = self._gate
        if gate.held:
            return False
        gate.held = True
        sent = self._send_now(frame)
        if sent == len(frame):
            gate.release()
            return None
        return memoryview(frame)[sent:]

    async def send_rest(self, rest: memoryview) -> None:
        """Finish the frame :meth:`send_now` began (bounded as :meth:`send` is, not
        cancellable) and let the next sender in; raise RemotingSendRequestError if it fails."""
        try:
            await self._send_rest(rest, math.inf)
        finally:
            self._gate.release()

    def _send_now(self, frame: bytes) -> int:
        """Bytes of ``frame`` the kernel took at once (0 without the fast path)."""
        if self._raw is None:
            return 0
        try:
            return self._raw.send(frame)
        except _WOULD_BLOCK:
            return 0
        except OSError:
            return 0  # let trio's send_all meet the error and report it its way

    async def _send_rest(self, rest: memoryview, finish_by: float) -> None:
        left = finish_by - trio.current_time()
        try:
            with trio.move_on_after(max(0.0, min(SEND_TIMEOUT_S, left)), shield=True) as scope:
                await self.stream.send_all(rest)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            await self.aclose()
            raise caused_by(RemotingSendRequestError(self.remote_addr), exc)
        except BaseException:
            await self.aclose()  # half a frame may be on the wire
            raise
        if scope.cancelled_caught:
            await self.aclose()
            await trio.lowlevel.checkpoint_if_cancelled()  # the caller's deadline ran out
            raise RemotingSendRequestError(self.remote_addr)

    async def receive(self) -> RemotingCommand | None:
        """Return the next command from the peer, or None on a clean EOF; raise
        :class:`FrameReadTimeoutError` if a begun frame does not complete in time."""
        decoder = self._decoder
        while True:
            cmd = decoder.next_command()
            if cmd is not None:
                return cmd
            if decoder.at_eof:
                return None
            if decoder.buffered and self.frame_read_timeout_s != math.inf:
                return await self._receive_rest_of_frame()
            data = await self._receive_data()
            decoder.receive_data(bytes(data))

    async def _receive_rest_of_frame(self) -> RemotingCommand | None:
        """Finish the frame the decoder holds part of, within ``frame_read_timeout_s``."""
        decoder = self._decoder
        timeout = self.frame_read_timeout_s
        with trio.move_on_after(timeout):
            while True:
                data = await self._receive_data()
                decoder.receive_data(bytes(data))
                cmd = decoder.next_command()
                if cmd is not None or decoder.at_eof:
                    return cmd
        raise FrameReadTimeoutError(timeout, decoder.buffered, decoder.pending_frame_size)

    async def _receive_data(self) -> bytes | bytearray:
        """The next bytes from the peer (b"" on EOF): at once if the kernel has them."""
        await trio.lowlevel.checkpoint_if_cancelled()
        raw = self._raw
        if raw is None:
            return await self.stream.receive_some(RECEIVE_SIZE)
        if self._drained:
            # the last read took less than it asked for, so the kernel had no more: a recv now
            # would most likely be a wasted syscall; wait first (epoll still reports at once
            # whatever came in meanwhile)
            self._drained = False
            self._receives_without_yield = 0
            await trio.lowlevel.wait_readable(raw)
        elif self._receives_without_yield >= FAIR_RECEIVES:
            self._receives_without_yield = 0
            await trio.lowlevel.cancel_shielded_checkpoint()
        while True:
            try:
                data = raw.recv(RECEIVE_SIZE)
            except _WOULD_BLOCK:
                pass
            except OSError as exc:
                if exc.errno == errno.EBADF or self._closed:
                    raise caused_by(trio.ClosedResourceError(), exc)
                raise caused_by(trio.BrokenResourceError(), exc)
            else:
                self._receives_without_yield += 1
                self._drained = len(data) < RECEIVE_SIZE
                return data
            # wait on our own descriptor: trio's receive_some would try recv once more first
            self._receives_without_yield = 0
            await trio.lowlevel.wait_readable(raw)

    async def aclose(self) -> None:
        """Close the stream (idempotent, shielded and bounded so it works while cancelled)."""
        if self._closed:
            return
        self._closed = True
        if self._raw is not None:
            trio.lowlevel.notify_closing(self._raw)  # wakes a receive waiting on it
            self._raw.close()  # only the duplicate descriptor; the stream closes its own
        with trio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            await self.stream.aclose()
