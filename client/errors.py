"""Client-side errors (RocketMQ's ``MQClientException``), with their fields kept as data."""

from __future__ import annotations

from typing import Final

MESSAGE_ILLEGAL: Final = 13
"""RocketMQ's ``ResponseCode.MESSAGE_ILLEGAL``, used by ``Validators`` for bad messages."""
NO_PERMISSION: Final = 16
"""RocketMQ's ``ResponseCode.NO_PERMISSION``, used for sends to reserved system topics."""
TOPIC_NOT_EXIST: Final = 17
"""RocketMQ's ``ResponseCode.TOPIC_NOT_EXIST``."""
CLIENT_ERROR: Final = -1
"""The code of an ``MQClientException`` built without a response code."""


class MQClientError(Exception):
    """Base of every client error: ``code`` (RocketMQ response code) and a readable ``reason``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"CODE: {code}  DESC: {reason}")
        self.code = code
        self.reason = reason


class MessageInvalidError(MQClientError):
    """A message that must not be sent: ``topic`` and ``reason`` say which and why."""

    def __init__(self, topic: str, reason: str, code: int = MESSAGE_ILLEGAL) -> None:
        super().__init__(code, reason)
        self.topic = topic


class GroupInvalidError(MQClientError):
    """A producer or consumer group name that breaks RocketMQ's naming rule."""

    def __init__(self, group: str, reason: str) -> None:
        super().__init__(CLIENT_ERROR, reason)
        self.group = group


class MQBrokerError(MQClientError):
    """A broker (or name server) answered a request with an error ``code`` (RocketMQ's
    ``MQBrokerException``); ``addr`` is who answered."""

    def __init__(self, code: int, reason: str, addr: str = "") -> None:
        super().__init__(code, reason)
        self.addr = addr


class TopicRouteError(MQClientError):
    """No name server knows a route for ``topic`` (``No route info of this topic``)."""

    def __init__(self, topic: str, reason: str = "") -> None:
        super().__init__(TOPIC_NOT_EXIST, reason or f"No route info of this topic: {topic}")
        self.topic = topic


class BrokerNotFoundError(MQClientError):
    """No master address is known for ``broker_name``, even after asking for the route again
    (RocketMQ's ``The broker[...] not exist``). A send retries it on another broker."""

    def __init__(self, broker_name: str, code: int) -> None:
        super().__init__(code, f"The broker[{broker_name}] not exist")
        self.broker_name = broker_name


class RequestTimeoutError(MQClientError, TimeoutError):
    """A call did not finish within its timeout (``what`` says which call; with
    ``complete``, ``what`` is the whole message and already says how long)."""

    def __init__(self, what: str, timeout_s: float, *, complete: bool = False) -> None:
        message = what if complete else f"{what} timed out after {timeout_s:.4g} s"
        super().__init__(CLIENT_ERROR, message)
        self.timeout_s = timeout_s


class ClientClosedError(MQClientError):
    """The producer, consumer or client instance is not started or already closed."""

    def __init__(self, what: str) -> None:
        super().__init__(CLIENT_ERROR, f"{what} is not running")


class RemotingFailedError(MQClientError):
    """A request to ``addr`` failed in the transport: refused, reset or closed connection."""

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(CLIENT_ERROR, f"request to {addr} failed: {reason}")
        self.addr = addr
