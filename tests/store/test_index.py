"""Tests for IndexFile and IndexService (store/index_file.py, store/index_service.py)."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.hashing import index_key_hash
from common.message import MessageSysFlag
from store.checkpoint import NO_INDEX_FILE, IndexMark
from store.dispatch_request import DispatchRequest, key_suffixes
from store.index_file import IndexFile, index_file_size
from store.index_service import IndexService, file_name_ms, name_between, timestamp_file_name
from tests.compiled import pure_only
from tests.conftest import ManualClock, small_store_config

HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
LONG_MAX = 2**63 - 1
T0 = 1_700_000_000_000


def arr(values: list[int]) -> np.ndarray:
    """An int64 array."""
    return np.array(values, dtype=np.int64)


def put_keys(f: IndexFile, keys: list[str], phys: list[int], stamps: list[int]) -> int:
    """Put string keys through ``put_batch``."""
    return f.put_batch(arr([index_key_hash(k) for k in keys]), arr(phys), arr(stamps))


def raw_header(path: Path) -> tuple[int, ...]:
    """The 40-byte header as read from the file on disk."""
    with open(path, "rb") as fh:
        return HEADER.unpack(fh.read(HEADER.size))


def raw_entry(data: bytes, slots: int, index_no: int) -> tuple[int, int, int, int]:
    """Entry ``index_no`` of a file's bytes."""
    return ENTRY.unpack_from(data, 40 + slots * 4 + index_no * 20)  # type: ignore[return-value]


def raw_slot(data: bytes, slot: int) -> int:
    """Slot value ``slot`` of a file's bytes."""
    return struct.unpack_from(">i", data, 40 + slot * 4)[0]


@pytest.fixture
def new_index(tmp_path: Path) -> Iterator:
    """Factory ``new_index(slots, num, **kw) -> IndexFile``; files closed at teardown."""
    made: list[IndexFile] = []

    def make(slots: int = 100, num: int = 400, **kw: int) -> IndexFile:
        f = IndexFile(tmp_path / timestamp_file_name(T0 + len(made)), slots, num, create=True, **kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


# -- RocketMQ's IndexFileTest ----------------------------------------------------------------


def test_rocketmq_vector_one_key_at_a_time(new_index) -> None:
    f = new_index(100, 400)
    for i in range(399):
        assert put_keys(f, [str(i)], [i], [T0]) == 1
    assert put_keys(f, ["399"], [399], [T0]) == 0  # the 400th fails
    assert f.is_write_full
    assert f.select_phy_offsets(index_key_hash("60"), 10, 0, LONG_MAX) == [60]


def test_rocketmq_vector_one_batch(new_index) -> None:
    f = new_index(100, 400)
    keys = [str(i) for i in range(400)]
    assert put_keys(f, keys, list(range(400)), [T0] * 400) == 399
    assert put_keys(f, ["x"], [1], [T0]) == 0
    assert f.select_phy_offsets(index_key_hash("60"), 10, 0, LONG_MAX) == [60]
    for i in (0, 1, 200, 398):
        assert f.select_phy_offsets(index_key_hash(str(i)), 10, 0, LONG_MAX) == [i]
    assert f.select_phy_offsets(index_key_hash("399"), 10, 0, LONG_MAX) == []


# -- layout ----------------------------------------------------------------------------------


def test_file_size_and_fresh_header(new_index) -> None:
    assert index_file_size(100, 400) == 40 + 400 + 8000
    f = new_index(100, 400, end_phy_offset=777, end_timestamp=T0)
    assert f.path.stat().st_size == 8440
    # a new file starts from the previous file's end, with indexCount 1
    assert raw_header(f.path) == (T0, T0, 777, 777, 0, 1)
    assert f.select_phy_offsets(0, 10, 0, LONG_MAX) == []


def test_header_fields_on_disk(new_index) -> None:
    f = new_index(10, 50)
    put_keys(f, ["a", "b", "c"], [100, 200, 300], [T0, T0 + 1500, T0 + 3000])
    put_keys(f, ["a", "d"], [400, 500], [T0 + 4000, T0 + 9999])
    slots_used = len({index_key_hash(k) % 10 for k in "abcd"})
    assert raw_header(f.path) == (T0, T0 + 9999, 100, 500, slots_used, 6)
    data = f.path.read_bytes()
    ha = index_key_hash("a")
    # entries 1..5 with time diffs in seconds from the begin timestamp
    assert raw_entry(data, 10, 1) == (ha, 100, 0, 0)
    assert raw_entry(data, 10, 2)[1:3] == (200, 1)
    assert raw_entry(data, 10, 3)[1:3] == (300, 3)
    assert raw_entry(data, 10, 4) == (ha, 400, 4, 1)  # prev = entry 1 (same key, same slot)
    assert raw_entry(data, 10, 5)[1:3] == (500, 9)
    assert raw_slot(data, ha % 10) == 4


def test_chain_in_one_slot_returns_newest_first(new_index) -> None:
    f = new_index(1, 50)
    keys = ["k1", "k2", "k1", "k3", "k1", "k2"]
    put_keys(f, keys[:3], [10, 20, 30], [T0] * 3)
    put_keys(f, keys[3:], [40, 50, 60], [T0] * 3)
    data = f.path.read_bytes()
    assert raw_slot(data, 0) == 6
    assert [raw_entry(data, 1, i)[3] for i in range(1, 7)] == [0, 1, 2, 3, 4, 5]
    assert raw_header(f.path)[4] == 1  # one slot used
    assert f.select_phy_offsets(index_key_hash("k1"), 10, 0, LONG_MAX) == [50, 30, 10]
    assert f.select_phy_offsets(index_key_hash("k2"), 10, 0, LONG_MAX) == [60, 20]
    assert f.select_phy_offsets(index_key_hash("k1"), 2, 0, LONG_MAX) == [50, 30]
    assert f.select_phy_offsets(index_key_hash("nope"), 10, 0, LONG_MAX) == []


def test_time_range_filtering(new_index) -> None:
    f = new_index(1, 50)
    stamps = [T0 + s * 1000 for s in range(10)]
    put_keys(f, ["k"] * 10, list(range(10)), stamps)
    h = index_key_hash("k")
    assert f.select_phy_offsets(h, 20, T0 + 3000, T0 + 6000) == [6, 5, 4, 3]
    assert f.select_phy_offsets(h, 20, T0 + 9000, LONG_MAX) == [9]
    assert f.select_phy_offsets(h, 20, 0, T0 + 500) == [0]
    assert f.select_phy_offsets(h, 20, T0 + 20_000, LONG_MAX) == []
    assert f.is_time_matched(T0 + 3000, T0 + 4000)
    assert f.is_time_matched(0, LONG_MAX)
    assert not f.is_time_matched(T0 + 10_000, T0 + 20_000)
    assert not f.is_time_matched(0, T0 - 1)


def test_time_diffs_are_clamped(new_index) -> None:
    f = new_index(1, 10)
    put_keys(f, ["a", "b", "c"], [1, 2, 3], [T0, T0 - 5000, T0 + (2**31 + 5) * 1000])
    data = f.path.read_bytes()
    assert [raw_entry(data, 1, i)[2] for i in (1, 2, 3)] == [0, 0, 2**31 - 1]


# -- repair ----------------------------------------------------------------------------------


def test_repair_tail_relinks_lost_slot_updates(new_index) -> None:
    keys = [f"key{i}" for i in range(30)]
    reference = new_index(7, 100)
    put_keys(reference, keys[:10], list(range(10)), [T0] * 10)
    put_keys(reference, keys[10:], list(range(10, 30)), [T0] * 20)

    crashed = new_index(7, 100)
    put_keys(crashed, keys[:10], list(range(10)), [T0] * 10)
    before = crashed.slots.copy()
    put_keys(crashed, keys[10:], list(range(10, 30)), [T0] * 20)
    crashed.slots[:] = before  # the crash: entries and header written, slot updates lost
    assert crashed.select_phy_offsets(index_key_hash("key29"), 5, 0, LONG_MAX) == []

    assert crashed.repair_tail() > 0
    for i, k in enumerate(keys):
        assert crashed.select_phy_offsets(index_key_hash(k), 5, 0, LONG_MAX) == [i]
    assert crashed.file.mm[:] == reference.file.mm[:]
    assert crashed.repair_tail() == 0


def test_repair_tail_on_a_healthy_file_does_nothing(new_index) -> None:
    f = new_index(3, 20)
    assert f.repair_tail() == 0
    put_keys(f, ["a", "b", "c", "d"], [1, 2, 3, 4], [T0] * 4)
    assert f.repair_tail() == 0


def test_cut_to_keeps_the_vouched_entries_and_repoints_slots(new_index) -> None:
    """Write-back saved the header and slots of later puts, not their entries: cut back to the
    count a checkpoint vouched for, the file is byte for byte what it was then, and goes on
    the same way."""
    keys = [f"key{i % 12}" for i in range(60)]  # 12 keys in 7 slots: long chains
    stamps = [T0 + i * 1000 for i in range(60)]
    reference = new_index(7, 100)
    put_keys(reference, keys[:25], list(range(25)), stamps[:25])
    put_keys(reference, keys[25:30], list(range(25, 30)), stamps[25:30])
    vouched = bytes(reference.file.mm)
    count, end_phy = reference.index_count, reference.end_phy_offset
    put_keys(reference, keys[30:], list(range(30, 60)), stamps[30:])

    crashed = new_index(7, 100)
    put_keys(crashed, keys[:30], list(range(30)), stamps[:30])
    put_keys(crashed, keys[30:], list(range(30, 60)), stamps[30:])
    entries = 40 + 7 * 4
    lost_from = entries + count * 20
    crashed.file.mm[lost_from:] = bytes(len(crashed.file.mm) - lost_from)  # entries lost
    assert crashed.select_phy_offsets(index_key_hash("key3"), 10, 0, LONG_MAX) == []  # slot

    assert crashed.cut_to(count, end_phy) > 0
    # all as it was then, but the end timestamp (later: a query's time range only widens)
    assert (
        crashed.file.mm[:8] + crashed.file.mm[16:lost_from] == vouched[:8] + vouched[16:lost_from]
    )
    assert (crashed.index_count, crashed.end_phy_offset) == (count, end_phy)
    assert crashed.cut_to(count, end_phy) == 0  # nothing more to do
    put_keys(crashed, keys[30:], list(range(30, 60)), stamps[30:])  # indexed again
    assert crashed.file.mm[:] == reference.file.mm[:]
    for key in set(keys):
        want = [i for i in reversed(range(60)) if keys[i] == key]
        assert crashed.select_phy_offsets(index_key_hash(key), 10, 0, LONG_MAX) == want


def test_cut_to_an_empty_file_clears_every_slot(new_index) -> None:
    f = new_index(5, 50)
    put_keys(f, ["a", "b", "c"], [0, 1, 2], [T0] * 3)
    assert f.cut_to(1, -1) == 3
    assert not f.slots.any()
    assert (f.index_count, f.hash_slot_count, f.end_phy_offset) == (1, 0, -1)
    assert raw_header(f.path)[3:] == (-1, 0, 1)


# -- put_batch == RocketMQ's putKey, one key at a time ---------------------------------------


class ReferenceIndex:
    """RocketMQ's ``IndexFile.putKey`` over a bytearray, written straight from the Java."""

    def __init__(self, slots: int, num: int, end_phy: int, end_ts: int) -> None:
        self.slots, self.num = slots, num
        self.buf = bytearray(index_file_size(slots, num))
        self.begin_ts = self.end_ts = end_ts
        self.begin_phy = self.end_phy = end_phy
        self.slot_count, self.index_count = 0, 1
        self.write_header()

    def write_header(self) -> None:
        HEADER.pack_into(
            self.buf,
            0,
            self.begin_ts,
            self.end_ts,
            self.begin_phy,
            self.end_phy,
            self.slot_count,
            self.index_count,
        )

    def put_key(self, key_hash: int, phy: int, ts: int) -> bool:
        if self.index_count >= self.num:
            return False
        slot_pos = 40 + (key_hash % self.slots) * 4
        slot_value = struct.unpack_from(">i", self.buf, slot_pos)[0]
        if slot_value <= 0 or slot_value > self.index_count:
            slot_value = 0
        diff = ts - self.begin_ts
        diff = abs(diff) // 1000 * (1 if diff >= 0 else -1)  # Java's long division
        if self.begin_ts <= 0:
            diff = 0
        elif diff > 2**31 - 1:
            diff = 2**31 - 1
        elif diff < 0:
            diff = 0
        pos = 40 + self.slots * 4 + self.index_count * 20
        ENTRY.pack_into(self.buf, pos, key_hash, phy, diff, slot_value)
        struct.pack_into(">i", self.buf, slot_pos, self.index_count)
        if self.index_count <= 1:
            self.begin_phy, self.begin_ts = phy, ts
        if slot_value == 0:
            self.slot_count += 1
        self.index_count += 1
        self.end_phy, self.end_ts = phy, ts
        self.write_header()
        return True


key_hashes = st.integers(0, 2**31 - 1) | st.integers(0, 40)
entries = st.tuples(key_hashes, st.integers(0, 2**62), st.integers(-(10**13), 2**45))
batches = st.lists(st.lists(entries, min_size=0, max_size=12), max_size=8)


@settings(max_examples=80, deadline=None)
@given(
    slots=st.integers(1, 13),
    num=st.integers(2, 40),
    end_phy=st.integers(0, 2**40),
    end_ts=st.integers(0, 2**42) | st.just(0),
    batches=batches,
)
@pytest.mark.parametrize("path", ["numpy", "python"])
def test_put_batch_matches_reference_put_key(
    path: str,
    slots: int,
    num: int,
    end_phy: int,
    end_ts: int,
    batches: list[list[tuple[int, int, int]]],
) -> None:
    """Both insert paths (numpy put_batch, pure-Python put_keys) write RocketMQ's bytes."""
    ref = ReferenceIndex(slots, num, end_phy, end_ts)
    with tempfile.TemporaryDirectory() as d:
        f = IndexFile(
            Path(d) / timestamp_file_name(T0),
            slots,
            num,
            create=True,
            end_phy_offset=end_phy,
            end_timestamp=end_ts,
        )
        try:
            for batch in batches:
                expected = sum(ref.put_key(h, p, t) for h, p, t in batch)
                if path == "numpy":
                    hs, ps, ts = (arr([e[i] for e in batch]) for i in range(3))
                    assert f.put_batch(hs, ps, ts) == expected
                else:
                    hl, pl, tl = ([e[i] for e in batch] for i in range(3))
                    assert f.put_keys(hl, pl, tl) == expected
                assert f.file.mm[:] == bytes(ref.buf)
        finally:
            f.close()


# -- IndexService ----------------------------------------------------------------------------


def dreq(phys: int, ts: int, *, keys: str = "", uniq: str = "", topic: str = "T", sys_flag=0):
    """A DispatchRequest with index keys."""
    props = {}
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    return DispatchRequest.single(topic, 0, phys, 100, 0, ts, 0, sys_flag, props)


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator:
    """Factory ``make(**config_overrides) -> IndexService`` under tmp_path; closed at teardown."""
    made: list[IndexService] = []
    clock = ManualClock(T0)

    def make(**overrides: object) -> IndexService:
        cfg = small_store_config(tmp_path / "store", **overrides)
        svc = IndexService(cfg, clock)
        made.append(svc)
        return svc

    make.clock = clock  # type: ignore[attr-defined]
    yield make
    for svc in made:
        svc.close()


def test_timestamp_file_name() -> None:
    name = timestamp_file_name(T0 + 42)
    assert len(name) == 17
    assert name.isdigit()
    assert name.endswith("042")
    assert file_name_ms(name) == T0 + 42


def test_name_between_prefers_the_wanted_time_then_later_free_ones() -> None:
    n = timestamp_file_name
    assert name_between(n(T0), n(T0 + 100), T0 + 50) == n(T0 + 50)
    assert name_between("", n(T0 + 100), T0 + 50) == n(T0 + 50)
    assert name_between(n(T0 + 60), n(T0 + 100), T0 + 50) == n(T0 + 61)  # after the lower one
    assert name_between(n(T0), n(T0 + 2), T0 + 5) == n(T0 + 1)  # wanted too late
    assert name_between("", n(T0 + 2), T0 + 5) == n(T0 + 1)
    assert name_between(n(T0), n(T0 + 1), T0) is None  # adjacent: no name in between


def test_service_builds_and_queries(service_factory) -> None:
    svc = service_factory()
    assert svc.indexed_up_to == -1
    svc.build_index(
        [
            dreq(0, T0, keys="k1 k2", uniq="U0"),
            dreq(100, T0 + 1000, keys="k1"),
            dreq(200, T0 + 2000, uniq="U2"),
            dreq(300, T0 + 3000, keys="k1", topic="Other"),
        ]
    )
    assert svc.indexed_up_to == 300
    assert svc.query_offsets("T", "k1", 10, 0, LONG_MAX)[0] == [100, 0]
    assert svc.query_offsets("T", "k2", 10, 0, LONG_MAX)[0] == [0]
    assert svc.query_offsets("T", "U2", 10, 0, LONG_MAX)[0] == [200]
    assert svc.query_offsets("Other", "k1", 10, 0, LONG_MAX)[0] == [300]
    offsets, last_ts, last_phy = svc.query_offsets("T", "k1", 10, T0 + 500, LONG_MAX)
    assert offsets == [100]
    assert (last_ts, last_phy) == (T0 + 3000, 300)


def test_service_skips_already_indexed_and_rollback(service_factory) -> None:
    svc = service_factory()
    svc.build_index([dreq(0, T0, keys="a"), dreq(100, T0, keys="a")])
    svc.build_index([dreq(0, T0, keys="a"), dreq(100, T0, keys="a"), dreq(200, T0, keys="a")])
    rollback = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    svc.build_index([dreq(300, T0, keys="a", sys_flag=rollback), dreq(400, T0)])
    assert svc.query_offsets("T", "a", 10, 0, LONG_MAX)[0] == [200, 100, 0]
    assert svc.files[-1].index_count == 4


def test_service_rolls_files_and_carries_end(service_factory) -> None:
    svc = service_factory(max_hash_slot_num=3, max_index_num=5)  # 4 entries per file
    reqs = [dreq(i * 100, T0 + i * 1000, keys="same") for i in range(10)]
    svc.build_index(reqs[:4])
    assert len(svc.files) == 1
    assert svc.files[0].is_write_full
    svc.build_index(reqs[4:])
    assert len(svc.files) == 3
    names = [f.path.name for f in svc.files]
    assert names == sorted(names)
    assert len(set(names)) == 3
    assert svc.unflushed_full == svc.files[:2]
    first, second, third = svc.files
    assert raw_header(first.path)[:4] == (T0, T0 + 3000, 0, 300)
    assert raw_header(second.path)[:4] == (T0 + 4000, T0 + 7000, 400, 700)
    assert raw_header(third.path)[4:] == (1, 3)
    # the newest file first; max_num is capped by max_msgs_num_batch
    got = svc.query_offsets("T", "same", 100, 0, LONG_MAX)[0]
    assert got == [i * 100 for i in reversed(range(10))]
    assert svc.query_offsets("T", "same", 3, 0, LONG_MAX)[0] == [900, 800, 700]
    assert svc.query_offsets("T", "same", 100, T0 + 4000, T0 + 5000)[0] == [500, 400]
    svc.flush()
    assert svc.unflushed_full == []
    assert svc.last_full_end_timestamp == T0 + 7000


def test_rolled_file_starts_from_previous_end(service_factory) -> None:
    svc = service_factory(max_hash_slot_num=3, max_index_num=3)  # 2 entries per file
    svc.build_index([dreq(0, T0, keys="a"), dreq(100, T0 + 5000, keys="b")])
    # the next file is created when needed; its first entry's time diff is taken from the
    # previous file's end timestamp, as RocketMQ does, and then the begin fields move
    svc.build_index([dreq(200, T0 + 9000, keys="c")])
    second = svc.files[1]
    data = second.path.read_bytes()
    assert raw_entry(data, 3, 1)[1:3] == (200, 4)
    assert raw_header(second.path)[:4] == (T0 + 9000, T0 + 9000, 200, 200)


def test_max_num_capped_by_batch_setting(service_factory) -> None:
    svc = service_factory(max_hash_slot_num=1, max_msgs_num_batch=4)
    svc.build_index([dreq(i * 100, T0, keys="k") for i in range(10)])
    assert len(svc.query_offsets("T", "k", 32, 0, LONG_MAX)[0]) == 4


def test_service_load_and_delete_expired(service_factory, tmp_path: Path) -> None:
    svc = service_factory(max_hash_slot_num=3, max_index_num=5)
    svc.build_index([dreq(i * 100, T0 + i, keys=f"k{i}") for i in range(10)])
    svc.flush()
    svc.close()
    index_dir = tmp_path / "store" / "index"
    (index_dir / "garbage.tmp").write_bytes(b"x")
    (index_dir / "20000101000000000").write_bytes(b"short")
    again = service_factory(max_hash_slot_num=3, max_index_num=5)
    again.load(last_exit_ok=True)
    assert len(again.files) == 3
    assert sorted(p.name for p in index_dir.iterdir()) == [f.path.name for f in again.files]
    assert again.indexed_up_to == 900
    assert again.query_offsets("T", "k5", 10, 0, LONG_MAX)[0] == [500]
    # files whose every entry points below the commitlog's start go; never the last one
    assert again.delete_expired(400) == 1
    assert again.delete_expired(10**9) == 1
    assert len(again.files) == 1
    assert again.query_offsets("T", "k9", 10, 0, LONG_MAX)[0] == [900]


def test_service_load_repairs_after_crash(service_factory) -> None:
    svc = service_factory(max_hash_slot_num=5, max_index_num=50)
    svc.build_index([dreq(0, T0, keys="a b c")])
    f = svc.files[-1]
    before = f.slots.copy()
    svc.build_index([dreq(100, T0, keys="d e f g")])
    f.slots[:] = before
    svc.close()
    again = service_factory(max_hash_slot_num=5, max_index_num=50)
    again.load(last_exit_ok=False)
    for key, phys in [("a", 0), ("d", 100), ("g", 100)]:
        assert again.query_offsets("T", key, 10, 0, LONG_MAX)[0] == [phys]


def test_service_load_repairs_every_file_after_crash(service_factory) -> None:
    """A power cut keeps each file as its last sync left it: an older, full file can hold a
    batch's entries and header without its slots, when a sync ran in the middle of the put."""
    svc = service_factory(max_hash_slot_num=3, max_index_num=5)  # 4 entries per file
    svc.build_index([dreq(0, T0, keys="a")])
    first = svc.files[0]
    before = first.slots.copy()
    svc.build_index([dreq(100, T0, keys="b c d")])  # fills the first file
    first.slots[:] = before
    svc.build_index([dreq(200, T0, keys="e f")])  # in the second file
    assert len(svc.files) == 2
    svc.close()
    again = service_factory(max_hash_slot_num=3, max_index_num=5)
    again.load(last_exit_ok=False)
    for key, phys in [("a", 0), ("b", 100), ("d", 100), ("f", 200)]:
        assert again.query_offsets("T", key, 10, 0, LONG_MAX)[0] == [phys]


def test_service_load_cuts_back_to_the_checkpoints_mark(service_factory) -> None:
    """After a crash, files newer than the mark go and the marked file keeps the entries it had
    then: what dispatch indexes again is exactly what was lost."""
    svc = service_factory(max_hash_slot_num=3, max_index_num=5)  # 4 entries per file
    reqs = [dreq(i * 100, T0 + i, keys=f"k{i % 3}") for i in range(14)]
    assert svc.durable_mark() == IndexMark(NO_INDEX_FILE, 0, -1)
    svc.build_index(reqs[:6])
    mark = svc.durable_mark()
    assert mark == IndexMark(int(svc.files[1].path.name), 3, 500)
    svc.build_index(reqs[6:])
    assert len(svc.files) == 4
    names = [f.path.name for f in svc.files]
    svc.close()

    again = service_factory(max_hash_slot_num=3, max_index_num=5)
    again.load(last_exit_ok=False, mark=mark)
    assert [f.path.name for f in again.files] == names[:2]
    assert sorted(p.name for p in again.directory.iterdir()) == names[:2]
    assert again.indexed_up_to == 500
    assert again.query_offsets("T", "k0", 10, 0, LONG_MAX)[0] == [300, 0]
    again.build_index(reqs)  # dispatch from the mark on
    for k in range(3):
        want = [i * 100 for i in reversed(range(14)) if i % 3 == k]
        assert again.query_offsets("T", f"k{k}", 10, 0, LONG_MAX)[0] == want


def test_service_load_with_a_mark_from_before_any_file_removes_them_all(
    service_factory,
) -> None:
    svc = service_factory()
    svc.build_index([dreq(0, T0, keys="a")])
    svc.close()
    again = service_factory()
    again.load(last_exit_ok=False, mark=IndexMark(NO_INDEX_FILE, 0, -1))
    assert again.files == []
    assert again.indexed_up_to == -1
    assert list(again.directory.iterdir()) == []


def test_cut_past_drops_every_entry_at_or_past_the_cut(service_factory) -> None:
    svc = service_factory(max_hash_slot_num=3, max_index_num=5)  # 4 entries per file
    svc.build_index([dreq(i * 100, T0 + i, keys="k") for i in range(8)])  # two full files
    svc.build_index([dreq(800, T0 + 8)])  # keyless: a third file, empty but for its end
    assert [f.index_count for f in svc.files] == [5, 5, 1]
    svc.cut_past(801)  # nothing points past it
    assert len(svc.files) == 3
    assert svc.indexed_up_to == 800
    svc.cut_past(350)  # inside the first file
    assert [f.index_count for f in svc.files] == [5]  # its four entries kept
    assert len(list(svc.directory.iterdir())) == 1
    assert svc.indexed_up_to == 300
    assert svc.query_offsets("T", "k", 10, 0, LONG_MAX)[0] == [300, 200, 100, 0]
    svc.build_index([dreq(350, T0 + 9, keys="k")])  # what lands there next is indexed
    assert svc.query_offsets("T", "k", 10, 0, LONG_MAX)[0] == [350, 300, 200, 100, 0]


@pure_only("store.index_file", "IndexFile._after_put")
def test_a_flush_caught_inside_a_put_is_followed_by_another(
    new_index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush thread can sync while a put has written entries and header but not yet its
    slots; the next flush must sync again, though the header has not changed since."""
    f = new_index(7, 100)
    synced: list[bytes] = []
    real_sync = f.file.sync
    monkeypatch.setattr(f.file, "sync", lambda: (synced.append(bytes(f.file.mm)), real_sync()))
    after_put = f._after_put

    def header_then_flush(*args: object) -> None:
        after_put(*args)  # type: ignore[arg-type]
        f.flush()  # the worker thread's flush, between the header and the slots

    monkeypatch.setattr(f, "_after_put", header_then_flush)
    put_keys(f, ["a", "b", "c"], [0, 100, 200], [T0] * 3)
    monkeypatch.setattr(f, "_after_put", after_put)
    assert len(synced) == 1
    assert synced[-1] != bytes(f.file.mm)  # it missed the slots
    f.flush()
    assert len(synced) == 2
    assert synced[-1] == bytes(f.file.mm)
    f.flush()
    assert len(synced) == 2  # nothing new since


def test_keyless_records_count_as_indexed(service_factory) -> None:
    """Recovery must not rescan keyless records: the index records how far it has seen."""
    svc = service_factory()
    assert svc.indexed_up_to == -1
    svc.build_index([dreq(0, T0), dreq(100, T0 + 1000)])
    assert svc.indexed_up_to == 100
    assert svc.files[-1].index_count == 1  # no entry was written
    svc.build_index([dreq(200, T0 + 2000, keys="k")])
    svc.build_index([dreq(300, T0 + 3000)])
    assert svc.indexed_up_to == 300
    assert svc.query_offsets("T", "k", 10, 0, LONG_MAX)[0] == [200]


single_records = st.lists(
    st.tuples(
        st.sampled_from(["T", "Other", "t_2"]),
        st.sampled_from(["", "U", "7F0000011659", "UNIQ-ÄÖ"]),
        st.sampled_from(["", "k", "order-42", "a b", " a", "ключ"]),
        st.sampled_from([0, 1, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE]),
    ),
    min_size=1,
    max_size=40,
)


one_topic_records = st.lists(  # the usual stream: one topic, every record with a UNIQ_KEY
    st.tuples(
        st.just("T"),
        st.sampled_from(["U", "7F0000011659", "UNIQ-ÄÖ"]),
        st.sampled_from(["", "k", "order-42", "a b"]),
        st.sampled_from([0, 1]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(records=st.one_of(single_records, one_topic_records), split=st.integers(1, 40))
def test_single_send_runs_index_every_key_in_record_order(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[tuple[str, str, str, int]],
    split: int,
) -> None:
    """Runs of one record each (single sends) give the entries a record-by-record build
    gives: each record's UNIQ_KEY then its keys, in commitlog order, none for a rollback."""
    cfg = small_store_config(tmp_path_factory.mktemp("idx") / "store")
    svc = IndexService(cfg, ManualClock(T0))
    try:
        reqs = [
            dreq(i * 100, T0 + i, keys=k, uniq=u, topic=t, sys_flag=f)
            for i, (t, u, k, f) in enumerate(records)
        ]
        for start in range(0, len(reqs), split):
            svc.build_index(reqs[start : start + split])
        expected = [
            (index_key_hash(f"{req.topic}#{suffix}"), req.phys_offset)
            for req in reqs
            if req.sys_flag != MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
            for suffix in key_suffixes(req.properties[0])
        ]
        got = []
        for f in svc.files:
            data = f.file.mm[:]
            for i in range(1, f.index_count):
                key_hash, phys, _, _ = raw_entry(data, f.hash_slot_num, i)
                got.append((key_hash, phys))
        assert got == expected
        assert svc.indexed_up_to == reqs[-1].phys_offset
    finally:
        svc.close()
