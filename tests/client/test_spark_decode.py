"""The Spark executor's record decoding (client/spark/pulling.py): field tuples to Arrow rows."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.errors import MQBrokerError
from client.spark.columns import (
    _properties_by_row,
    _properties_vectorised,
    properties_columns,
)
from client.spark.pulling import QueueRange, _Columns, _decode
from common.record import MessageRecord, encode_properties, encode_record, pack_host


def _body(host: str) -> bytes:
    return b"".join(
        encode_record(
            MessageRecord(
                "T",
                zlib.compress(b"z" * 100) if i == 1 else b"m%d" % i,
                queue_id=2,
                sys_flag=0x301 if i == 1 else 0,
                properties={"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": f"U{i}"} if i else {},
                born_host=pack_host(host, 1000),
                store_host=pack_host(host, 10911),
                born_timestamp=7,
                store_timestamp=9,
                reconsume_times=i,
                queue_offset=100 + i,
                physical_offset=64 * i,
            )
        )
        for i in range(3)
    )


def _rows(body: bytes, lo: int, hi: int) -> list[dict[str, object]]:
    cols = _Columns(QueueRange("T", "broker-a", 2, 0, 1000))
    cols.add_range(_decode(body), lo, hi)
    rows: list[dict[str, object]] = cols.batch().to_pylist()
    for row in rows:
        if not row["properties"]:
            del row["msg_id"]  # no UNIQ_KEY: the offset id, which differs with the host
    return rows


def test_ipv4_fast_path_and_ipv6_fallback_give_the_same_rows() -> None:
    v4, v6 = _rows(_body("10.0.0.1"), 0, 1000), _rows(_body("::1"), 0, 1000)
    assert v4 == v6
    assert [r["queue_offset"] for r in v4] == [100, 101, 102]
    assert v4[1]["body"] == b"z" * 100  # decompressed
    assert (v4[2]["tags"], v4[2]["keys"], v4[2]["msg_id"]) == ("a", "k1 k2", "U2")
    assert (v4[0]["properties"], v4[0]["tags"]) == ([], None)
    assert [r["queue_offset"] for r in _rows(_body("10.0.0.1"), 101, 102)] == [101]


def test_a_bad_body_is_a_broker_error() -> None:
    with pytest.raises(MQBrokerError, match="bad pull body"):
        _decode(_body("10.0.0.1")[:-1])


_NAMES = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)
_VALUES = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=20,
)


@given(
    st.lists(
        st.dictionaries(
            st.one_of(st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "WAIT"]), _NAMES),
            _VALUES,
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=40,
    )
)
def test_vectorised_properties_equal_row_by_row_decoding(rows: list[dict[str, str]]) -> None:
    """The Arrow-kernel path gives the same map and columns as decoding each record."""
    raw = [encode_properties(r) for r in rows]
    fast = _properties_vectorised(raw)
    assert fast is not None
    slow = _properties_by_row(raw)
    assert [a.to_pylist() for a in fast] == [b.to_pylist() for b in slow]
    assert fast[0].to_pylist() == [list(r.items()) for r in rows]
    assert fast[2].to_pylist() == [r.get("TAGS") for r in rows]


def test_malformed_properties_take_the_row_by_row_path() -> None:
    assert _properties_vectorised([b"TAGS\x01a\x02", b""]) is None  # a record without any
    assert _properties_vectorised([b"TAGS\x01a"]) is None  # no final separator
    assert _properties_vectorised([b"TAGSa\x02"]) is None  # an entry without a name separator
    assert _properties_vectorised([b"TAGS\x01\xff\x02"]) is None  # not UTF-8
    props, uniq, tags, keys = properties_columns([b"TAGS\x01a\x02", b""])
    assert props.to_pylist() == [[("TAGS", "a")], []]
    assert (uniq.to_pylist(), tags.to_pylist(), keys.to_pylist()) == (
        [None, None],
        ["a", None],
        [None, None],
    )


def _table(fill: Callable[[_Columns], object]) -> list[dict[str, object]]:
    cols = _Columns(QueueRange("T", "broker-a", 2, 0, 1000))
    fill(cols)
    rows: list[dict[str, object]] = cols.batch().to_pylist() if len(cols) else []
    return rows


def test_rows_straight_from_the_body_equal_rows_from_field_tuples() -> None:
    body = _body("10.0.0.1")
    for lo, hi in ((0, 1000), (101, 102), (102, 1000), (500, 1000)):
        direct = _table(lambda c, lo=lo, hi=hi: c.add_body(body, lo, hi))
        via_tuples = _table(lambda c, lo=lo, hi=hi: c.add_range(_decode(body), lo, hi))
        assert direct == via_tuples
    cols = _Columns(QueueRange("T", "broker-a", 2, 0, 1000))
    assert cols.add_body(body, 101, 1000) == 100  # the first record's offset, even if skipped
    assert cols.add_body(b"", 7, 1000) == 7  # nothing there: nothing missing either


def test_a_body_that_is_not_simple_adds_nothing() -> None:
    cols = _Columns(QueueRange("T", "broker-a", 2, 0, 1000))
    good = _body("10.0.0.1")
    assert cols.add_body(good, 0, 1000) == 100
    assert len(cols) == 3
    assert cols.add_body(_body("::1"), 0, 1000) is None  # IPv6 hosts: the checked decoder
    assert cols.add_body(good + good[:-1], 0, 1000) is None  # cut short after 3 good records
    assert len(cols) == 3  # the rows of the refused bodies were taken back
    assert [r["queue_offset"] for r in cols.batch().to_pylist()] == [100, 101, 102]


def test_a_name_twice_in_one_record_does_not_shift_other_rows() -> None:
    """Our broker stores properties from a map, so names are unique; if a record held one
    twice anyway, the lookup columns keep their rows (the last value wins, as in a dict)."""
    fast = _properties_vectorised([b"TAGS\x01a\x02TAGS\x01b\x02", b"KEYS\x01k\x02"])
    assert fast is not None
    _props, uniq, tags, keys = fast
    assert (uniq.to_pylist(), tags.to_pylist(), keys.to_pylist()) == (
        [None, None],
        ["b", None],
        [None, "k"],
    )
