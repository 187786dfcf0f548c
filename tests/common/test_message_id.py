"""Tests for message ids (common/message_id.py): offsetMsgId and UNIQ_KEY layouts."""

from __future__ import annotations

import os
import select
import signal
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.producer import _UNIQ_KEYS
from common.message_id import (
    UniqKeyGenerator,
    create_offset_msg_id,
    decode_offset_msg_id,
    decode_uniq_key,
    joined_offset_msg_ids,
    month_start_ms,
    offset_msg_id_of_packed,
    uniq_key_timestamp,
)

VECTOR = "645100FA00002A9F000000489A3AA09E"


def _ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, second).timestamp() * 1000)


def test_offset_msg_id_matches_rocketmq_vector() -> None:
    assert create_offset_msg_id("100.81.0.250", 10911, 311825178782) == VECTOR
    assert decode_offset_msg_id(VECTOR) == ("100.81.0.250", 10911, 311825178782)
    assert decode_offset_msg_id(VECTOR.lower()) == ("100.81.0.250", 10911, 311825178782)


def test_offset_msg_id_ipv6_round_trip() -> None:
    msg_id = create_offset_msg_id("2001:db8::1", 10911, 42)
    assert len(msg_id) == 56
    assert msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == ("2001:db8::1", 10911, 42)


@given(
    host=st.sampled_from([bytes([100, 81, 0, 250]), bytes(16), bytes(range(16))]),
    port=st.integers(0, 0xFFFF),
    offsets=st.lists(st.integers(0, 2**63 - 1), max_size=40),
)
def test_joined_offset_msg_ids_equal_the_ids_one_by_one(
    host: bytes, port: int, offsets: list[int]
) -> None:
    packed = host + port.to_bytes(4, "big")
    joined = joined_offset_msg_ids(packed, offsets)
    assert joined == ",".join(offset_msg_id_of_packed(packed, p) for p in offsets)
    assert [decode_offset_msg_id(i)[1:] for i in joined.split(",") if i] == [
        (port, p) for p in offsets
    ]


def test_joined_offset_msg_ids_matches_rocketmq_vector() -> None:
    packed = bytes([100, 81, 0, 250]) + (10911).to_bytes(4, "big")
    assert joined_offset_msg_ids(packed, [311825178782, 0]) == (
        f"{VECTOR},645100FA00002A9F0000000000000000"
    )


@pytest.mark.parametrize(
    "bad",
    ["", "645100FA", VECTOR + "00", "Z" * 32, "645100FA00002A9F800000489A3AA09E", 123],
)
def test_decode_offset_msg_id_rejects_bad_input(bad: object) -> None:
    with pytest.raises(ValueError, match="offset message id"):
        decode_offset_msg_id(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "port", "offset"),
    [("not-an-ip", 1, 0), ("1.2.3.4", -1, 0), ("1.2.3.4", 70000, 0), ("1.2.3.4", 1, -5)],
)
def test_create_offset_msg_id_rejects_bad_input(host: str, port: int, offset: int) -> None:
    with pytest.raises(ValueError, match=r"range|IP address"):
        create_offset_msg_id(host, port, offset)


def test_uniq_key_layout_fields_decode() -> None:
    now = _ms(2024, 5, 17, 12, 0, 0)
    gen = UniqKeyGenerator(ip="10.0.0.7", pid=0x12345, class_loader_hash=-2, clock_ms=lambda: now)
    key = gen.next()
    assert len(key) == 32
    assert key == key.upper()
    assert key.startswith("0A000007" + "2345" + "FFFFFFFE")
    fields = decode_uniq_key(key)
    assert fields.ip == "10.0.0.7"
    assert fields.pid == 0x2345
    assert fields.class_loader_hash == -2
    assert fields.ms_since_month_start == now - _ms(2024, 5, 1)
    assert fields.counter == 0
    assert decode_uniq_key(gen.next()).counter == 1
    assert uniq_key_timestamp(key, now_ms=now + 1) == now


def test_uniq_key_unique_over_100k_calls() -> None:
    gen = UniqKeyGenerator()
    keys = [gen.next() for _ in range(100_000)]
    assert len(set(keys)) == len(keys)
    assert all(len(k) == 32 and k == k.upper() for k in keys[:1000])
    int(keys[-1], 16)


def test_uniq_key_counter_wraps_at_2_16() -> None:
    gen = UniqKeyGenerator(ip="1.2.3.4", pid=1, class_loader_hash=1, clock_ms=lambda: 10**12)
    counters = [decode_uniq_key(gen.next()).counter for _ in range(2**16 + 2)]
    assert counters[-3:] == [0xFFFF, 0, 1]


@pytest.mark.parametrize("start", [0, 0xFFFF - 3])
def test_next_many_matches_next_one_by_one(start: int) -> None:
    """A run of keys from one call equals the same run from single calls at the same time,
    the counter wrapping at 2**16 within the run too."""

    def gen() -> UniqKeyGenerator:
        g = UniqKeyGenerator(ip="1.2.3.4", pid=7, class_loader_hash=9, clock_ms=lambda: 10**12)
        for _ in range(start):
            g.next()
        return g

    one_by_one = gen()
    expected = [one_by_one.next() for _ in range(8)]
    many = gen()
    assert many.next_many(8) == expected
    assert many.next() == one_by_one.next()
    assert many.next_many(0) == []


def test_uniq_key_month_start_recomputed_on_month_change() -> None:
    now = [_ms(2024, 1, 31, 23, 59, 59)]
    gen = UniqKeyGenerator(ip="1.2.3.4", pid=1, class_loader_hash=1, clock_ms=lambda: now[0])
    first = decode_uniq_key(gen.next()).ms_since_month_start
    assert first == now[0] - _ms(2024, 1, 1)
    now[0] = _ms(2024, 2, 1, 0, 0, 5)
    assert decode_uniq_key(gen.next()).ms_since_month_start == 5000
    assert month_start_ms(now[0]) == _ms(2024, 2, 1)


def test_uniq_key_timestamp_from_previous_month() -> None:
    made = _ms(2024, 1, 31, 10, 0, 0)
    gen = UniqKeyGenerator(ip="1.2.3.4", pid=1, class_loader_hash=1, clock_ms=lambda: made)
    key = gen.next()
    assert uniq_key_timestamp(key, now_ms=_ms(2024, 2, 2)) == made


def test_uniq_key_ipv6_is_56_hex() -> None:
    gen = UniqKeyGenerator(ip="::1", pid=1, class_loader_hash=1, clock_ms=lambda: 10**12)
    key = gen.next()
    assert len(key) == 56
    assert decode_uniq_key(key).ip == "::1"


def test_decode_uniq_key_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="UNIQ_KEY"):
        decode_uniq_key("XYZ")


def _keys_from_a_forked_child(*generators: UniqKeyGenerator) -> tuple[int, list[str]]:
    """Fork; the child stamps one key with each generator. Returns its pid and the keys."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and never return into pytest
        try:
            os.write(write, " ".join(g.next() for g in generators).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 10)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError("the forked child hung")
        return pid, os.read(read, 4096).decode().split()
    finally:
        os.close(read)
        os.waitpid(pid, 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_stamps_keys_of_its_own() -> None:
    """Workers forked after the client was imported (a pre-forking server, a fork pool) must
    not stamp their parent's prefix: two of them would give different messages one id (the
    pid in the key is the parent's, and the counters run in step)."""
    own = UniqKeyGenerator()
    pinned = UniqKeyGenerator(ip="10.0.0.1", pid=7, class_loader_hash=1)
    pid, (own_key, producer_key, pinned_key) = _keys_from_a_forked_child(own, _UNIQ_KEYS, pinned)
    for key, parent in ((own_key, own), (producer_key, _UNIQ_KEYS)):
        assert decode_uniq_key(key).pid == pid & 0xFFFF
        assert not key.startswith(parent.prefix)
    assert pinned_key.startswith(pinned.prefix)  # what a test fixed stays fixed
