"""Pull answers holding inner batches (BatchCQ topics): the consumers' decode
(``client.api.parse_pull``) and the Spark connector's (``client.spark.columns``) unwrap them
into messages with per-message offsets, drop those below the offset asked for, and check the
exact tag of each inner message."""

from __future__ import annotations

import msgpack
import pytest

from client import api
from client.errors import MQBrokerError
from client.message import MessageQueue
from client.spark.columns import decode_body
from client.spark.pulling import QueueRange, _Columns
from common.inner_batch import INNER_BATCH_BITS
from common.record import MessageRecord, encode_record, pack_host
from common.subscription import build_subscription
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

MQ = MessageQueue("BCQ", "broker-a", 1)
TAGS = ["A", "B", "A", "C"]


def _batch_record(base: int, host: str = "127.0.0.1") -> bytes:
    entries = [
        {"body": b"m%d" % (base + i), "properties": {"TAGS": t, "UNIQ_KEY": f"U{base + i}"}}
        for i, t in enumerate(TAGS)
    ]
    return encode_record(
        MessageRecord(
            "BCQ",
            msgpack.packb(entries, use_bin_type=True),
            queue_id=1,
            properties={"INNER_NUM": str(len(entries)), "UNIQ_KEY": f"BATCH{base}"},
            sys_flag=INNER_BATCH_BITS,
            born_host=pack_host(host, 1),
            store_host=pack_host(host, 10911),
            queue_offset=base,
            physical_offset=1000 + base,
            store_timestamp=5,
        )
    )


def _single(offset: int, tag: str) -> bytes:
    return encode_record(
        MessageRecord(
            "BCQ",
            b"single",
            queue_id=1,
            properties={"TAGS": tag, "UNIQ_KEY": "S"},
            queue_offset=offset,
            physical_offset=5000,
        )
    )


def _answer(body: bytes, next_begin: int) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {}, opaque=1)
    fields = {"nextBeginOffset": next_begin, "minOffset": 0, "maxOffset": next_begin}
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, ext_fields=fields, body=body)


def _pulled(body: bytes, offset: int, expression: str = "*") -> list[tuple[int, bytes, str]]:
    sub = build_subscription("BCQ", expression)
    result = api.parse_pull(_answer(body, 9), MQ, sub, "127.0.0.1:1", offset)
    return [(m.queue_offset, m.body, m.tags or "") for m in result.messages]


def test_a_pull_from_mid_batch_starts_at_the_offset_asked_for() -> None:
    body = _batch_record(0) + _single(4, "A")
    assert _pulled(body, 2) == [(2, b"m2", "A"), (3, b"m3", "C"), (4, b"single", "A")]
    assert [o for o, _, _ in _pulled(body, 0)] == [0, 1, 2, 3, 4]


def test_inner_messages_are_ordinary_messages() -> None:
    sub = build_subscription("BCQ", "*")
    result = api.parse_pull(_answer(_batch_record(10), 14), MQ, sub, "127.0.0.1:1", 10)
    first = result.messages[0]
    assert first.msg_id == "U10"
    assert first.uniq_key == "U10"
    assert first.sys_flag == 0
    assert "INNER_NUM" not in first.properties
    assert {m.commitlog_offset for m in result.messages} == {1010}
    assert first.queue == MQ


def test_the_tag_of_each_inner_message_is_checked() -> None:
    body = _batch_record(0) + _single(4, "C")
    assert _pulled(body, 1, "A || C") == [(2, b"m2", "A"), (3, b"m3", "C"), (4, b"single", "C")]


def test_ipv6_records_take_the_checked_decoder_and_are_unwrapped_too() -> None:
    assert [o for o, _, _ in _pulled(_batch_record(0, host="::1"), 3)] == [3]


def test_a_batch_that_does_not_decode_is_a_bad_answer() -> None:
    bad = encode_record(
        MessageRecord("BCQ", b"\xc1", sys_flag=INNER_BATCH_BITS, properties={"INNER_NUM": "1"})
    )
    with pytest.raises(MQBrokerError, match="bad pull body"):
        _pulled(bad, 0)


def _spark_rows(body: bytes, lo: int, hi: int) -> list[tuple[int, bytes]]:
    cols = _Columns(QueueRange("BCQ", "broker-a", 1, 0, 100))
    assert cols.add_body(body, lo, hi) is None  # left to the decoder that unwraps
    cols.add_range(decode_body(body), lo, hi)
    rows = cols.batch().to_pylist()
    return [(r["queue_offset"], r["body"]) for r in rows]


def test_spark_rows_have_per_message_offsets() -> None:
    body = _batch_record(0) + _single(4, "A") + _batch_record(5)
    assert _spark_rows(body, 2, 7) == [
        (2, b"m2"),
        (3, b"m3"),
        (4, b"single"),
        (5, b"m5"),
        (6, b"m6"),
    ]
    rows = _Columns(QueueRange("BCQ", "broker-a", 1, 0, 100))
    rows.add_range(decode_body(_batch_record(0)), 0, 4)
    assert rows.batch().to_pylist()[1]["msg_id"] == "U1"
