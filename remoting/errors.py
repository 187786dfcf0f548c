"""Exceptions of the remoting layer (RocketMQ's ``remoting/exception`` classes plus h11's split).

Rules:

- :class:`RemotingError` is the base of everything raised here.
- :class:`ProtocolError` is abstract: raise :class:`LocalProtocolError` when *we* were about to
  put something invalid on the wire (a frame too large, a header of the wrong type), and
  :class:`RemoteProtocolError` when the *peer* sent bytes we cannot accept. A connection that saw
  a protocol error must be closed; the byte stream cannot be resynchronised.
- The I/O errors carry the address (and timeout) as attributes so callers need not parse messages.
"""

from __future__ import annotations


class RemotingError(Exception):
    """Base of every remoting exception."""


class ProtocolError(RemotingError):
    """The frame stream broke the protocol; abstract, raise a subclass."""

    def __init__(self, msg: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError(
                "ProtocolError is abstract; raise LocalProtocolError or RemoteProtocolError"
            )
        super().__init__(msg)


class LocalProtocolError(ProtocolError):
    """We were about to send something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""


class PeerSpeaksTlsError(RemoteProtocolError):
    """The peer sent a TLS record where a plaintext frame was expected: it speaks TLS and
    this end does not (a TLS server's alert to a plaintext client, a TLS client's hello to a
    plaintext server)."""


class RemotingConnectError(RemotingError):
    """A connection to ``addr`` could not be opened (RocketMQ's ``RemotingConnectException``)."""

    def __init__(self, addr: str) -> None:
        super().__init__(f"connect to {addr} failed")
        self.addr = addr


class RemotingTimeoutError(RemotingError):
    """No response from ``addr`` within ``timeout`` seconds (``RemotingTimeoutException``)."""

    def __init__(self, addr: str, timeout: float) -> None:
        super().__init__(f"wait response on channel <{addr}> timeout, {timeout} s")
        self.addr = addr
        self.timeout = timeout


class RemotingSendRequestError(RemotingError):
    """A request could not be written to ``addr`` (``RemotingSendRequestException``)."""

    def __init__(self, addr: str) -> None:
        super().__init__(f"send request to <{addr}> failed")
        self.addr = addr
