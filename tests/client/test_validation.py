"""Tests for client-side validation (client/validation.py)."""

from __future__ import annotations

import pytest

from client import Message, MessageInvalidError, MQClientError, validate_group, validate_message
from client.errors import MESSAGE_ILLEGAL, NO_PERMISSION, GroupInvalidError
from common.topic import NOT_ALLOWED_SEND_TOPICS


@pytest.mark.parametrize("topic", ["Orders", "a", "%RETRY%g", "a|b", "x-y_z", "T" * 127])
def test_valid_topics(topic: str) -> None:
    validate_message(Message(topic, b"x"))


@pytest.mark.parametrize("topic", ["", " ", "bad topic", "a/b", "T" * 128, "Tö", "a.b"])
def test_invalid_topics(topic: str) -> None:
    with pytest.raises(MessageInvalidError) as e:
        validate_message(Message(topic, b"x"))
    assert e.value.code == MESSAGE_ILLEGAL
    assert e.value.topic == topic


@pytest.mark.parametrize("topic", sorted(NOT_ALLOWED_SEND_TOPICS))
def test_system_topics_forbidden(topic: str) -> None:
    with pytest.raises(MessageInvalidError, match="forbidden") as e:
        validate_message(Message(topic, b"x"))
    assert e.value.code == NO_PERMISSION


def test_tbw102_and_retry_topics_allowed() -> None:
    validate_message(Message("TBW102", b"x"))


def test_body_rules() -> None:
    with pytest.raises(MessageInvalidError, match="length is zero"):
        validate_message(Message("T", b""))
    validate_message(Message("T", b"x" * 4 * 1024 * 1024))
    with pytest.raises(MessageInvalidError, match="over max"):
        validate_message(Message("T", b"x" * (4 * 1024 * 1024 + 1)))
    with pytest.raises(MessageInvalidError, match="over max"):
        validate_message(Message("T", b"xx"), max_message_size=1)


@pytest.mark.parametrize(
    "props",
    [{"a\x01": "v"}, {"a": "v\x02"}, {"a\x02b": "v"}, {"a": "\x01"}, {"": "v"}],
)
def test_properties_with_separators_rejected(props: dict[str, str]) -> None:
    with pytest.raises(MessageInvalidError, match="propert"):
        validate_message(Message("T", b"x", properties=props))


def test_tags_with_separator_rejected() -> None:
    with pytest.raises(MessageInvalidError):
        validate_message(Message("T", b"x", tags="a\x01b"))


def test_properties_too_long_rejected() -> None:
    with pytest.raises(MessageInvalidError, match="properties length"):
        validate_message(Message("T", b"x", properties={"k": "v" * 40000}))


@pytest.mark.parametrize("props", [{"a": 1}, {1: "v"}, {"a": "v", "b": None}])
def test_properties_must_map_str_to_str(props: dict[object, object]) -> None:
    with pytest.raises(MessageInvalidError, match="must map a str to a str"):
        validate_message(Message("T", b"x", properties=props))  # type: ignore[arg-type]


def test_properties_length_counts_encoded_bytes() -> None:
    """``k\x01<value>\x02``: 3 bytes plus the value's UTF-8, two bytes per "é"."""
    validate_message(Message("T", b"x", properties={"k": "é" * 16382}))  # 32,767 bytes
    with pytest.raises(MessageInvalidError, match="properties length 32769"):
        validate_message(Message("T", b"x", properties={"k": "é" * 16383}))


def test_errors_are_client_errors() -> None:
    assert issubclass(MessageInvalidError, MQClientError)
    assert issubclass(GroupInvalidError, MQClientError)


@pytest.mark.parametrize("group", ["pg", "CID_RMQ_SYS_TRANS", "g" * 120, "a%b|c-d_e"])
def test_valid_groups(group: str) -> None:
    validate_group(group)


@pytest.mark.parametrize("group", ["", "  ", "g" * 121, "bad group", "g/h"])
def test_invalid_groups(group: str) -> None:
    with pytest.raises(GroupInvalidError) as e:
        validate_group(group)
    assert e.value.group == group
