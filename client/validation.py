"""Checks a producer runs before any network call (RocketMQ's ``Validators``).

- Topic and group names match ``^[%|a-zA-Z0-9_-]+$``; a topic has at most 127 chars, a group at
  most 120.
- Clients may not send to the reserved system topics in :data:`NOT_ALLOWED_SEND_TOPICS`.
- The body is non-empty and at most ``max_message_size`` bytes (4 MiB by default).
- Property names and values must not contain ``\\x01`` or ``\\x02``: they are the separators of
  the encoded properties and would corrupt the record. Names must not be empty.
"""

from __future__ import annotations

import re
from typing import Final

from client.errors import NO_PERMISSION, GroupInvalidError, MessageInvalidError
from client.message import Message
from common.record import MAX_PROPERTIES_LENGTH, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

VALID_NAME: Final = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 120
MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024

NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
"""RocketMQ's ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``."""


def topic_problem(topic: object) -> str | None:
    """Why ``topic`` is not a valid topic name, or None when it is."""
    if not isinstance(topic, str) or not topic.strip():
        return "the specified topic is blank"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the specified topic is longer than topic max length {TOPIC_MAX_LENGTH}"
    if not VALID_NAME.fullmatch(topic):
        return (
            f"the specified topic [{topic}] contains illegal characters, "
            f"allowing only {VALID_NAME.pattern}"
        )
    return None


def validate_topic(topic: str) -> None:
    """Raise :class:`MessageInvalidError` unless ``topic`` may be sent to."""
    problem = topic_problem(topic)
    if problem is not None:
        raise MessageInvalidError(str(topic), problem)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise MessageInvalidError(
            topic, f"Sending message to topic[{topic}] is forbidden.", code=NO_PERMISSION
        )


def validate_group(group: str) -> None:
    """Raise :class:`GroupInvalidError` unless ``group`` is a valid group name."""
    if not isinstance(group, str) or not group.strip():
        raise GroupInvalidError(str(group), "the specified group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise GroupInvalidError(
            group, f"the specified group is longer than group max length {GROUP_MAX_LENGTH}."
        )
    if not VALID_NAME.fullmatch(group):
        raise GroupInvalidError(
            group,
            f"the specified group[{group}] contains illegal characters, "
            f"allowing only {VALID_NAME.pattern}",
        )


def _bad_chars(text: str) -> bool:
    return NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text


def validate_message(msg: Message, max_message_size: int = MAX_MESSAGE_SIZE) -> None:
    """Raise :class:`MessageInvalidError` if ``msg`` must not be sent."""
    if msg is None:
        raise MessageInvalidError("", "the message is null")
    validate_topic(msg.topic)
    topic = msg.topic
    if not isinstance(msg.body, bytes | bytearray | memoryview):
        raise MessageInvalidError(topic, "the message body must be bytes")
    if len(msg.body) == 0:
        raise MessageInvalidError(topic, "the message body length is zero")
    if len(msg.body) > max_message_size:
        raise MessageInvalidError(
            topic, f"the message body size over max value, MAX: {max_message_size}"
        )
    props_len = 0
    for name, value in msg.properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise MessageInvalidError(topic, f"property {name!r} must map a str to a str")
        if not name:
            raise MessageInvalidError(topic, "a property name is empty")
        if _bad_chars(name) or _bad_chars(value):
            raise MessageInvalidError(
                topic, f"property {name!r} contains the reserved separator \\x01 or \\x02"
            )
        props_len += len(name.encode()) + len(value.encode()) + 2
    if props_len > MAX_PROPERTIES_LENGTH:
        raise MessageInvalidError(
            topic, f"the message properties length {props_len} exceeds {MAX_PROPERTIES_LENGTH}"
        )
