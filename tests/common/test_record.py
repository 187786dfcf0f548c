"""Tests for the commitlog record codec (common/record.py): RocketMQ's v1 layout."""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.message import MessageSysFlag
from common.record import (
    BLANK_MAGIC_CODE,
    CRC32_RESERVED_LEN,
    MAGIC_CODE_V1,
    MessageRecord,
    RecordError,
    body_crc,
    crc32_property,
    decode_fields,
    decode_properties,
    decode_raw_fields,
    decode_record,
    decode_records,
    encode_blank,
    encode_properties,
    encode_record,
    pack_host,
    record_crc_ok,
    record_length,
    unpack_host,
)

V6_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG

topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True)
prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
properties = st.dictionaries(prop_text, prop_text, max_size=6)
ports = st.integers(0, 65535)
ipv4_hosts = st.builds(lambda ip, port: pack_host(str(ip), port), st.ip_addresses(v=4), ports)
ipv6_hosts = st.builds(lambda ip, port: pack_host(str(ip), port), st.ip_addresses(v=6), ports)
hosts = ipv4_hosts | ipv6_hosts
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)

records = st.builds(
    MessageRecord,
    topic=topics,
    body=st.binary(max_size=300),
    queue_id=int32,
    flag=int32,
    properties=properties,
    sys_flag=st.integers(0, 0x7FF),
    born_timestamp=int64,
    born_host=hosts,
    store_timestamp=int64,
    store_host=hosts,
    reconsume_times=int32,
    prepared_transaction_offset=int64,
    queue_offset=int64,
    physical_offset=int64,
)


def sample(**kw: object) -> MessageRecord:
    """A record with every field set to something recognisable."""
    fields: dict[str, object] = {
        "topic": "TopicTest",
        "body": b"Hello RocketMQ",
        "queue_id": 3,
        "flag": 7,
        "properties": {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABCDEF"},
        "sys_flag": 0,
        "born_timestamp": 1_700_000_000_123,
        "born_host": pack_host("10.0.0.1", 40000),
        "store_timestamp": 1_700_000_000_456,
        "store_host": pack_host("10.0.0.2", 10911),
        "reconsume_times": 2,
        "prepared_transaction_offset": 99,
        "queue_offset": 12345,
        "physical_offset": 6789012,
    }
    fields.update(kw)
    return MessageRecord(**fields)  # type: ignore[arg-type]


def expected_sys_flag(msg: MessageRecord) -> int:
    """The SYSFLAG encode_record writes: host bits follow the host lengths."""
    flag = msg.sys_flag & ~V6_FLAGS
    if len(msg.born_host) == 20:
        flag |= MessageSysFlag.BORNHOST_V6_FLAG
    if len(msg.store_host) == 20:
        flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    return flag


# -- round trip ------------------------------------------------------------------------------


@given(records)
def test_encode_decode_round_trip(msg: MessageRecord) -> None:
    raw = encode_record(msg)
    out = decode_record(raw, check_crc=True)
    assert out.topic == msg.topic
    assert out.body == msg.body
    assert out.queue_id == msg.queue_id
    assert out.flag == msg.flag
    assert out.properties == msg.properties
    assert out.sys_flag == expected_sys_flag(msg)
    assert out.born_timestamp == msg.born_timestamp
    assert out.born_host == msg.born_host
    assert out.store_timestamp == msg.store_timestamp
    assert out.store_host == msg.store_host
    assert out.reconsume_times == msg.reconsume_times
    assert out.prepared_transaction_offset == msg.prepared_transaction_offset
    assert out.queue_offset == msg.queue_offset
    assert out.physical_offset == msg.physical_offset
    assert out.body_crc == zlib.crc32(msg.body) & 0x7FFFFFFF
    assert out.store_size == len(raw)
    props_len = len(encode_properties(msg.properties))
    assert len(raw) == record_length(
        len(msg.body),
        len(msg.topic.encode()),
        props_len,
        born_v6=len(msg.born_host) == 20,
        store_v6=len(msg.store_host) == 20,
    )
    # decoding again the re-encoded record gives the same bytes
    assert encode_record(out) == raw


@given(st.lists(records, max_size=5))
def test_decode_records_on_concatenation(msgs: list[MessageRecord]) -> None:
    raws = [encode_record(m) for m in msgs]
    out = decode_records(b"".join(raws), check_crc=True)
    assert [o.topic for o in out] == [m.topic for m in msgs]
    assert [o.body for o in out] == [m.body for m in msgs]
    assert [o.store_size for o in out] == [len(r) for r in raws]


@given(st.lists(records, max_size=5), st.binary(max_size=3))
def test_fast_decode_path_equals_the_checked_one(msgs: list[MessageRecord], tail: bytes) -> None:
    """``bytes`` take the one-unpack IPv4 path; a memoryview takes the checked path."""
    buf = b"".join(encode_record(m) for m in msgs)
    assert decode_records(buf) == decode_records(memoryview(buf))
    if tail:  # trailing garbage: both refuse it
        with pytest.raises(RecordError):
            decode_records(buf + tail)
        with pytest.raises(RecordError):
            decode_records(memoryview(buf + tail))


@given(topics, st.binary(max_size=200), properties)
def test_total_size_is_91_plus_lengths_for_ipv4(
    topic: str, body: bytes, props: dict[str, str]
) -> None:
    raw = encode_record(MessageRecord(topic, body, properties=props))
    expected = 91 + len(body) + len(topic) + len(encode_properties(props))
    assert len(raw) == expected
    assert struct.unpack_from(">i", raw, 0)[0] == expected
    assert record_length(len(body), len(topic), len(encode_properties(props))) == expected


@given(st.ip_addresses(v=4) | st.ip_addresses(v=6), ports)
def test_pack_host_round_trip(ip: object, port: int) -> None:
    raw = pack_host(str(ip), port)
    assert len(raw) == (8 if ip.version == 4 else 20)  # type: ignore[attr-defined]
    assert unpack_host(raw) == (str(ip), port)


def test_pack_host_layout() -> None:
    assert pack_host("100.81.0.250", 10911) == bytes([100, 81, 0, 250]) + struct.pack(">i", 10911)
    assert pack_host("::1", 1) == bytes(15) + b"\x01" + b"\x00\x00\x00\x01"


# -- byte layout -----------------------------------------------------------------------------


def test_field_positions_and_magic() -> None:
    msg = sample()
    raw = encode_record(msg)
    assert struct.unpack(">i", bytes.fromhex("DAA320A7"))[0] == MAGIC_CODE_V1
    assert raw[4:8] == bytes.fromhex("DAA320A7")
    assert struct.unpack_from(">i", raw, 8)[0] == body_crc(msg.body)
    assert struct.unpack_from(">i", raw, 12)[0] == 3  # queue id
    assert struct.unpack_from(">i", raw, 16)[0] == 7  # flag
    assert struct.unpack_from(">q", raw, 20)[0] == 12345  # queue offset
    assert struct.unpack_from(">q", raw, 28)[0] == 6789012  # physical offset
    assert struct.unpack_from(">i", raw, 36)[0] == 0  # sysflag
    assert struct.unpack_from(">q", raw, 40)[0] == 1_700_000_000_123  # born timestamp
    assert raw[48:56] == pack_host("10.0.0.1", 40000)
    assert struct.unpack_from(">q", raw, 56)[0] == 1_700_000_000_456  # store timestamp
    assert raw[64:72] == pack_host("10.0.0.2", 10911)
    assert struct.unpack_from(">i", raw, 72)[0] == 2  # reconsume times
    assert struct.unpack_from(">q", raw, 76)[0] == 99  # prepared transaction offset
    assert struct.unpack_from(">i", raw, 84)[0] == len(msg.body)
    body_end = 88 + len(msg.body)
    assert raw[88:body_end] == msg.body
    assert raw[body_end] == len("TopicTest")
    assert raw[body_end + 1 : body_end + 10] == b"TopicTest"
    props = encode_properties(msg.properties)
    assert struct.unpack_from(">h", raw, body_end + 10)[0] == len(props)
    assert raw[body_end + 12 :] == props


def test_ipv6_hosts_set_sysflag_bits_and_widen_the_record() -> None:
    v4 = encode_record(sample())
    born6 = encode_record(sample(born_host=pack_host("::1", 5)))
    both6 = encode_record(sample(born_host=pack_host("::1", 5), store_host=pack_host("fe80::1", 9)))
    assert len(born6) == len(v4) + 12
    assert len(both6) == len(v4) + 24
    assert struct.unpack_from(">i", born6, 36)[0] == MessageSysFlag.BORNHOST_V6_FLAG
    assert struct.unpack_from(">i", both6, 36)[0] == V6_FLAGS
    # the store timestamp moves past the wider born host
    assert struct.unpack_from(">q", born6, 68)[0] == 1_700_000_000_456
    assert unpack_host(decode_record(both6).store_host) == ("fe80::1", 9)


def test_v6_bits_are_cleared_for_ipv4_hosts() -> None:
    raw = encode_record(sample(sys_flag=V6_FLAGS | MessageSysFlag.TRANSACTION_PREPARED_TYPE))
    assert decode_record(raw).sys_flag == MessageSysFlag.TRANSACTION_PREPARED_TYPE


def test_blank_marker() -> None:
    assert struct.unpack(">i", bytes.fromhex("CBD43194"))[0] == BLANK_MAGIC_CODE
    assert encode_blank(1234) == struct.pack(">i", 1234) + bytes.fromhex("CBD43194")


def test_encode_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="topic"):
        encode_record(sample(topic="T" * 128))
    with pytest.raises(ValueError, match="properties"):
        encode_record(sample(properties={"big": "x" * 32767}))
    with pytest.raises(ValueError, match="host"):
        encode_record(sample(born_host=b"\x00" * 6))
    encode_record(sample(topic="T" * 127))  # the limit itself is fine


# -- decode errors ---------------------------------------------------------------------------


def test_decode_at_position_in_larger_buffer() -> None:
    a, b = encode_record(sample(body=b"first")), encode_record(sample(body=b"second"))
    buf = b"\x00" * 5 + a + b
    assert decode_record(buf, 5).body == b"first"
    assert decode_record(memoryview(buf), 5 + len(a)).body == b"second"
    assert decode_record(bytearray(buf), 5 + len(a), with_body=False).body == b""


def test_decode_rejects_bad_magic() -> None:
    raw = bytearray(encode_record(sample()))
    raw[4:8] = struct.pack(">i", 0x12345678)
    buf = b"\x00" * 10 + raw
    with pytest.raises(RecordError, match="magic") as exc:
        decode_record(buf, 10)
    assert exc.value.position == 10


def test_decode_rejects_blank_marker_as_record() -> None:
    with pytest.raises(RecordError):
        decode_record(encode_blank(200) + bytes(192))


def test_decode_rejects_every_truncation() -> None:
    raw = encode_record(sample())
    for cut in range(len(raw)):
        with pytest.raises(RecordError) as exc:
            decode_record(raw[:cut])
        assert exc.value.position == 0


def test_decode_rejects_total_size_out_of_range() -> None:
    raw = bytearray(encode_record(sample()))
    struct.pack_into(">i", raw, 0, 10)
    with pytest.raises(RecordError, match="total size"):
        decode_record(raw)


def test_decode_rejects_length_mismatches() -> None:
    good = encode_record(sample())
    # TOTALSIZE says one byte more than the fields add up to (buffer has the extra byte)
    longer = bytearray(good + b"\x00")
    struct.pack_into(">i", longer, 0, len(good) + 1)
    with pytest.raises(RecordError, match="add up"):
        decode_record(longer)
    # body length too large for the record
    bad_body = bytearray(good)
    struct.pack_into(">i", bad_body, 84, len(good))
    with pytest.raises(RecordError, match="body length"):
        decode_record(bad_body)
    # negative body length
    struct.pack_into(">i", bad_body, 84, -1)
    with pytest.raises(RecordError, match="body length"):
        decode_record(bad_body)
    # properties length disagrees
    bad_props = bytearray(good)
    props_pos = 88 + len(b"Hello RocketMQ") + 1 + len("TopicTest")
    struct.pack_into(">h", bad_props, props_pos, 3)
    with pytest.raises(RecordError, match="add up"):
        decode_record(bad_props)


def test_decode_checks_crc_only_when_asked() -> None:
    raw = bytearray(encode_record(sample()))
    raw[88] ^= 0xFF  # first body byte
    buf = b"\xee" * 3 + raw
    assert decode_record(buf, 3).body[0] == raw[88]
    with pytest.raises(RecordError, match="CRC") as exc:
        decode_record(buf, 3, check_crc=True)
    assert exc.value.position == 3
    assert exc.value.reason == "body CRC mismatch"


def test_decode_records_errors_carry_position() -> None:
    a = encode_record(sample())
    assert decode_records(b"") == []
    with pytest.raises(RecordError) as exc:
        decode_records(a + a[:20])
    assert exc.value.position == len(a)
    with pytest.raises(RecordError) as exc:
        decode_records(a + b"\x00\x00")
    assert exc.value.position == len(a)
    corrupt = bytearray(a + a)
    corrupt[len(a) + 90] ^= 1
    assert len(decode_records(corrupt)) == 2
    with pytest.raises(RecordError) as exc:
        decode_records(corrupt, check_crc=True)
    assert exc.value.position == len(a)


# -- properties ------------------------------------------------------------------------------


@given(properties)
def test_properties_round_trip(props: dict[str, str]) -> None:
    raw = encode_properties(props)
    assert decode_properties(raw) == props
    assert decode_properties(raw.decode()) == props
    if props:
        assert raw.endswith(b"\x02")


def test_properties_encoding_layout() -> None:
    assert encode_properties({}) == b""
    assert encode_properties({"TAGS": "TagA", "KEYS": "a b"}) == b"TAGS\x01TagA\x02KEYS\x01a b\x02"


def test_properties_parser_skips_malformed_segments() -> None:
    raw = "A\x011\x02\x02noseparator\x02\x01novalue\x02B\x012\x01x\x02C\x013"
    assert decode_properties(raw) == {"A": "1", "B": "2\x01x", "C": "3"}
    assert decode_properties(b"") == {}
    assert decode_properties("\x02\x02\x02") == {}


def test_record_property_accessors() -> None:
    msg = sample(properties={"TAGS": "TagA", "KEYS": " k1  k2 ", "UNIQ_KEY": "U1"})
    assert msg.tags == "TagA"
    assert msg.keys == ["k1", "k2"]
    assert msg.uniq_key == "U1"
    bare = MessageRecord("T", b"")
    assert (bare.tags, bare.keys, bare.uniq_key) == (None, [], None)


@given(st.lists(records, max_size=5))
def test_raw_fields_are_the_fields_with_encoded_properties(msgs: list[MessageRecord]) -> None:
    """decode_raw_fields leaves field 4 encoded; decoding it gives decode_fields' tuple."""
    buf = b"".join(encode_record(m) for m in msgs)
    fields, raw = decode_fields(buf), decode_raw_fields(buf)
    if fields is None:  # an IPv6 host: neither fast path takes the body
        assert raw is None
        return
    assert raw is not None
    assert [(*r[:4], decode_properties(r[4]), *r[5:]) for r in raw] == fields
    assert [MessageRecord(*f) for f in fields] == decode_records(memoryview(buf))
    assert decode_raw_fields(buf + b"\x00") is None


def test_properties_parser_takes_bytes_and_str() -> None:
    raw = encode_properties({"a": "1", "b": "x\x01y"})
    for form in (raw, raw.decode()):
        assert decode_properties(form) == {"a": "1", "b": "x\x01y"}


@given(
    records,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, 10_000),
    st.booleans(),
)
def test_any_damage_is_a_record_error_or_a_record(
    msg: MessageRecord, edits: list[tuple[int, int]], cut: int, check_crc: bool
) -> None:
    """Overwritten or cut-short bytes never escape as another exception (IndexError, a UTF-8
    error): a client hands a broker's record to its checker, and only RecordError is caught."""
    data = bytearray(encode_record(msg))
    for where, value in edits:
        data[where % len(data)] = value
    damaged = bytes(data[: max(1, cut % (len(data) + 1))])
    for decode in (
        lambda: decode_record(damaged, check_crc=check_crc),
        lambda: decode_records(damaged, check_crc=check_crc),
        lambda: decode_records(damaged + damaged, check_crc=check_crc),
    ):
        with contextlib.suppress(RecordError):
            decode()


def test_crc32_property_writes_rocketmqs_digits_least_significant_first() -> None:
    head = b"abc" * 10
    assert zlib.crc32(head) & 0x7FFFFFFF == 1219624065
    prop = crc32_property(head)
    assert prop == b"__CRC32#\x01" + b"5604269121" + b"\x02"  # RocketMQ's createCrc32 order
    assert len(prop) == CRC32_RESERVED_LEN


def test_record_crc_ok_checks_only_a_whole_last_crc_property() -> None:
    header = b"h" * 30
    props = b"k\x01v\x02"
    head = header + props
    record = head + crc32_property(head)
    assert record_crc_ok(record, len(header))
    assert not record_crc_ok(b"x" + record[1:], len(header))  # a byte changed
    only = header + crc32_property(header)
    assert record_crc_ok(only, len(header))  # the only property
    assert not record_crc_ok(b"x" + only[1:], len(header))
    assert record_crc_ok(head, len(header))  # no such property: nothing to check
    # a property named "x__CRC32#" with a 10-byte value ends the same way: no CRC to check
    spoof = head + b"x__CRC32#\x01" + b"0123456789" + b"\x02"
    assert record_crc_ok(spoof, len(header))
