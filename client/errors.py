"""Client-side errors (RocketMQ's ``MQClientException``), with their fields kept as data."""

from __future__ import annotations

from typing import Final

MESSAGE_ILLEGAL: Final = 13
"""RocketMQ's ``ResponseCode.MESSAGE_ILLEGAL``, used by ``Validators`` for bad messages."""
NO_PERMISSION: Final = 16
"""RocketMQ's ``ResponseCode.NO_PERMISSION``, used for sends to reserved system topics."""
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
