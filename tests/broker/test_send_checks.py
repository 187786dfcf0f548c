"""The send processor's message checks (broker/processors/send_checks.py): properties and
batch bodies."""

from __future__ import annotations

import re

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.processors.send import V2_FIELD_NAMES, _header_of, _SendHeader
from broker.processors.send_checks import (
    IllegalMessageError,
    _checked_batch,
    _legal_batch,
    check_properties,
    decode_batch_body,
    encode_batch_body,
)
from common.record import MAX_PROPERTIES_LENGTH, encode_properties
from remoting.codes import RequestCode
from remoting.command import ExtValue, RemotingCommand
from remoting.headers import BadRequestError

SEPARATORS = ("\x01", "\x02")


@pytest.mark.parametrize(
    ("props", "reason"),
    [
        ({"a": "x\x01y"}, "illegal property 'a'"),
        ({"a\x02": "v"}, "illegal property"),
        ({"": "v"}, "illegal property ''"),
        ({"a": 1}, "must map str to str"),
        ({"a": "x" * MAX_PROPERTIES_LENGTH}, "exceed"),
    ],
)
def test_bad_properties_are_refused_with_a_reason(props: dict[str, object], reason: str) -> None:
    with pytest.raises(IllegalMessageError, match=reason):
        check_properties(props)


@given(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=6))
def test_a_map_is_accepted_exactly_when_no_name_is_empty_or_holds_a_separator(
    props: dict[str, str],
) -> None:
    legal = all(k and not any(s in k or s in v for s in SEPARATORS) for k, v in props.items())
    if legal:
        assert check_properties(props) == props
    else:
        with pytest.raises(IllegalMessageError):
            check_properties(props)


@pytest.mark.parametrize("char", ["x", "é", "€"])
def test_size_limit_counts_encoded_bytes(char: str) -> None:
    """``{"a": v}`` encodes to ``a\\x01v\\x02``: 3 bytes plus the UTF-8 of the value."""
    width = len(char.encode())
    fits = char * ((MAX_PROPERTIES_LENGTH - 3) // width)
    assert check_properties({"a": fits}) == {"a": fits}
    over = fits + char * (1 + (MAX_PROPERTIES_LENGTH - 3) % width)
    assert len(encode_properties({"a": over})) > MAX_PROPERTIES_LENGTH
    with pytest.raises(IllegalMessageError, match="exceed"):
        check_properties({"a": over})


# -- batch bodies ------------------------------------------------------------------------------
_TEXT = st.text(alphabet=st.sampled_from("ab\x01\x02é"), max_size=4)
_INT = st.integers(-(2**63), 2**64 - 1)  # what msgpack encodes
_PROPERTIES = st.one_of(
    st.none(),
    st.dictionaries(_TEXT, _TEXT, max_size=3),
    st.dictionaries(st.binary(min_size=1, max_size=2), _TEXT, min_size=1, max_size=2),
    st.lists(_TEXT, max_size=2),
    st.just("k\x01v\x02"),
)
_BODY = st.one_of(st.binary(max_size=4), st.text(max_size=2), _INT)
_FLAG = st.one_of(st.none(), _INT, st.booleans(), _TEXT)
_ENTRY = st.one_of(
    st.tuples(_BODY, _PROPERTIES, _FLAG).map(list),  # the current form
    st.lists(st.binary(max_size=2), max_size=4),  # arrays of other lengths and types
    st.fixed_dictionaries(  # the older form
        {"body": _BODY},
        optional={"properties": _PROPERTIES, "flag": _FLAG},
    ),
    st.dictionaries(st.sampled_from(["flag", "other"]), _INT, max_size=2),
    _INT,
    st.binary(max_size=2),
)


def _decode_or_error(body: bytes) -> object:
    try:
        return decode_batch_body(body)
    except IllegalMessageError as exc:
        return ("refused", str(exc))


def _checked_or_error(wire: list[object]) -> object:
    try:
        return _checked_batch(wire)
    except IllegalMessageError as exc:
        return ("refused", str(exc))


@given(st.lists(_ENTRY, min_size=1, max_size=6))
def test_a_batch_decodes_as_its_entry_by_entry_check_says(wire: list[object]) -> None:
    """The bulk check accepts only what the entry-by-entry check accepts, with the same
    entries; everything else gets the entry-by-entry answer, naming the bad entry."""
    expected = _checked_or_error(wire)
    legal = _legal_batch(wire)
    if legal is not None:
        assert list(map(tuple, legal)) == expected
    decoded = _decode_or_error(encode_batch_body(wire))  # type: ignore[arg-type]
    if isinstance(decoded, list):
        decoded = list(map(tuple, decoded))
    assert decoded == expected


def test_batch_properties_are_limited_per_message_not_per_batch() -> None:
    half = "x" * (MAX_PROPERTIES_LENGTH // 2)
    wire = [{"body": b"a", "properties": {"k": half}}] * 3  # 1.5 x the limit in all
    entries = decode_batch_body(encode_batch_body(wire))
    assert [props for _, props, _ in entries] == [{"k": half}] * 3
    over = [{"body": b"a"}, {"body": b"b", "properties": {"k": "x" * MAX_PROPERTIES_LENGTH}}]
    with pytest.raises(IllegalMessageError, match="exceed"):
        decode_batch_body(encode_batch_body(over))


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        ([[b"a", None, None], [b"b", None]], "batch entry 1 must be [body, properties, flag]"),
        ([[b"a", None, None], ["text", None, None]], "entry 1 must be [body, properties, flag] "),
        ([[b"a", {"k": 1}, None]], "batch entry 0: properties must map str to str"),
        ([[b"a", None, True]], "batch entry 0: 'flag' must be an int"),
        ([[b"a", None, None], {"body": b"b"}, 7], "batch entry 2 must be [body, properties, flag]"),
        ([{"body": b"a"}, {"body": "text"}], "entry 1 must be [body, properties, flag] with a"),
        ([{"body": b"a"}, 7], "batch entry 1 must be [body, properties, flag]"),
        ([{"body": b"a", "properties": ["k"]}], "batch entry 0: 'properties' must be a map"),
        ([{"body": b"a"}, {"body": b"b", "flag": True}], "batch entry 1: 'flag' must be an int"),
        ([{"body": b"a", "properties": {"k": "v\x02"}}], "illegal property 'k'"),
        ([{"body": b"a", "properties": {"": "v"}}], "illegal property ''"),
        ([{"body": b"a", "properties": {b"k": "v"}}], "must map str to str"),
    ],
)
def test_a_bad_batch_entry_is_named(wire: list[object], reason: str) -> None:
    with pytest.raises(IllegalMessageError, match=re.escape(reason)):
        decode_batch_body(encode_batch_body(wire))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "body",
    [b"\xc1", msgpack.packb({"body": b"a"}), msgpack.packb([])],
    ids=["not msgpack", "not a list", "empty"],
)
def test_a_batch_body_that_is_no_list_of_entries_is_refused(body: bytes) -> None:
    with pytest.raises(IllegalMessageError, match="batch body"):
        decode_batch_body(body)


# -- send headers ------------------------------------------------------------------------------
_HEADER_VALUE = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.booleans(),
    st.sampled_from(["", "T", "3", " 4 ", "true", "x\x01y\x02"]),
    st.floats(allow_nan=False),
)


@settings(max_examples=300)
@given(
    st.fixed_dictionaries(
        {"b": st.one_of(st.just("T"), _HEADER_VALUE)},
        optional={
            k: st.one_of(st.integers(-5, 5), st.booleans(), _HEADER_VALUE) for k in "aefghijm"
        },
    ),
    st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE]),
)
def test_a_v2_header_read_straight_equals_the_renamed_one(
    fields: dict[str, ExtValue], code: RequestCode
) -> None:
    """The direct read of short names, where it applies, gives what renaming then parsing
    gives; elsewhere the renaming path answers, errors naming the long field names."""
    request = RemotingCommand.request(code, fields, b"", opaque=1)
    renamed = RemotingCommand.request(
        code, {V2_FIELD_NAMES.get(k, k): v for k, v in fields.items()}, b"", opaque=1
    )
    try:
        expected: object = _SendHeader.of(renamed)
    except BadRequestError as exc:
        expected = str(exc)
    direct = _SendHeader.of_v2(request)
    if direct is not None:
        assert direct == expected
    try:
        got: object = _header_of(request)
    except BadRequestError as exc:
        got = str(exc)
    assert got == expected


def test_a_bad_v2_field_is_named_by_its_long_name() -> None:
    request = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, {"b": "T", "e": "x"}, b"", opaque=1
    )
    with pytest.raises(BadRequestError, match="'queueId'"):
        _header_of(request)
