"""Everything that crosses a socket between minimq processes (RocketMQ's ``remoting`` module).

This package holds the pure core: codes, the command, the sans-IO frame codec and the errors.
It imports only ``common``-level code and msgpack; never trio, ``store``, ``broker`` or
``client``.
"""

from remoting.codes import LanguageCode, RequestCode, ResponseCode
from remoting.command import RPC_ONEWAY, RPC_TYPE, ExtValue, RemotingCommand
from remoting.errors import (
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from remoting.frame import MAX_FRAME_SIZE, FrameDecoder, encode_frame

__all__ = [
    "MAX_FRAME_SIZE",
    "RPC_ONEWAY",
    "RPC_TYPE",
    "ExtValue",
    "FrameDecoder",
    "LanguageCode",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingError",
    "RemotingSendRequestError",
    "RemotingTimeoutError",
    "RequestCode",
    "ResponseCode",
    "encode_frame",
]
