"""Topic attributes: RocketMQ's AttributeParser / AttributeUtil rules, and TopicConfig's wire."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.route import TopicConfig
from common.topic_attributes import (
    QUEUE_TYPE,
    CQType,
    TopicAttributeError,
    add_modification,
    alter_current_attributes,
    parse_to_map,
    parse_to_string,
    queue_type_of,
)

BATCH = {QUEUE_TYPE: "BatchCQ"}
SIMPLE = {QUEUE_TYPE: "SimpleCQ"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        (None, {}),
        ("+queue.type=BatchCQ", {"+queue.type": "BatchCQ"}),
        ("+a=b,+c=d,-e", {"+a": "b", "+c": "d", "-e": ""}),
        ("-queue.type", {"-queue.type": ""}),
    ],
)
def test_parse_to_map(text: str | None, expected: dict[str, str]) -> None:
    assert parse_to_map(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "queue.type=BatchCQ",  # no sign
        "-queue.type=BatchCQ",  # a value with a delete
        "+queue.type",  # an add without a value
        "+queue.type=",  # empty value
        "+a=b=c",
        "+a=b,+a=c",  # duplicated
        "+a=b,,+c=d",  # an empty element
    ],
)
def test_parse_to_map_refuses_malformed(text: str) -> None:
    with pytest.raises(TopicAttributeError):
        parse_to_map(text)


_keys = st.text("abcdefghij.", min_size=1, max_size=8)
_values = st.text("abcdefghijXYZ0123", min_size=1, max_size=8)


@given(st.dictionaries(_keys, st.one_of(st.none(), _values), max_size=5))
def test_parse_to_string_round_trips(changes: dict[str, str | None]) -> None:
    modification = {("-" + k if v is None else "+" + k): (v or "") for k, v in changes.items()}
    assert parse_to_map(parse_to_string(modification)) == modification


@pytest.mark.parametrize(
    ("create", "current", "text", "expected"),
    [
        (True, {}, "+queue.type=BatchCQ", BATCH),
        (True, {}, "+queue.type=SimpleCQ", SIMPLE),
        (True, {}, "", {}),
        (False, BATCH, "", BATCH),  # an update without -a keeps them
        (False, BATCH, "+queue.type=BatchCQ", BATCH),  # no change: accepted (minimq)
        (False, {}, "+queue.type=SimpleCQ", SIMPLE),  # the default: no change either
    ],
)
def test_alter_current_attributes(
    create: bool, current: dict[str, str], text: str, expected: dict[str, str]
) -> None:
    assert alter_current_attributes(create, current, parse_to_map(text)) == expected


@pytest.mark.parametrize(
    ("create", "current", "text", "reason"),
    [
        (False, {}, "+queue.type=BatchCQ", "unchangeable attribute"),
        (False, BATCH, "+queue.type=SimpleCQ", "unchangeable attribute"),
        (False, BATCH, "-queue.type", "unchangeable attribute"),
        (False, {}, "-queue.type", "nonexistent key"),
        (True, {}, "-queue.type", "only add attribute"),
        (True, {}, "+queue.type=FastCQ", "not in set"),
        (True, {}, "+cleanup.policy=DELETE", "unsupported key: cleanup.policy"),
        (True, {}, "+message.type=NORMAL", "unsupported key"),
        (False, {}, "+=x", "format wrong"),
    ],
)
def test_alter_current_attributes_refusals(
    create: bool, current: dict[str, str], text: str, reason: str
) -> None:
    with pytest.raises(TopicAttributeError, match=reason):
        alter_current_attributes(create, current, parse_to_map(text))


def test_a_refused_change_leaves_the_current_map_alone() -> None:
    current = dict(BATCH)
    with pytest.raises(TopicAttributeError):
        alter_current_attributes(False, current, {"+queue.type": "SimpleCQ"})
    assert current == BATCH


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [({}, CQType.SIMPLE_CQ), (SIMPLE, CQType.SIMPLE_CQ), (BATCH, CQType.BATCH_CQ)],
)
def test_queue_type_of(attributes: dict[str, str], expected: CQType) -> None:
    assert queue_type_of(attributes) is expected


def test_add_modification() -> None:
    assert add_modification(BATCH) == "+queue.type=BatchCQ"


def test_topic_config_wire_carries_attributes_only_when_set() -> None:
    plain = TopicConfig("T", 4, 4)
    assert "attributes" not in plain.to_wire()
    typed = TopicConfig("T", 4, 4, attributes=BATCH)
    assert typed.to_wire()["attributes"] == BATCH
    assert TopicConfig.from_wire(typed.to_wire()) == typed
    assert TopicConfig.from_wire({**plain.to_wire(), "attributes": None}) == plain
    assert typed != plain
    assert hash(typed) == hash(plain)  # attributes are left out of the hash (a dict)


@pytest.mark.parametrize("bad", [[], {"a": 1}, {1: "a"}, "queue.type=BatchCQ"])
def test_topic_config_refuses_bad_attributes(bad: object) -> None:
    with pytest.raises(ValueError, match="attributes"):
        TopicConfig.from_wire({"topicName": "T", "attributes": bad})
