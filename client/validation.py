"""Checks a producer runs before any network call (RocketMQ's ``Validators``).

- Topic and group names follow :mod:`common.topic` (RocketMQ's ``TopicValidator``), and clients
  may not send to its reserved system topics.
- The body is non-empty and at most ``max_message_size`` bytes (4 MiB by default).
- Property names and values must not contain ``\\x01`` or ``\\x02``: they are the separators of
  the encoded properties and would corrupt the record. Names must not be empty, and both must
  be encodable as UTF-8 (no lone surrogates).
- The encoded properties fit the broker's 32767 bytes with the ``UNIQ_KEY`` the producer adds
  to a message that has none.

The checks read a message's fields as untyped values (:func:`_fields`): they exist for the
message whose fields are not what :class:`Message` declares, and the compiled build would
otherwise coerce (``True`` to ``1``) or refuse such a field with its own TypeError before the
check could name it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NoReturn, cast

from client.errors import NO_PERMISSION, GroupInvalidError, MessageInvalidError
from client.message import Message
from common.errors import caused_by
from common.message import MessageConst
from common.record import (
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    plain_properties_fit,
)
from common.topic import group_problem, is_not_allowed_send_topic, topic_problem

MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024
_BYTES: Final = {bytes}
_INT: Final = {int}
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1
UNIQ_KEY_RESERVE: Final = len(MessageConst.UNIQ_KEY) + 32 + 2
"""Encoded bytes of the ``UNIQ_KEY`` property (32 hex digits) the producer adds."""


def validate_topic(topic: object) -> None:
    """Raise :class:`MessageInvalidError` unless ``topic`` is a name that may be sent to."""
    problem = topic_problem(topic)
    if problem is not None or not isinstance(topic, str):
        raise MessageInvalidError(str(topic), problem or "the topic name is blank")
    if is_not_allowed_send_topic(topic):
        raise MessageInvalidError(
            topic, f"Sending message to topic[{topic}] is forbidden.", code=NO_PERMISSION
        )


def validate_group(group: object) -> None:
    """Raise :class:`GroupInvalidError` unless ``group`` is a valid group name."""
    problem = group_problem(group)
    if problem is not None:
        raise GroupInvalidError(str(group), problem)


def _bad_chars(text: str) -> bool:
    return NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text


def _fields(msg: Message) -> Any:
    """``msg`` as an untyped object: its fields are read as they are, whatever their type."""
    return cast(Any, msg)


def validate_message(msg: Message, max_message_size: int = MAX_MESSAGE_SIZE) -> None:
    """Raise :class:`MessageInvalidError` if ``msg`` must not be sent."""
    if msg is None:
        raise MessageInvalidError("", "the message is null")
    validate_topic(_fields(msg).topic)
    validate_message_content(msg, max_message_size)


def validate_message_content(msg: Message, max_message_size: int = MAX_MESSAGE_SIZE) -> None:
    """:func:`validate_message` without the topic (a batch checks its one topic once)."""
    fields = _fields(msg)
    topic = fields.topic
    body = fields.body
    if not isinstance(body, bytes | bytearray | memoryview):
        raise MessageInvalidError(topic, "the message body must be bytes")
    if len(body) == 0:
        raise MessageInvalidError(topic, "the message body length is zero")
    if len(body) > max_message_size:
        raise MessageInvalidError(
            topic, f"the message body size over max value, MAX: {max_message_size}"
        )
    flag = fields.flag
    if type(flag) is not int or not _INT_MIN <= flag <= _INT_MAX:
        raise MessageInvalidError(topic, f"the message flag must be a 32-bit int, got {flag!r}")
    props = fields.properties
    try:  # every name and every value joined once: a C-level type and separator check
        names = "".join(props)
        values = "".join(props.values())
    except TypeError:
        names = values = PROPERTY_SEPARATOR  # walk them below to name the bad one
    if _bad_chars(names) or _bad_chars(values) or "" in props:
        _raise_for_property(topic, props)
    if names.isascii() and values.isascii():
        props_len = len(names) + len(values) + 2 * len(props)
    else:
        props_len = _utf8_len(topic, names) + _utf8_len(topic, values) + 2 * len(props)
    if MessageConst.UNIQ_KEY not in props:
        props_len += UNIQ_KEY_RESERVE
    if props_len > MAX_PROPERTIES_LENGTH:
        raise MessageInvalidError(
            topic, f"the message properties length {props_len} exceeds {MAX_PROPERTIES_LENGTH}"
        )


def _utf8_len(topic: str, text: str) -> int:
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise caused_by(
            MessageInvalidError(
                topic, f"a property holds {bad!r}, which is not valid UTF-8 (a lone surrogate)"
            ),
            None,
        )


def validate_batch_contents(
    messages: Sequence[Message], max_message_size: int = MAX_MESSAGE_SIZE
) -> None:
    """:func:`validate_message_content` for every message of a batch.

    Plainly legal batches (bytes bodies, ASCII properties whose total fits one message's
    limit) are checked with a few C-level passes over all messages; anything else is checked
    message by message, so the error names what is wrong.
    """
    if not _plainly_legal(messages, max_message_size):
        for msg in messages:
            validate_message_content(msg, max_message_size)


def _plainly_legal(messages: Sequence[Message], max_message_size: int) -> bool:
    rows: list[Any] = list(messages)
    bodies = [m.body for m in rows]
    if set(map(type, bodies)) != _BYTES:
        return False
    sizes = list(map(len, bodies))
    if min(sizes) == 0 or max(sizes) > max_message_size:
        return False
    flags = [m.flag for m in rows]
    if set(map(type, flags)) != _INT or min(flags) < _INT_MIN or max(flags) > _INT_MAX:
        return False
    return plain_properties_fit([m.properties for m in rows], UNIQ_KEY_RESERVE)


def _raise_for_property(topic: str, props: dict[object, object]) -> NoReturn:
    """Raise for the first property that is not a non-empty separator-free str to a str."""
    for name, value in props.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise MessageInvalidError(topic, f"property {name!r} must map a str to a str")
        if not name:
            raise MessageInvalidError(topic, "a property name is empty")
        if _bad_chars(name) or _bad_chars(value):
            raise MessageInvalidError(
                topic, f"property {name!r} contains the reserved separator \\x01 or \\x02"
            )
    raise AssertionError(f"no illegal property in {props!r}")  # the caller saw one
