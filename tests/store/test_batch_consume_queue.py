"""BatchConsumeQueue (store/batch_consume_queue.py): the 46-byte unit, the binary searches, the
valid-prefix scan, and the queue's own files (put, lookup, truncation, recovery, expiry)."""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.message import MessageSysFlag
from store.batch_consume_queue import (
    BCQ_STORE_UNIT_SIZE,
    BatchConsumeQueue,
    BatchUnit,
    count_valid_units,
    find_unit_index,
    find_unit_index_by_time,
    inner_batch_size,
    pack_unit,
    unpack_unit,
)
from store.consume_queue import ConsumeQueueGapError
from store.dispatch_request import DispatchRequest

INNER = MessageSysFlag.INNER_BATCH_FLAG | MessageSysFlag.NEED_UNWRAP_FLAG
UNITS_PER_FILE = 4
FILE_SIZE = UNITS_PER_FILE * BCQ_STORE_UNIT_SIZE


# -- the unit ----------------------------------------------------------------------------------
def test_unit_bytes_match_a_vector_computed_by_hand() -> None:
    raw = pack_unit(0x1122, 0x33, -1, 0x0102030405060708, 300, 32)
    expected = bytes.fromhex(
        "0000000000001122"  # commitLogOffset i8
        "00000033"  # size i4
        "ffffffffffffffff"  # tagsCode i8 (-1)
        "0102030405060708"  # storeTime i8
        "000000000000012c"  # msgBaseOffset i8 (300)
        "0020"  # batchSize i2 (32)
        "00000000"  # compactedOffset i4
        "00000000"  # reserved i4
    )
    assert raw == expected
    assert len(raw) == BCQ_STORE_UNIT_SIZE == 46
    assert unpack_unit(raw, 0) == BatchUnit(0x1122, 0x33, -1, 0x0102030405060708, 300, 32)
    assert unpack_unit(raw, 0).end == 332


@given(
    st.integers(0, 2**62),
    st.integers(1, 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(1, 0x7FFF),
)
def test_unit_round_trip(phys: int, size: int, code: int, stamp: int, base: int, n: int) -> None:
    buf = b"\x00" * BCQ_STORE_UNIT_SIZE + pack_unit(phys, size, code, stamp, base, n)
    assert unpack_unit(buf, 1) == (phys, size, code, stamp, base, n)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", 1), ("32", 32), ("32767", 32767), ("0", None), ("32768", None), ("", None),
     ("-3", None), ("3a", None), ("٣", None), (None, None)],
)  # fmt: skip
def test_inner_batch_size(raw: str | None, expected: int | None) -> None:
    props = {} if raw is None else {"INNER_NUM": raw}
    assert inner_batch_size(props) == expected


# -- binary searches ---------------------------------------------------------------------------
def units_buffer(batches: list[int], first_base: int = 0, times: list[int] | None = None) -> bytes:
    """Units of consecutive batches of the given sizes from ``first_base``."""
    bases = list(accumulate(batches[:-1], initial=first_base)) if batches else []
    stamps = times or [1000 + i for i in range(len(batches))]
    return b"".join(
        pack_unit(100 * i, 10, 0, stamps[i], base, n)
        for i, (base, n) in enumerate(zip(bases, batches, strict=True))
    )


# batches 1, 32, 3, 1 -> bases 0, 1, 33, 36; ends at 37
_SEARCH_CASES = [
    (0, 0), (1, 1), (2, 1), (32, 1), (33, 2), (35, 2), (36, 3), (37, 3), (10**9, 3), (-1, -1),
]  # fmt: skip


@pytest.mark.parametrize(("offset", "index"), _SEARCH_CASES)
def test_find_unit_index_table(offset: int, index: int) -> None:
    buf = units_buffer([1, 32, 3, 1])
    assert find_unit_index(buf, 0, 4, offset) == index


def test_find_unit_index_within_a_sub_range() -> None:
    buf = units_buffer([1, 32, 3, 1])
    assert find_unit_index(buf, 2, 4, 5) == 1  # lo - 1: every base in [2, 4) is larger
    assert find_unit_index(buf, 2, 4, 34) == 2
    assert find_unit_index(buf, 0, 0, 34) == -1  # empty range


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=60), st.integers(0, 1000))
def test_find_unit_index_agrees_with_a_list_model(batches: list[int], first: int) -> None:
    buf = units_buffer(batches, first)
    model: list[int] = []  # unit index of every message offset from `first`
    for i, n in enumerate(batches):
        model += [i] * n
    for k, want in enumerate(model):
        assert find_unit_index(buf, 0, len(batches), first + k) == want
    assert find_unit_index(buf, 0, len(batches), first - 1) == -1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(0, 120))
def test_find_unit_index_by_time_agrees_with_a_list_model(steps: list[int], ts: int) -> None:
    times = list(accumulate(steps))  # non-decreasing store times, with repeats
    buf = units_buffer([1] * len(times), times=times)
    want = next((i for i, t in enumerate(times) if t >= ts), len(times))
    assert find_unit_index_by_time(buf, 0, len(times), ts) == want


# -- valid prefix ------------------------------------------------------------------------------
def test_count_valid_units_stops_at_zeros_a_bad_field_or_a_broken_chain() -> None:
    good = units_buffer([2, 3, 1])  # bases 0, 2, 5
    zeros = bytes(BCQ_STORE_UNIT_SIZE * 2)
    assert count_valid_units(good + zeros, 5) == 3
    assert count_valid_units(good, 3) == 3
    assert count_valid_units(good, 3, expected_base=0) == 3
    assert count_valid_units(good, 3, expected_base=7) == 0  # does not follow the file before
    stale = pack_unit(900, 10, 0, 5, 50, 1)  # valid fields, but not at base 6
    assert count_valid_units(good + stale, 4) == 3
    negative_size = pack_unit(300, -1, 0, 5, 6, 1)
    assert count_valid_units(good + negative_size, 4) == 3
    assert count_valid_units(b"", 0) == 0


# -- the queue ---------------------------------------------------------------------------------
def run(
    phys: int, qoff: int, sizes: list[int], batches: list[int] | None, stamp: int = 7
) -> DispatchRequest:
    """A dispatch run of records from ``phys``; ``batches`` makes them inner batches."""
    props = [{"INNER_NUM": str(n)} for n in batches] if batches else [{} for _ in sizes]
    return DispatchRequest(
        "T", 0, INNER if batches else 0, stamp, phys, phys + sum(sizes), qoff, sizes,
        [0] * len(sizes), props,
    )  # fmt: skip


@pytest.fixture
def bcq(tmp_path: Path) -> BatchConsumeQueue:
    return BatchConsumeQueue(tmp_path / "batchconsumequeue", "T", 0, FILE_SIZE)


def test_put_lookup_across_files_and_skips_present_units(bcq: BatchConsumeQueue) -> None:
    bcq.put([run(0, 0, [100, 100], [32, 32]), run(200, 64, [50], None)])
    bcq.put([run(250, 65, [100, 100, 100], [10, 1, 5])])  # rolls into a second file
    assert (bcq.min_offset, bcq.max_offset, bcq.max_physic_offset) == (0, 81, 550)
    assert len(bcq.queue.files) == 2
    bcq.put([run(250, 65, [100], [10])])  # already present: nothing written
    assert bcq.queue.max_offset == 6 * BCQ_STORE_UNIT_SIZE
    expect = {0: 0, 31: 0, 32: 100, 63: 100, 64: 200, 65: 250, 74: 250, 75: 350, 76: 450, 80: 450}
    for offset, phys in expect.items():
        assert bcq.unit_at(offset) == (phys, 100 if phys != 200 else 50, 0), offset
    assert bcq.unit_at(81) is None
    assert bcq.read_batch_units(70, 10) == [BatchUnit(250, 100, 0, 7, 65, 10)]  # file end
    assert bcq.queue.directory.parts[-3:] == ("batchconsumequeue", "T", "0")


def test_gap_raises_or_restarts(bcq: BatchConsumeQueue) -> None:
    bcq.put([run(0, 0, [100], [4])])
    with pytest.raises(ConsumeQueueGapError):
        bcq.put([run(100, 9, [100], [4])])
    bcq.put([run(100, 9, [100], [4])], allow_gap=True)
    assert (bcq.min_offset, bcq.max_offset) == (9, 13)
    assert bcq.unit_at(8) is None
    assert bcq.unit_at(9) == (100, 100, 0)


def test_empty_queue_starts_anywhere(bcq: BatchConsumeQueue) -> None:
    bcq.put([run(500, 40, [100], [8])])
    assert (bcq.min_offset, bcq.max_offset) == (40, 48)
    assert bcq.unit_at(47) == (500, 100, 0)


def test_recover_keeps_the_valid_chain_after_reload(tmp_path: Path, bcq: BatchConsumeQueue) -> None:
    bcq.put([run(0, 0, [100] * 6, [3, 1, 2, 5, 1, 4])])
    bcq.flush()
    last = bcq.queue.files[-1]
    # a stale unit after the end, as a power cut could leave: valid fields, wrong base
    last.mm[2 * BCQ_STORE_UNIT_SIZE : 3 * BCQ_STORE_UNIT_SIZE] = pack_unit(900, 9, 0, 7, 99, 1)
    bcq.close()
    again = BatchConsumeQueue(tmp_path / "batchconsumequeue", "T", 0, FILE_SIZE)
    again.load()
    again.recover()
    assert (again.min_offset, again.max_offset, again.max_physic_offset) == (0, 16, 600)
    assert again.queue.max_offset == 6 * BCQ_STORE_UNIT_SIZE


def test_truncate_dirty_cuts_units_at_or_past_an_offset(bcq: BatchConsumeQueue) -> None:
    bcq.put([run(0, 0, [100] * 6, [3, 1, 2, 5, 1, 4])])  # bases 0 3 4 6 11 12
    bcq.truncate_dirty(400)  # the records at 400 and 500 are cut
    assert (bcq.max_offset, bcq.max_physic_offset) == (11, 400)
    assert len(bcq.queue.files) == 1
    bcq.truncate_dirty(0)
    assert (bcq.min_offset, bcq.max_offset, bcq.max_physic_offset) == (0, 0, -1)


def test_delete_expired_and_correct_min_offset(bcq: BatchConsumeQueue) -> None:
    bcq.put([run(0, 0, [100] * 9, [2] * 9)])  # three files: 4 + 4 + 1 units
    assert bcq.delete_expired(450) == 1  # file 0 points below 400 only
    assert len(bcq.queue.files) == 2
    assert bcq.min_offset == 10  # unit at 500 (base 10): the one at 400 lies below 450
    bcq.correct_min_offset(10_000)  # everything gone: the minimum is the end
    assert bcq.min_offset == bcq.max_offset == 18
    assert bcq.unit_at(17) is None


def test_destroy(bcq: BatchConsumeQueue) -> None:
    bcq.put([run(0, 0, [100], [3])])
    directory = bcq.queue.directory
    bcq.destroy()
    assert bcq.destroyed
    assert not any(directory.iterdir())
    assert (bcq.min_offset, bcq.max_offset) == (0, 0)
