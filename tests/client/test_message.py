"""Tests for client message types (client/message.py)."""

from __future__ import annotations

import zlib

import pytest

from client import Message, MessageQueue, SendResult, SendStatus, from_record
from client.message import received_from_raw_fields
from common.message import MessageConst, MessageSysFlag
from common.message_id import create_offset_msg_id
from common.record import (
    MessageRecord,
    decode_raw_fields,
    decode_records,
    encode_record,
    pack_host,
)


def test_tags_keys_delay_stored_in_properties() -> None:
    msg = Message(
        "Orders",
        b"x",
        tags="created",
        keys=["order-42", "cust-7"],
        properties={"k": "v"},
        delay_level=3,
    )
    assert msg.properties == {
        "k": "v",
        MessageConst.TAGS: "created",
        MessageConst.KEYS: "order-42 cust-7",
        MessageConst.DELAY: "3",
    }
    assert msg.tags == "created"
    assert msg.keys == ["order-42", "cust-7"]
    assert msg.delay_level == 3


def test_defaults_and_string_key() -> None:
    msg = Message("T", b"x", keys="one")
    assert msg.properties == {"KEYS": "one"}
    assert msg.tags is None
    assert msg.delay_level == 0
    assert Message("T", b"x").keys == []
    assert Message("T", b"x", keys=[]).properties == {}


def test_properties_argument_is_copied() -> None:
    props = {"a": "b"}
    msg = Message("T", b"x", tags="t", properties=props)
    assert props == {"a": "b"}
    assert msg == Message("T", b"x", tags="t", properties={"a": "b"})


def test_message_queue_str_and_ordering() -> None:
    mq = MessageQueue("T", "broker-a", 0)
    assert str(mq) == "MessageQueue [topic=T, brokerName=broker-a, queueId=0]"
    queues = [
        MessageQueue("T", "broker-b", 0),
        MessageQueue("T", "broker-a", 10),
        MessageQueue("T", "broker-a", 2),
        MessageQueue("A", "broker-z", 5),
    ]
    assert sorted(queues) == [
        MessageQueue("A", "broker-z", 5),
        MessageQueue("T", "broker-a", 2),
        MessageQueue("T", "broker-a", 10),
        MessageQueue("T", "broker-b", 0),
    ]
    assert len({mq, MessageQueue("T", "broker-a", 0)}) == 1
    with pytest.raises(AttributeError):
        mq.queue_id = 3  # type: ignore[misc]


def test_send_result_fields() -> None:
    mq = MessageQueue("T", "b", 1)
    r = SendResult(SendStatus.SEND_OK, "UNIQ", "OFF", mq, 7)
    assert (r.status, r.msg_id, r.offset_msg_id, r.queue, r.queue_offset) == (
        SendStatus.SEND_OK,
        "UNIQ",
        "OFF",
        mq,
        7,
    )
    assert r.transaction_id is None
    assert [s.name for s in SendStatus] == [
        "SEND_OK",
        "FLUSH_DISK_TIMEOUT",
        "FLUSH_SLAVE_TIMEOUT",
        "SLAVE_NOT_AVAILABLE",
    ]


def _record(**kw: object) -> MessageRecord:
    base: dict[str, object] = {
        "topic": "Orders",
        "body": b"hello",
        "queue_id": 3,
        "properties": {"TAGS": "created", "KEYS": "a b", "UNIQ_KEY": "ABC", "k": "v"},
        "born_timestamp": 1_700_000_000_000,
        "born_host": pack_host("10.0.0.1", 5555),
        "store_timestamp": 1_700_000_000_005,
        "store_host": pack_host("100.81.0.250", 10911),
        "reconsume_times": 2,
        "queue_offset": 17,
        "physical_offset": 311825178782,
    }
    base.update(kw)
    return MessageRecord(**base)  # type: ignore[arg-type]


def test_from_record_after_codec_round_trip() -> None:
    (rec,) = decode_records(encode_record(_record()))
    m = from_record(rec, "broker-a")
    assert m.topic == "Orders"
    assert m.body == b"hello"
    assert m.tags == "created"
    assert m.keys == ["a", "b"]
    assert m.properties["k"] == "v"
    assert m.queue == MessageQueue("Orders", "broker-a", 3)
    assert m.queue_offset == 17
    assert m.msg_id == "ABC"
    assert m.offset_msg_id == "645100FA00002A9F000000489A3AA09E"
    assert m.born_timestamp == 1_700_000_000_000
    assert m.store_timestamp == 1_700_000_000_005
    assert m.born_host == "10.0.0.1:5555"
    assert m.reconsume_times == 2


def test_from_record_without_uniq_key_uses_offset_id_and_override() -> None:
    rec = _record(properties={})
    m = from_record(rec, "b", store_host_port=("127.0.0.1", 10911))
    assert m.msg_id == m.offset_msg_id == create_offset_msg_id("127.0.0.1", 10911, 311825178782)


def test_from_record_decompresses() -> None:
    body = b"z" * 10_000
    flag = MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB
    rec = _record(body=zlib.compress(body, 5), sys_flag=flag)
    assert from_record(rec, "b").body == body
    assert from_record(rec, "b", decompress=False).body == rec.body


def test_message_queue_hash_is_recomputed_in_another_process() -> None:
    """The cached hash must not travel in a pickle (str hashes differ between processes)."""
    import pickle
    import subprocess
    import sys

    mq = MessageQueue("Orders", "broker-a", 3)
    code = (
        "import pickle, sys; from client.message import MessageQueue; "
        "mq = pickle.loads(sys.stdin.buffer.read()); "
        "print({MessageQueue('Orders', 'broker-a', 3): 'found'}.get(mq, 'missing'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(mq),
        capture_output=True,
        env={"PYTHONHASHSEED": "123"},
        check=True,
    )
    assert done.stdout.strip() == b"found"


def _pull_body() -> bytes:
    records = [
        MessageRecord(
            "T",
            (b"%d" % i) * 300 if i % 2 else zlib.compress(b"big" * 2000),
            queue_id=1,
            flag=i,
            sys_flag=0 if i % 2 else 0x301,
            properties={"TAGS": f"t{i}", "UNIQ_KEY": f"U{i}", "KEYS": "a b"} if i != 3 else {},
            born_host=pack_host("10.0.0.1", 1000 + i),
            store_host=pack_host("10.0.0.2", 10911),
            born_timestamp=1000 + i,
            store_timestamp=2000 + i,
            reconsume_times=i,
            queue_offset=10 + i,
            physical_offset=500 * i,
        )
        for i in range(5)
    ]
    return b"".join(encode_record(r) for r in records)


def test_lazy_pulled_messages_equal_the_eager_ones() -> None:
    """Pulled messages decode properties, ids and hosts on first access, to the same values."""
    body = _pull_body()
    raw = decode_raw_fields(body)
    assert raw is not None
    lazy = received_from_raw_fields(raw, "broker-a")
    eager = [from_record(r, "broker-a") for r in decode_records(body)]
    assert lazy == eager  # dataclass equality reads every field, lazy ones included
    fresh = received_from_raw_fields(raw, "broker-a")
    assert [m.msg_id for m in fresh] == ["U0", "U1", "U2", eager[3].offset_msg_id, "U4"]
    assert [m.born_host for m in fresh] == [f"10.0.0.1:{1000 + i}" for i in range(5)]
    assert fresh[0].store_host == "10.0.0.2:10911"
    assert fresh[0].body == b"big" * 2000  # decompressed eagerly
    assert (fresh[1].tags, fresh[1].keys, fresh[3].properties) == ("t1", ["a", "b"], {})
    assert fresh[0].queue is fresh[4].queue == MessageQueue("T", "broker-a", 1)
    assert repr(received_from_raw_fields(raw, "broker-a")) == repr(eager)


def test_lazy_attributes_are_plain_attributes_once_read_or_set() -> None:
    raw = decode_raw_fields(_pull_body())
    assert raw is not None
    m, n = received_from_raw_fields(raw, "broker-a")[:2]
    m.properties["extra"] = "1"  # the decoded map is kept: changes stay
    assert m.properties["extra"] == "1"
    m.msg_id = "mine"
    n.store_host = "1.2.3.4:5"
    assert (m.msg_id, n.store_host, n.msg_id) == ("mine", "1.2.3.4:5", "U1")
    with pytest.raises(AttributeError, match="no_such"):
        m.no_such  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(m, "no_such")


def test_lazy_messages_copy_pickle_and_replace() -> None:
    import copy
    import dataclasses
    import pickle

    raw = decode_raw_fields(_pull_body())
    assert raw is not None
    expected = received_from_raw_fields(raw, "broker-a")[1]
    assert expected.msg_id == "U1"  # one decoded, the others still encoded
    for m in received_from_raw_fields(raw, "broker-a")[1:2]:
        assert pickle.loads(pickle.dumps(m)) == expected
        assert copy.copy(m) == expected
        replaced = dataclasses.replace(m, topic="X")
        assert (replaced.topic, replaced.properties) == ("X", expected.properties)
