"""check_store: silent on a healthy store, and names each kind of damage it is shown."""

from __future__ import annotations

import struct

import pytest

from common.message import MessageSysFlag
from store import MessageStore, PutStatus
from store.consume_queue import CQ_STORE_UNIT_SIZE
from store.invariants import check_store
from tests.conftest import ManualClock, drain_dispatch, make_msg

TOPICS = ("TopicA", "TopicB")
QUEUES = 3


def fill(store: MessageStore, clock: ManualClock, n: int = 600) -> list[tuple[str, int, int, int]]:
    """Put ``n`` messages (singles and batches) over 2 topics x 3 queues; return their identities.

    Each identity is ``(topic, queue_id, queue_offset, commitlog_offset)``. Enough data to roll
    commitlog, consume-queue and index files with the small test geometry.
    """
    out: list[tuple[str, int, int, int]] = []
    i = 0
    while i < n:
        size = 1 if i % 3 else 4
        msgs = [
            make_msg(
                TOPICS[(i + j) % 2],
                f"body-{i + j}-".encode() * (1 + (i + j) % 20),
                (i + j) % QUEUES,
                tags=f"tag{(i + j) % 4}" if (i + j) % 5 else None,
                keys=[f"key-{i + j}", f"group-{(i + j) % 30}"],
                uniq_key=f"UNIQ{i + j:08d}",
            )
            for j in range(size)
        ]
        clock.advance(7)
        result = store.put_messages(msgs)
        assert result.status is PutStatus.PUT_OK
        out.extend(
            (m.topic, m.queue_id, q, p)
            for m, q, p in zip(msgs, result.queue_offsets, result.phys_offsets, strict=True)
        )
        i += size
    drain_dispatch(store)
    return out


def unit_position(store: MessageStore, topic: str, queue_id: int, queue_offset: int):
    """The mapped file and byte position of a consume-queue unit."""
    cq = store.find_consume_queue(topic, queue_id)
    assert cq is not None
    byte_offset = queue_offset * CQ_STORE_UNIT_SIZE
    mf = cq.queue.find(byte_offset)
    assert mf is not None
    return mf, byte_offset - mf.file_from_offset


def test_healthy_store_has_no_problems(store: MessageStore, manual_clock: ManualClock) -> None:
    ids = fill(store, manual_clock)
    # a prepared transaction half: in the commitlog and the index, never in a consume queue
    prepared = make_msg("TopicA", b"half", 0, keys="txn-key")
    prepared.sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE
    assert store.put_message(prepared).status is PutStatus.PUT_OK
    drain_dispatch(store)
    assert len(store.commitlog.queue.files) >= 3
    assert len(store.index.files) > 2
    assert max(len(cq.queue.files) for cq in store.consume_queues()) >= 2
    assert len(ids) == 600
    assert check_store(store) == []


def test_healthy_after_reopen(store_config, manual_clock: ManualClock) -> None:
    with MessageStore(store_config, clock_ms=manual_clock) as s:
        fill(s, manual_clock, 300)
    with MessageStore(store_config, clock_ms=manual_clock) as s:
        assert check_store(s) == []


def test_unit_pointing_at_the_wrong_offset(store: MessageStore, manual_clock: ManualClock) -> None:
    ids = fill(store, manual_clock)
    topic, qid, qoff, phys = next(x for x in ids if x[0] == "TopicB" and x[2] == 57)
    mf, pos = unit_position(store, topic, qid, qoff)
    assert struct.unpack_from(">q", mf.mm, pos)[0] == phys
    struct.pack_into(">q", mf.mm, pos, phys + 20)
    problems = check_store(store)
    assert problems
    assert any(f"{topic}/{qid}: unit at queue offset {qoff}" in p for p in problems), problems
    assert all(f"{topic}/{qid}" in p for p in problems), problems


def test_unit_pointing_at_another_queues_record(
    store: MessageStore, manual_clock: ManualClock
) -> None:
    ids = fill(store, manual_clock)
    _, _, _, other_phys = next(x for x in ids if x[0] == "TopicA" and x[1] == 1 and x[2] == 10)
    mf, pos = unit_position(store, "TopicA", 2, 10)
    struct.pack_into(">q", mf.mm, pos, other_phys)
    problems = check_store(store)
    assert any("TopicA/2: unit at queue offset 10" in p and "TopicA/1" in p for p in problems)


def test_wrong_tags_code(store: MessageStore, manual_clock: ManualClock) -> None:
    fill(store, manual_clock)
    mf, pos = unit_position(store, "TopicA", 0, 3)
    struct.pack_into(">q", mf.mm, pos + 12, 12345)
    problems = check_store(store)
    assert len(problems) == 1, problems
    assert "TopicA/0: unit at queue offset 3" in problems[0]
    assert "tags code 12345" in problems[0]


def test_missing_unit(store: MessageStore, manual_clock: ManualClock) -> None:
    fill(store, manual_clock)
    cq = store.find_consume_queue("TopicB", 1)
    assert cq is not None
    last = cq.max_offset - 1
    cq.queue.truncate_dirty(last * CQ_STORE_UNIT_SIZE)
    problems = check_store(store)
    assert any(
        "TopicB/1: record at commitlog" in p and f"queue offset {last} has no unit" in p
        for p in problems
    ), problems
    assert any("TopicB/1: next queue offset is" in p for p in problems), problems


def test_corrupt_record_body(store: MessageStore, manual_clock: ManualClock) -> None:
    ids = fill(store, manual_clock)
    topic, qid, qoff, phys = ids[len(ids) // 2]
    mf = store.commitlog.queue.find(phys)
    assert mf is not None
    pos = phys - mf.file_from_offset + 84 + 4  # first body byte (IPv4 hosts)
    mf.mm[pos] ^= 0xFF
    problems = check_store(store)
    assert problems[0].startswith(f"commitlog: no valid record at offset {phys}")
    assert "body CRC mismatch" in problems[0]
    # units of that record and of everything after it now point at unverified records
    assert any(f"{topic}/{qid}: unit at queue offset {qoff} " in p for p in problems), problems


def test_undispatched_records_are_reported(store: MessageStore, manual_clock: ManualClock) -> None:
    fill(store, manual_clock, 50)
    store.put_message(make_msg("TopicA", b"late", 0))
    problems = check_store(store)
    assert any("not dispatched" in p for p in problems), problems
    drain_dispatch(store)
    assert check_store(store) == []


def test_queue_table_mismatch(store: MessageStore, manual_clock: ManualClock) -> None:
    fill(store, manual_clock, 50)
    store.commitlog.topic_queue_table[("TopicA", 1)] += 1
    problems = check_store(store)
    assert len(problems) == 1
    assert problems[0].startswith("TopicA/1: next queue offset is")


def test_lost_index_entries(store: MessageStore, manual_clock: ManualClock) -> None:
    fill(store, manual_clock, 100)
    last = store.index.files[-1]
    slot_bytes = 4 * last.hash_slot_num
    assert any(last.file.mm[40 : 40 + slot_bytes])
    last.file.mm[40 : 40 + slot_bytes] = bytes(slot_bytes)
    problems = check_store(store)
    assert problems
    assert all(p.startswith(("index: key", "... and")) for p in problems), problems


@pytest.mark.parametrize("spread_ms", [5000, 0])
def test_key_with_more_matches_than_one_query(
    store: MessageStore, manual_clock: ManualClock, spread_ms: int
) -> None:
    cap = store.config.max_msgs_num_batch
    for i in range(cap + 40):
        manual_clock.advance(spread_ms)
        store.put_message(make_msg("TopicA", b"m%d" % i, i % 2, keys="shared"))
    drain_dispatch(store)
    assert len(store.query_messages("TopicA", "shared", 1000, 0, 2**62).records) == cap
    assert check_store(store) == []


def test_problem_list_is_bounded(store: MessageStore, manual_clock: ManualClock) -> None:
    fill(store, manual_clock, 200)
    store.index.files[-1].file.mm[40:] = bytes(len(store.index.files[-1].file.mm) - 40)
    problems = check_store(store, max_problems=10)
    assert len(problems) == 11
    assert problems[-1].startswith("... and ")
