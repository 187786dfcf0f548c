"""Tests for ConsumeQueue (store/consume_queue.py): RocketMQ's 20-byte units."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.consume_queue import (
    BLANK_UNIT,
    ConsumeQueue,
    ConsumeQueueGapError,
    count_valid_units,
)
from store.dispatch_request import DispatchRequest
from store.mapped_file import offset_to_name

UNITS_PER_FILE = 5
FILE_SIZE = 20 * UNITS_PER_FILE
RECORD = 100  # every fake record is 100 bytes long in these tests


def req(queue_offset: int, *, phys: int | None = None, size: int = RECORD, tags_code: int = 0):
    """A DispatchRequest for TopicTest/0 whose record lies at ``queue_offset * RECORD``."""
    return DispatchRequest.single(
        "TopicTest",
        0,
        queue_offset * RECORD if phys is None else phys,
        size,
        tags_code,
        0,
        queue_offset,
        0,
        {},
    )


def reqs(start: int, stop: int) -> list[DispatchRequest]:
    """Requests for queue offsets [start, stop)."""
    return [req(i, tags_code=i * 7 - 3) for i in range(start, stop)]


def unit(offset: int, size: int, code: int) -> bytes:
    """One unit as RocketMQ writes it."""
    return struct.pack(">qiq", offset, size, code)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The consumequeue root directory."""
    return tmp_path / "consumequeue"


@pytest.fixture
def cq(root: Path) -> Iterator[ConsumeQueue]:
    """An empty queue TopicTest/0 with 5 units per file."""
    q = ConsumeQueue(root, "TopicTest", 0, FILE_SIZE)
    yield q
    q.close()


def reopen(root: Path, flushed_below: int = 0) -> ConsumeQueue:
    """Load and recover TopicTest/0 from disk."""
    q = ConsumeQueue(root, "TopicTest", 0, FILE_SIZE)
    q.load()
    q.recover(flushed_below)
    return q


def qdir(root: Path) -> Path:
    """Directory of TopicTest/0."""
    return root / "TopicTest" / "0"


def file_names(root: Path) -> list[str]:
    """Sorted file names of TopicTest/0."""
    return sorted(p.name for p in qdir(root).iterdir())


def test_units_are_20_bytes_big_endian(cq: ConsumeQueue, root: Path) -> None:
    cq.put([req(0, phys=0x0102030405060708, size=0x11223344, tags_code=-2)])
    raw = (qdir(root) / offset_to_name(0)).read_bytes()
    assert raw[:20] == bytes.fromhex("0102030405060708 11223344 fffffffffffffffe")
    assert raw[20:] == bytes(FILE_SIZE - 20)
    assert unit(1, 2, 3) == bytes.fromhex("0000000000000001 00000002 0000000000000003")
    assert unit(0, 0x7FFFFFFF, 0) == BLANK_UNIT


def test_put_and_read(cq: ConsumeQueue) -> None:
    assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == (0, 0, -1)
    cq.put(reqs(0, 3))
    assert (cq.min_offset, cq.max_offset) == (0, 3)
    assert cq.max_physic_offset == 3 * RECORD
    assert cq.unit_at(1) == (RECORD, RECORD, 4)
    assert cq.read_units(0, 10) == b"".join(unit(i * RECORD, RECORD, i * 7 - 3) for i in range(3))
    assert cq.read_units(3, 10) == b""  # end of written data
    assert cq.unit_at(3) is None


def test_roll_across_files(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 12))
    assert file_names(root) == [offset_to_name(0), offset_to_name(100), offset_to_name(200)]
    assert cq.max_offset == 12
    # reads never cross a file's end
    assert len(cq.read_units(3, 10) or b"") == 2 * 20
    assert cq.unit_at(5) == (5 * RECORD, RECORD, 32)
    assert cq.unit_at(11) == (11 * RECORD, RECORD, 74)
    assert cq.roll_next_file(3) == 5
    assert cq.roll_next_file(5) == 10
    # a batch that spans a file boundary in one put
    cq.put(reqs(12, 18))
    assert cq.max_offset == 18
    assert [cq.unit_at(i)[0] for i in range(18)] == [i * RECORD for i in range(18)]  # type: ignore[index]


def test_put_is_idempotent(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 4))
    before = (qdir(root) / offset_to_name(0)).read_bytes()
    cq.put(reqs(0, 4))
    cq.put(reqs(2, 3))
    assert cq.max_offset == 4
    assert (qdir(root) / offset_to_name(0)).read_bytes() == before
    cq.put(reqs(2, 7))  # overlapping: only 4..6 are new
    assert cq.max_offset == 7
    assert [cq.unit_at(i)[0] for i in range(7)] == [i * RECORD for i in range(7)]  # type: ignore[index]


def test_gap_raises(cq: ConsumeQueue) -> None:
    cq.put(reqs(0, 3))
    with pytest.raises(ConsumeQueueGapError) as exc:
        cq.put(reqs(5, 6))
    err = exc.value
    assert (err.topic, err.queue_id, err.expected, err.got) == ("TopicTest", 0, 3, 5)
    assert cq.max_offset == 3


def test_allow_gap_restarts_the_queue(cq: ConsumeQueue) -> None:
    cq.put(reqs(0, 3))
    cq.put(reqs(7, 9), allow_gap=True)
    assert (cq.min_offset, cq.max_offset) == (7, 9)
    assert cq.unit_at(7) == (7 * RECORD, RECORD, 46)


def test_empty_queue_starting_past_zero_is_pre_blanked(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(7, 9))
    assert file_names(root) == [offset_to_name(100)]  # the file holding unit 7
    raw = (qdir(root) / offset_to_name(100)).read_bytes()
    assert raw[:40] == BLANK_UNIT * 2  # units 5 and 6
    assert raw[40:60] == unit(7 * RECORD, RECORD, 46)
    assert (cq.min_offset, cq.max_offset) == (7, 9)
    assert cq.unit_at(5) == (0, 0x7FFFFFFF, 0)
    assert cq.read_units(2, 1) is None  # no file there
    cq.close()
    again = reopen(root)
    try:
        assert (again.min_offset, again.max_offset) == (7, 9)
        assert again.max_physic_offset == 9 * RECORD
    finally:
        again.close()


def test_recover_round_trip(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 13))
    cq.flush()
    cq.close()
    again = reopen(root)
    try:
        assert (again.min_offset, again.max_offset) == (0, 13)
        assert again.max_physic_offset == 13 * RECORD
        again.put(reqs(13, 15))
        assert again.max_offset == 15
    finally:
        again.close()


def test_recover_keeps_valid_prefix(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 8))
    cq.close()
    path = qdir(root) / offset_to_name(100)
    raw = bytearray(path.read_bytes())
    raw[2 * 20 + 8 : 2 * 20 + 12] = bytes(4)  # unit 7: size 0 = torn write
    path.write_bytes(raw)
    again = reopen(root)
    try:
        assert again.max_offset == 7
        assert again.max_physic_offset == 7 * RECORD
        assert path.read_bytes()[40:] == bytes(FILE_SIZE - 40)  # dirty tail cut
    finally:
        again.close()


def test_recover_cuts_invalid_tail_and_later_files(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 12))
    cq.close()
    path = qdir(root) / offset_to_name(0)
    raw = bytearray(path.read_bytes())
    raw[3 * 20 : 5 * 20] = unit(-1, RECORD, 0) * 2  # units 3 and 4: negative offset
    path.write_bytes(raw)
    again = reopen(root)
    try:
        assert again.max_offset == 3
        assert file_names(root) == [offset_to_name(0)]
    finally:
        again.close()


def test_recover_stops_at_a_hole_even_with_valid_units_after_it(root: Path) -> None:
    """A power cut can write back a later page and not an earlier one: units after a hole are
    not kept, wherever a search through the file would land."""
    wide = ConsumeQueue(root, "TopicTest", 1, 20 * 64)
    wide.put([req(i, tags_code=i) for i in range(64)])
    wide.close()
    path = root / "TopicTest" / "1" / offset_to_name(0)
    for hole in (1, 17, 31, 32, 33, 62):
        raw = bytearray(b"".join(unit(i * RECORD, RECORD, i) for i in range(64)))
        raw[hole * 20 : (hole + 1) * 20] = bytes(20)
        path.write_bytes(raw)
        again = ConsumeQueue(root, "TopicTest", 1, 20 * 64)
        again.load()
        again.recover()
        try:
            assert again.max_offset == hole
            assert again.max_physic_offset == hole * RECORD
            assert path.read_bytes()[hole * 20 :] == bytes(20 * (64 - hole))
        finally:
            again.close()


@pytest.mark.parametrize("flushed_below", [0, 3 * RECORD, 5 * RECORD + 1, 10 * RECORD + 1])
def test_recover_stops_at_a_file_that_came_back_empty(
    cq: ConsumeQueue, root: Path, flushed_below: int
) -> None:
    """Write-back can save a later file and not an earlier one: the later files are cut,
    however far back the empty one lies (the checkpoint vouches for units below
    ``flushed_below``; an empty file's first unit vouches for nothing)."""
    cq.put(reqs(0, 40))  # 8 files of 5 units
    cq.close()
    (qdir(root) / offset_to_name(200)).write_bytes(bytes(FILE_SIZE))  # units 10..14 lost
    again = reopen(root, flushed_below)
    try:
        assert again.max_offset == 10
        assert file_names(root) == [offset_to_name(i * FILE_SIZE) for i in range(3)]
    finally:
        again.close()


def _naive_valid_units(buf: bytes, count: int) -> int:
    for i in range(count):
        off, size, _ = struct.unpack_from(">qiq", buf, i * 20)
        if not (off >= 0 and size > 0):
            return i
    return count


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-(1 << 63), (1 << 63) - 1),
            st.integers(-(1 << 31), (1 << 31) - 1),
            st.integers(-(1 << 63), (1 << 63) - 1),
        )
        | st.tuples(st.integers(0, 1 << 40), st.integers(1, 1 << 20), st.integers(0, 9)),
        max_size=40,
    ),
    st.integers(0, 45),
)
def test_count_valid_units_is_the_first_invalid_unit(
    units: list[tuple[int, int, int]], count: int
) -> None:
    buf = b"".join(unit(*u) for u in units)
    count = min(count, len(units))
    assert count_valid_units(buf, count) == _naive_valid_units(buf, count)


def test_recover_of_full_last_file(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 10))
    cq.close()
    again = reopen(root)
    try:
        assert again.max_offset == 10
        again.put(reqs(10, 11))  # rolls into a new file
        assert file_names(root)[-1] == offset_to_name(200)
    finally:
        again.close()


def test_truncate_dirty_by_physical_offset(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 12))
    cq.truncate_dirty(7 * RECORD + 1)  # unit 7 points below, unit 8 at/after
    assert cq.max_offset == 8
    assert cq.max_physic_offset == 8 * RECORD
    assert file_names(root) == [offset_to_name(0), offset_to_name(100)]
    cq.truncate_dirty(5 * RECORD)  # cuts all of the second file's units
    assert cq.max_offset == 5
    assert cq.max_physic_offset == 5 * RECORD
    cq.truncate_dirty(2 * RECORD)
    assert cq.max_offset == 2
    assert file_names(root) == [offset_to_name(0)]
    cq.truncate_dirty(0)
    assert cq.max_offset == 0
    assert cq.max_physic_offset == -1
    cq.put(reqs(0, 1))
    assert cq.max_offset == 1


def test_truncate_dirty_looks_past_an_empty_last_file(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 7))
    cq.close()
    path = qdir(root) / offset_to_name(100)
    path.write_bytes(bytes(FILE_SIZE))  # units 5 and 6 never reached the disk
    again = reopen(root)
    try:
        assert again.max_offset == 5
        assert file_names(root) == [offset_to_name(0), offset_to_name(100)]
        again.truncate_dirty(3 * RECORD)  # units 3 and 4 of the full first file must go
        assert again.max_offset == 3
        assert again.max_physic_offset == 3 * RECORD
        again.put(reqs(3, 6))
        assert [again.unit_at(i)[0] for i in range(6)] == [i * RECORD for i in range(6)]  # type: ignore[index]
    finally:
        again.close()


def test_truncate_dirty_keeps_everything_below(cq: ConsumeQueue) -> None:
    cq.put(reqs(0, 7))
    cq.truncate_dirty(10**9)
    assert cq.max_offset == 7


def test_truncate_dirty_in_pre_blanked_queue(cq: ConsumeQueue) -> None:
    cq.put(reqs(7, 9))
    cq.truncate_dirty(8 * RECORD)
    assert (cq.min_offset, cq.max_offset) == (7, 8)
    cq.truncate_dirty(0)
    assert cq.max_offset == 7  # the blank filler stays; the queue stays "starting at 7"
    assert cq.min_offset == 7


def test_delete_expired_and_correct_min_offset(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 12))
    # the commitlog now starts at record 7: file 0 (units 0-4) is fully expired
    assert cq.delete_expired(7 * RECORD) == 1
    assert file_names(root) == [offset_to_name(100), offset_to_name(200)]
    assert cq.min_offset == 7
    assert cq.read_units(3, 1) is None
    cq.correct_min_offset(9 * RECORD)
    assert cq.min_offset == 9
    cq.correct_min_offset(0)  # never moves back
    assert cq.min_offset == 9


def test_delete_expired_never_deletes_last_file(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 7))
    assert cq.delete_expired(10**9) == 1
    assert file_names(root) == [offset_to_name(100)]
    assert cq.max_offset == 7
    assert cq.min_offset == 7  # every unit points below the commitlog: nothing readable


def test_destroy(cq: ConsumeQueue, root: Path) -> None:
    cq.put(reqs(0, 7))
    cq.destroy()
    assert file_names(root) == []
    assert (cq.max_offset, cq.max_physic_offset) == (0, -1)


@settings(max_examples=100, deadline=None)
@given(
    puts=st.lists(
        st.tuples(st.integers(0, 14), st.integers(1, 8), st.booleans(), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_runs_together_write_what_records_one_by_one_write(
    tmp_path_factory: pytest.TempPathFactory, puts: list[tuple[int, int, bool, bool]]
) -> None:
    """A put of many single-record runs, or of one run of many records (its units packed in one
    call), leaves the bytes that putting each record alone leaves, whether the records continue
    the queue, overlap it or leave a gap."""
    root = tmp_path_factory.mktemp("cq")
    together = ConsumeQueue(root / "together", "TopicTest", 0, FILE_SIZE)
    alone = ConsumeQueue(root / "alone", "TopicTest", 0, FILE_SIZE)
    try:
        for start, count, gap, one_run in puts:
            singles = reqs(start, start + count)
            runs = [run_of(singles)] if one_run else singles
            outcomes = []
            for q, batches in ((together, [runs]), (alone, [[r] for r in singles])):
                try:
                    for batch in batches:
                        q.put(batch, allow_gap=gap)
                    outcomes.append(None)
                except ConsumeQueueGapError as exc:
                    outcomes.append((exc.expected, exc.got))
            assert outcomes[0] == outcomes[1]
            assert (together.min_offset, together.max_offset, together.max_physic_offset) == (
                alone.min_offset,
                alone.max_offset,
                alone.max_physic_offset,
            )
            assert file_contents(root / "together") == file_contents(root / "alone")
    finally:
        together.close()
        alone.close()


def file_contents(root: Path) -> list[tuple[str, bytes]]:
    """Name and bytes of each consume-queue file under ``root``."""
    return [(p.name, p.read_bytes()) for p in sorted((root / "TopicTest" / "0").iterdir())]


def run_of(singles: list[DispatchRequest]) -> DispatchRequest:
    """One run holding the records of ``singles`` (consecutive, as :func:`reqs` makes them)."""
    first, last = singles[0], singles[-1]
    return first._replace(
        end_offset=last.end_offset,
        sizes=[r.sizes[0] for r in singles],
        tags_codes=[r.tags_codes[0] for r in singles],
        properties=[r.properties[0] for r in singles],
    )
