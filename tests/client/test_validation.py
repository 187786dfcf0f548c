"""Tests for client-side validation (client/validation.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client import Message, MessageInvalidError, MQClientError, validate_group, validate_message
from client.errors import MESSAGE_ILLEGAL, NO_PERMISSION, GroupInvalidError
from client.validation import validate_batch_contents, validate_message_content
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


def test_flag_is_a_java_int() -> None:
    validate_message(Message("T", b"x", flag=2**31 - 1))
    validate_message(Message("T", b"x", flag=-(2**31)))
    for bad in (2**31, -(2**31) - 1, True, "1"):
        with pytest.raises(MessageInvalidError, match="flag must be a 32-bit int"):
            validate_message(Message("T", b"x", flag=bad))  # type: ignore[arg-type]


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
    """``k\x01<value>\x02``: 3 bytes plus the value's UTF-8, two bytes per "é"; and the 42
    bytes of the UNIQ_KEY the producer adds to a message without one."""
    uniq = {"UNIQ_KEY": "0" * 32}
    validate_message(Message("T", b"x", properties={**uniq, "k": "é" * (16382 - 21)}))
    with pytest.raises(MessageInvalidError, match="properties length 32769"):
        validate_message(Message("T", b"x", properties={**uniq, "k": "é" * (16383 - 21)}))
    validate_message(Message("T", b"x", properties={"k": "é" * (16382 - 21)}))
    with pytest.raises(MessageInvalidError, match="properties length 32769"):
        validate_message(Message("T", b"x", properties={"k": "é" * (16383 - 21)}))


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


_TEXT = st.one_of(st.text("ab", max_size=3), st.text("ab\x01\x02é", max_size=3))
_BATCH_MESSAGE = st.builds(
    lambda body, props, flag: Message("T", body, flag=flag, properties=props),
    st.one_of(
        st.just(b"x"),
        st.binary(max_size=3),
        st.builds(bytearray, st.binary(min_size=1, max_size=2)),
    ),
    st.one_of(
        st.dictionaries(_TEXT, _TEXT, max_size=3),
        st.dictionaries(_TEXT, st.integers(), min_size=1, max_size=1),
        st.sampled_from([{"k": "v" * 20_000}, {"k": "v" * 33_000}, {"k": "é" * 16_383}]),
    ),
    st.sampled_from([0, 0, 0, 7, -1, 2**31 - 1, 2**31, -(2**31) - 1, True]),
)


def _outcome(check: Callable[[], None]) -> str | None:
    try:
        check()
    except MessageInvalidError as exc:
        return str(exc)
    return None


@settings(max_examples=400)
@given(st.lists(_BATCH_MESSAGE, min_size=1, max_size=4))
def test_a_batch_is_accepted_exactly_as_its_messages_one_by_one(messages: list[Message]) -> None:
    """The bulk check says what the message-by-message check says, error text included."""

    def one_by_one() -> None:
        for m in messages:
            validate_message_content(m, max_message_size=2)

    expected = _outcome(one_by_one)
    assert _outcome(lambda: validate_batch_contents(messages, max_message_size=2)) == expected
