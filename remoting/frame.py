"""Sans-IO frame codec: bytes in, :class:`RemotingCommand` out, and back (h11's idea).

Wire format, one frame per command::

    N u32 big-endian | N bytes: msgpack map (RemotingCommand.to_wire(); body is a msgpack bin)

Rules:

- ``N`` excludes the 4 length bytes and must not exceed the decoder's ``max_frame_size``
  (default :data:`MAX_FRAME_SIZE`, 16 MiB as RocketMQ's ``NettyDecoder``).
- :func:`encode_frame` raises :class:`LocalProtocolError` for a command we must not send.
- :class:`FrameDecoder` raises :class:`RemoteProtocolError` for anything the peer got wrong: a
  length prefix over the limit (as soon as its 4 bytes arrive), a payload that is not valid
  msgpack, not a map or not a valid command, EOF in the middle of a frame, data after EOF. After
  an error the decoder stays broken: every later call raises again; close the connection.
  A length prefix that is the start of a TLS record
  (:func:`~remoting.tls_config.looks_like_tls_record`) says so, as a
  :class:`~remoting.errors.PeerSpeaksTlsError`: the peer speaks TLS to a plaintext port, or
  the reverse (a TLS server's alert).
- This module knows nothing about sockets, tasks or time. The I/O shell loops
  ``next_command()`` -> ``None`` -> read some bytes -> ``receive_data()``.
"""

from __future__ import annotations

import struct
from typing import Final, NoReturn

import msgpack

from common.errors import caused_by
from remoting.command import RemotingCommand
from remoting.errors import LocalProtocolError, PeerSpeaksTlsError, RemoteProtocolError
from remoting.tls_config import looks_like_tls_record

MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
LENGTH_SIZE: Final = 4
_LENGTH: Final = struct.Struct(">I")


def encode_frame(cmd: RemotingCommand, *, max_frame_size: int = MAX_FRAME_SIZE) -> bytes:
    """Return the frame for ``cmd``; raise LocalProtocolError if invalid or over the limit."""
    try:
        payload: bytes = msgpack.packb(cmd.to_wire(), use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise caused_by(LocalProtocolError(f"cannot encode command: {exc}"), exc)
    if len(payload) > max_frame_size:
        raise LocalProtocolError(
            f"frame of {len(payload)} bytes exceeds the maximum of {max_frame_size}"
        )
    return _LENGTH.pack(len(payload)) + payload


TLS_RECORD_NOTE: Final = (
    " (these bytes are a TLS record: the peer speaks TLS and this end does not; check "
    "tls.server.mode / tls.enable on both ends)"
)


class FrameDecoder:
    """Turns a byte stream into commands; feed it with :meth:`receive_data`.

    The buffer is a ``bytearray`` trimmed with ``del buf[:n]`` after each frame; CPython
    removes a prefix of a bytearray by moving its start pointer, so decoding many frames from
    one chunk stays linear (h11's ``_receivebuffer.py`` relies on the same).
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        if not 0 < max_frame_size <= 0xFFFFFFFF:
            raise ValueError(f"max_frame_size must be in 1..2**32-1, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._eof = False
        self._error: str | None = None

    @property
    def at_eof(self) -> bool:
        """True once EOF was received and every complete frame has been taken."""
        return self._eof and not self._buf

    @property
    def buffered(self) -> int:
        """How many received bytes are not yet returned as commands."""
        return len(self._buf)

    @property
    def pending_frame_size(self) -> int | None:
        """Length prefix plus payload of the frame being received, once its 4 length bytes
        arrived (None before)."""
        if len(self._buf) < LENGTH_SIZE:
            return None
        (size,) = _LENGTH.unpack_from(self._buf)
        return int(LENGTH_SIZE + size)

    def receive_data(self, data: bytes) -> None:
        """Append bytes read from the peer; ``b""`` means the peer closed (EOF)."""
        self._check_error()
        if not data:
            self._eof = True
            return
        if self._eof:
            self._fail(f"received {len(data)} bytes after EOF")
        self._buf += data

    def next_command(self) -> RemotingCommand | None:
        """Return the next complete command, or None if more data is needed."""
        self._check_error()
        buf = self._buf
        if len(buf) < LENGTH_SIZE:
            if self._eof and buf:
                self._fail(f"EOF inside a frame's length prefix ({len(buf)} of 4 bytes)")
            return None
        (size,) = _LENGTH.unpack_from(buf)
        if size > self.max_frame_size:
            self._fail_oversized(size)
        end = LENGTH_SIZE + size
        if len(buf) < end:
            if self._eof:
                self._fail(f"EOF inside a frame ({len(buf) - LENGTH_SIZE} of {size} bytes)")
            return None
        payload = bytes(buf[LENGTH_SIZE:end])
        del buf[:end]
        return self._decode(payload)

    def _decode(self, payload: bytes) -> RemotingCommand:
        """Decode one frame payload into a command."""
        try:
            wire = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except msgpack.StackError:  # its message is empty
            self._fail("undecodable frame payload: nested too deeply")
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            self._fail(f"undecodable frame payload: {exc or type(exc).__name__}")
        try:
            return RemotingCommand.from_wire(wire)
        except RemoteProtocolError as exc:
            self._fail(str(exc))

    def _fail_oversized(self, size: int) -> NoReturn:
        """Fail on a length prefix over the limit; PeerSpeaksTlsError when it is really the
        header of a TLS record."""
        msg = f"frame of {size} bytes exceeds the maximum of {self.max_frame_size}"
        if looks_like_tls_record(bytes(self._buf[:2])):
            self._fail(msg + TLS_RECORD_NOTE, PeerSpeaksTlsError)
        self._fail(msg)

    def _fail(self, msg: str, kind: type[RemoteProtocolError] = RemoteProtocolError) -> NoReturn:
        """Remember the error (the stream cannot be resynchronised) and raise it."""
        self._error = msg
        raise kind(msg)

    def _check_error(self) -> None:
        """Raise again if an earlier call hit a protocol error."""
        if self._error is not None:
            raise RemoteProtocolError(f"decoder is broken by an earlier error: {self._error}")
