"""Unwrapping inner-batch records (BatchCQ topics) into their messages: the contract's rules."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.processors.send_checks import encode_batch_body
from common.batch_body import encode_batch_entries
from common.inner_batch import (
    INNER_BATCH_BITS,
    InnerBatchError,
    any_inner_batch,
    find_inner_message,
    inner_messages,
    is_inner_batch,
    unwrap_all,
    unwrap_fields,
)
from common.message import MessageConst, MessageSysFlag
from common.record import (
    MessageRecord,
    RawRecordFields,
    decode_properties,
    decode_raw_fields,
    decode_record,
    encode_record,
)

OUTER_PROPS = {"INNER_NUM": "3", "UNIQ_KEY": "BATCH-ID", "KEYS": "outer", "TAGS": "T0"}


def _pack(entries: list[dict[str, Any]], *, maps: bool = False) -> bytes:
    """A batch body of ``entries`` (maps as the tests write them): ``[body, properties, flag]``
    arrays, or with ``maps`` the older map form as is."""
    if maps:
        return encode_batch_body(entries)
    return encode_batch_entries((e["body"], e.get("properties"), e.get("flag")) for e in entries)


def _record(entries: list[dict[str, Any]], *, maps: bool = False, **over: Any) -> MessageRecord:
    fields: dict[str, Any] = {
        "topic": "BCQ",
        "body": _pack(entries, maps=maps),
        "queue_id": 2,
        "flag": 7,
        "properties": dict(OUTER_PROPS, INNER_NUM=str(len(entries))),
        "sys_flag": INNER_BATCH_BITS,
        "born_timestamp": 1111,
        "store_timestamp": 2222,
        "reconsume_times": 1,
        "queue_offset": 40,
        "physical_offset": 9000,
    }
    fields.update(over)
    return MessageRecord(**fields)


def _raw(rec: MessageRecord) -> RawRecordFields:
    fields = decode_raw_fields(encode_record(rec))
    assert fields is not None
    assert len(fields) == 1
    return fields[0]


ENTRIES = [
    {"body": b"a", "properties": {"TAGS": "A", "UNIQ_KEY": "U0", "KEYS": "k0 k1"}, "flag": 1},
    {"body": b"bb"},  # the record's properties (without INNER_NUM / UNIQ_KEY) and flag
    {"body": b"ccc", "properties": {}},  # its own, empty, properties
]


@pytest.mark.parametrize("maps", [False, True], ids=["arrays", "maps"])
def test_unwrap_fields_follows_the_contract(maps: bool) -> None:
    rec = _record(ENTRIES, maps=maps)
    raw = _raw(rec)
    inner = unwrap_fields(raw)
    assert [m[1] for m in inner] == [b"a", b"bb", b"ccc"]
    assert [m[12] for m in inner] == [40, 41, 42]
    assert [decode_properties(m[4]) for m in inner] == [
        {"TAGS": "A", "UNIQ_KEY": "U0", "KEYS": "k0 k1"},
        {"KEYS": "outer", "TAGS": "T0"},
        {},
    ]
    assert [m[3] for m in inner] == [1, 7, 7]
    for m in inner:
        assert m[5] == 0  # no inner-batch bits left
        same = (0, 2, 6, 7, 8, 9, 10, 11, 13, 15)  # topic, queue, born/store, reconsume, ...
        assert [m[i] for i in same] == [raw[i] for i in same]


@pytest.mark.parametrize("maps", [False, True], ids=["arrays", "maps"])
def test_inner_messages_matches_unwrap_fields(maps: bool) -> None:
    rec = decode_record(encode_record(_record(ENTRIES, maps=maps)))
    msgs = inner_messages(rec)
    raw = unwrap_fields(_raw(rec))
    assert [(m.body, m.queue_offset, m.flag, m.properties, m.sys_flag) for m in msgs] == [
        (r[1], r[12], r[3], decode_properties(r[4]), r[5]) for r in raw
    ]
    assert all(m.physical_offset == rec.physical_offset for m in msgs)
    found = find_inner_message(rec, "U0")
    assert found is not None
    assert found.body == b"a"
    assert find_inner_message(rec, "BATCH-ID") is None  # the batch's own id is no message


def test_unwrap_all_drops_inner_messages_below_the_offset_and_keeps_ordinary_records() -> None:
    plain = _raw(MessageRecord("BCQ", b"single", queue_offset=43, properties={"TAGS": "S"}))
    batch = _raw(_record(ENTRIES))
    out = unwrap_all([batch, plain], 41)
    assert [(m[1], m[12]) for m in out] == [(b"bb", 41), (b"ccc", 42), (b"single", 43)]
    assert unwrap_all([plain], 100) == [plain]  # an ordinary record is never dropped


def test_sys_flag_keeps_other_bits() -> None:
    flag = INNER_BATCH_BITS | MessageSysFlag.COMPRESSED_FLAG
    inner = unwrap_fields(_raw(_record(ENTRIES, sys_flag=flag)))
    assert {m[5] for m in inner} == {MessageSysFlag.COMPRESSED_FLAG}


@pytest.mark.parametrize(
    ("sys_flag", "expected"),
    [
        (0, False),
        (MessageSysFlag.INNER_BATCH_FLAG, False),  # RocketMQ unwraps with both bits only
        (MessageSysFlag.NEED_UNWRAP_FLAG, False),
        (INNER_BATCH_BITS, True),
        (INNER_BATCH_BITS | MessageSysFlag.COMPRESSED_FLAG, True),
    ],
)
def test_is_inner_batch(sys_flag: int, expected: bool) -> None:
    assert is_inner_batch(sys_flag) is expected


def test_any_inner_batch() -> None:
    plain = _raw(MessageRecord("T", b"x"))
    assert not any_inner_batch([])
    assert not any_inner_batch([plain, plain])
    assert any_inner_batch([plain, _raw(_record(ENTRIES))])


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # not msgpack
        msgpack.packb([]),
        msgpack.packb({"body": b"x"}),
        msgpack.packb([{"body": "text"}]),
        msgpack.packb([{"body": b"x", "properties": {"a": 1}}]),
        msgpack.packb([{"body": b"x", "flag": "1"}]),
        msgpack.packb([{"body": b"x", "flag": True}]),
        msgpack.packb([[b"x", None]]),
        msgpack.packb([[b"x", None, None], [b"y", None, None, None]]),
        msgpack.packb([["text", None, None]], use_bin_type=True),
        msgpack.packb([[b"x", {"a": 1}, None]], use_bin_type=True),
        msgpack.packb([[b"x", {1: "a"}, None]], use_bin_type=True),
        msgpack.packb([[b"x", None, 1.5]], use_bin_type=True),
        msgpack.packb([[b"x", None, None], {"body": b"y", "flag": False}], use_bin_type=True),
    ],
)
def test_bad_inner_batch_bodies_raise(body: bytes) -> None:
    raw = _raw(_record([{"body": b"x"}], body=body))
    with pytest.raises(InnerBatchError):
        unwrap_fields(raw)


_props = st.dictionaries(
    st.text("ABCDEFGHIJ_", min_size=1, max_size=6), st.text("abc xyz09", max_size=6), max_size=3
)
_entries = st.lists(
    st.fixed_dictionaries(
        {"body": st.binary(max_size=20)},
        optional={"properties": _props, "flag": st.integers(-(2**31), 2**31 - 1)},
    ),
    min_size=1,
    max_size=8,
)


@given(_entries, st.integers(0, 1000), st.integers(0, 10), st.booleans())
def test_unwrap_is_the_batch_as_sent(
    entries: list[dict[str, Any]], base: int, skip: int, maps: bool
) -> None:
    """Either form of the body (arrays, or the older maps) unwraps to the batch as sent."""
    rec = _record(entries, maps=maps, queue_offset=base)
    out = unwrap_all([_raw(rec)], base + skip)
    kept = entries[skip:]
    assert [m[12] for m in out] == list(range(base + skip, base + len(entries)))
    defaults = {k: v for k, v in rec.properties.items() if k not in ("INNER_NUM", "UNIQ_KEY")}
    for m, e in zip(out, kept, strict=True):
        assert m[1] == e["body"]
        assert decode_properties(m[4]) == e.get("properties", defaults)
        assert m[3] == e.get("flag", rec.flag)
        assert not m[5] & INNER_BATCH_BITS
    assert MessageConst.PROPERTY_INNER_NUM == "INNER_NUM"
