"""BatchCQ topics in the MessageStore: inner-batch records take INNER_NUM queue offsets, live
in ``batchconsumequeue/`` and are read whole; recovery, retention and topic deletion keep the
offsets right. SimpleCQ topics next to them are unaffected."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from common.hashing import java_string_hash
from common.message import MessageSysFlag
from common.record import MessageRecord, decode_record
from common.topic_attributes import CQType
from store import GetStatus, MessageStore, PutStatus, StoreConfig, retention
from store.batch_consume_queue import BCQ_STORE_UNIT_SIZE, BatchConsumeQueue
from store.consume_queue import ConsumeQueue
from store.invariants import check_store
from tests.conftest import ManualClock, drain_dispatch, put_and_dispatch

BATCH = "BatchTopic"
SIMPLE = "SimpleTopic"
INNER = MessageSysFlag.INNER_BATCH_FLAG | MessageSysFlag.NEED_UNWRAP_FLAG


def inner(n: int, tag: str | None = None, *, topic: str = BATCH, qid: int = 0) -> MessageRecord:
    """An inner-batch record of ``n`` messages (the body stands for the batch)."""
    props = {"INNER_NUM": str(n), "UNIQ_KEY": f"batch-{n}-{tag}"}
    if tag:
        props["TAGS"] = tag
    return MessageRecord(topic, b"b" * n, queue_id=qid, properties=props, sys_flag=INNER)


def single(body: bytes = b"one", tag: str | None = None, *, topic: str = BATCH) -> MessageRecord:
    return MessageRecord(topic, body, properties={"TAGS": tag} if tag else {})


@pytest.fixture
def bstore(store: MessageStore) -> MessageStore:
    store.set_queue_type(BATCH, CQType.BATCH_CQ)
    return store


def put_all(store: MessageStore, msgs: list[MessageRecord]) -> list[int]:
    """Put each message on its own (as the broker does) and dispatch; the queue offsets."""
    out = []
    for m in msgs:
        r = put_and_dispatch(store, m)
        assert r.status is PutStatus.PUT_OK, r.remark
        out += r.queue_offsets
    return out


def reopen(store: MessageStore, config: StoreConfig, clock: ManualClock) -> MessageStore:
    store.close()
    again = MessageStore(config, clock_ms=clock)
    again.set_queue_type(BATCH, CQType.BATCH_CQ)
    return again.open()


# -- puts and offsets --------------------------------------------------------------------------
def test_inner_batches_take_inner_num_offsets_and_one_unit_each(bstore: MessageStore) -> None:
    bases = put_all(bstore, [inner(32), single(), inner(3), inner(32)])
    assert bases == [0, 32, 33, 36]
    assert bstore.get_max_offset_in_queue(BATCH, 0) == 68
    assert bstore.commitlog.topic_queue_table[(BATCH, 0)] == 68
    cq = bstore.find_consume_queue(BATCH, 0)
    assert isinstance(cq, BatchConsumeQueue)
    assert cq.queue.max_offset == 4 * BCQ_STORE_UNIT_SIZE
    assert (bstore.config.batch_consume_queue_dir / BATCH / "0").is_dir()
    assert not (bstore.config.consume_queue_dir / BATCH).exists()
    raw = bstore.lookup_message_by_offset(cq.unit_at(33)[0])  # type: ignore[index]
    assert raw is not None
    assert decode_record(raw).queue_offset == 33
    assert check_store(bstore) == []


def test_multi_record_puts_number_inner_batches_by_inner_num(bstore: MessageStore) -> None:
    r = put_and_dispatch(bstore, [inner(4), inner(5), single(), inner(2)])
    assert r.status is PutStatus.PUT_OK
    assert r.queue_offsets == [0, 4, 9, 10]
    assert bstore.get_max_offset_in_queue(BATCH, 0) == 12
    assert check_store(bstore) == []


def test_inner_batch_refused_for_a_simple_cq_topic_or_bad_inner_num(bstore: MessageStore) -> None:
    refused = bstore.put_message(inner(4, topic=SIMPLE))
    assert refused.status is PutStatus.MESSAGE_ILLEGAL
    assert "BatchCQ" in refused.remark
    for bad in ("0", "40000", "x"):
        m = inner(4)
        m.properties["INNER_NUM"] = bad
        assert bstore.put_message(m).status is PutStatus.MESSAGE_ILLEGAL
        assert bstore.put_messages([single(), m]).status is PutStatus.MESSAGE_ILLEGAL
    assert bstore.commitlog.max_offset == 0


def test_simple_cq_topics_are_unaffected(bstore: MessageStore) -> None:
    put_all(bstore, [inner(8), single(topic=SIMPLE), single(topic=SIMPLE), inner(2)])
    cq = bstore.find_consume_queue(SIMPLE, 0)
    assert isinstance(cq, ConsumeQueue)
    got = bstore.get_messages(SIMPLE, 0, 0, 32)
    assert (got.status, got.queue_offsets, got.next_begin_offset) == (GetStatus.FOUND, [0, 1], 2)
    assert check_store(bstore) == []


# -- reads -------------------------------------------------------------------------------------
def test_get_from_the_middle_of_a_batch_returns_the_whole_batch(bstore: MessageStore) -> None:
    put_all(bstore, [inner(32), inner(32), single()])
    got = bstore.get_messages(BATCH, 0, 40, 32)
    assert got.status is GetStatus.FOUND
    assert got.queue_offsets == [32]  # the record holding 40, from its base
    assert got.next_begin_offset == 64
    assert decode_record(got.records[0]).properties["INNER_NUM"] == "32"
    assert (got.min_offset, got.max_offset) == (0, 65)
    assert bstore.messages_transferred == 32


def test_max_msgs_counts_messages_but_returns_at_least_one_record(bstore: MessageStore) -> None:
    put_all(bstore, [inner(10), inner(10), inner(10), single(), inner(40)])
    assert bstore.get_messages(BATCH, 0, 0, 25).queue_offsets == [0, 10]  # 30 > 25
    assert bstore.get_messages(BATCH, 0, 0, 30).queue_offsets == [0, 10, 20]
    got = bstore.get_messages(BATCH, 0, 0, 64)  # maxTransferCountOnMessageInMemory = 32
    assert (got.queue_offsets, got.next_begin_offset) == ([0, 10, 20, 30], 31)
    big = bstore.get_messages(BATCH, 0, 31, 1)  # one batch larger than max_msgs still goes
    assert (big.queue_offsets, big.next_begin_offset) == ([31], 71)


def test_max_bytes_is_respected_with_at_least_one_record(bstore: MessageStore) -> None:
    put_all(bstore, [inner(3), inner(3), inner(3)])
    size = len(bstore.get_messages(BATCH, 0, 0, 1).records[0])
    assert bstore.get_messages(BATCH, 0, 0, 32, max_bytes=2 * size).queue_offsets == [0, 3]
    assert bstore.get_messages(BATCH, 0, 0, 32, max_bytes=1).queue_offsets == [0]


def test_tag_codes_filter_batches_of_one_only(bstore: MessageStore) -> None:
    put_all(bstore, [single(tag="A"), inner(4, "B"), single(tag="B"), single(tag="A")])
    code_a = java_string_hash("A")
    got = bstore.get_messages(BATCH, 0, 0, 32, tag_codes=[code_a])
    assert got.queue_offsets == [0, 1, 6]  # the batch of 4 passes whatever its tag
    none = bstore.get_messages(BATCH, 0, 5, 32, tag_codes=[java_string_hash("C")])
    assert (none.status, none.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 7)


def test_record_filter_applies_to_the_outer_record(bstore: MessageStore) -> None:
    put_all(bstore, [inner(4, "A"), inner(4, "B")])
    got = bstore.get_messages(BATCH, 0, 0, 32, record_filter=lambda raw: b"TAGS\x01B" in raw)
    assert (got.queue_offsets, got.next_begin_offset) == ([4], 8)


def test_statuses_are_computed_in_messages(bstore: MessageStore) -> None:
    bstore.set_queue_type("Other", CQType.BATCH_CQ)
    assert bstore.get_messages("Other", 0, 0, 1).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    put_all(bstore, [inner(5), inner(5)])
    assert bstore.get_messages(BATCH, 0, 10, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
    over = bstore.get_messages(BATCH, 0, 11, 1)
    assert (over.status, over.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10)
    assert bstore.get_messages(BATCH, 0, 9, 1).queue_offsets == [5]


def test_arrival_listener_sees_message_offsets(bstore: MessageStore) -> None:
    seen: list[tuple[str, int, int]] = []
    bstore.arrival_listener = lambda t, q, nxt: seen.append((t, q, nxt))
    put_all(bstore, [inner(32), single()])
    assert seen == [(BATCH, 0, 32), (BATCH, 0, 33)]


def test_by_time_earliest_time_and_dispatched_check(
    bstore: MessageStore, manual_clock: ManualClock
) -> None:
    t0 = manual_clock.now
    put_all(bstore, [inner(4)])
    manual_clock.advance(1000)
    put_all(bstore, [inner(6)])
    manual_clock.advance(1000)
    put_all(bstore, [single()])
    assert bstore.get_offset_in_queue_by_time(BATCH, 0, t0) == 0
    assert bstore.get_offset_in_queue_by_time(BATCH, 0, t0 + 1) == 4
    assert bstore.get_offset_in_queue_by_time(BATCH, 0, t0 + 1000) == 4
    assert bstore.get_offset_in_queue_by_time(BATCH, 0, t0 + 1500) == 10
    assert bstore.get_offset_in_queue_by_time(BATCH, 0, t0 + 5000) == 11
    assert bstore.get_earliest_message_time(BATCH, 0) == t0
    cq = bstore.find_consume_queue(BATCH, 0)
    assert cq is not None
    phys = cq.unit_at(7)[0]  # type: ignore[index]
    rec = decode_record(bstore.lookup_message_by_offset(phys))  # type: ignore[arg-type]
    assert bstore.is_dispatched_message(phys, rec)
    rec.queue_offset = 5  # a message of the batch is not where the unit is
    assert not bstore.is_dispatched_message(phys, rec)


# -- restart, crash, retention, deletion -------------------------------------------------------
def test_restart_keeps_types_and_offsets(
    bstore: MessageStore, store_config: StoreConfig, manual_clock: ManualClock
) -> None:
    put_all(bstore, [inner(32), single(), single(topic=SIMPLE)])
    again = reopen(bstore, store_config, manual_clock)
    try:
        assert isinstance(again.find_consume_queue(BATCH, 0), BatchConsumeQueue)
        assert isinstance(again.find_consume_queue(SIMPLE, 0), ConsumeQueue)
        assert put_all(again, [inner(2)]) == [33]
        assert again.get_messages(BATCH, 0, 34, 8).queue_offsets == [33]
        assert check_store(again) == []
    finally:
        again.close()


def crash_copy(store: MessageStore, dest: Path) -> StoreConfig:
    """The open store's directory as ``kill -9`` would leave it (abort file, old checkpoint)."""
    shutil.copytree(store.config.store_path_root_dir, dest)
    cfg = store.config
    return StoreConfig(
        store_path_root_dir=dest,
        mapped_file_size_commit_log=cfg.mapped_file_size_commit_log,
        mapped_file_size_consume_queue=cfg.mapped_file_size_consume_queue,
        mapper_file_size_batch_consume_queue=cfg.mapper_file_size_batch_consume_queue,
        max_hash_slot_num=cfg.max_hash_slot_num,
        max_index_num=cfg.max_index_num,
    )


def open_copy(cfg: StoreConfig, clock: ManualClock, *, typed: bool = True) -> MessageStore:
    s = MessageStore(cfg, clock_ms=clock)
    if typed:
        s.set_queue_type(BATCH, CQType.BATCH_CQ)
    return s.open()


@pytest.mark.parametrize("typed_before_open", [True, False])
def test_crash_with_undispatched_and_lost_units_redispatches(
    bstore: MessageStore, tmp_path: Path, manual_clock: ManualClock, typed_before_open: bool
) -> None:
    put_all(bstore, [inner(32), single(), inner(5)])
    bstore.flush_logics()
    assert bstore.put_message(inner(7)).status is PutStatus.PUT_OK  # appended, not dispatched
    cfg = crash_copy(bstore, tmp_path / "crash")
    cq_file = next((cfg.batch_consume_queue_dir / BATCH / "0").iterdir())
    with cq_file.open("r+b") as f:  # the last dispatched unit did not reach the disk either
        f.seek(2 * BCQ_STORE_UNIT_SIZE)
        f.write(bytes(BCQ_STORE_UNIT_SIZE))
    s = open_copy(cfg, manual_clock, typed=typed_before_open)
    try:
        assert not s.last_exit_ok
        assert s.get_max_offset_in_queue(BATCH, 0) == 45
        assert s.get_messages(BATCH, 0, 40, 32).queue_offsets == [38]
        if not typed_before_open:
            s.set_queue_type(BATCH, CQType.BATCH_CQ)
        assert put_all(s, [inner(3), single()]) == [45, 48]
        assert check_store(s) == []
    finally:
        s.close()


def test_torn_batch_cq_tail_is_cut_and_rebuilt(
    bstore: MessageStore, tmp_path: Path, manual_clock: ManualClock
) -> None:
    put_all(bstore, [inner(4), inner(4), inner(4)])
    cfg = crash_copy(bstore, tmp_path / "crash")
    cq_file = next((cfg.batch_consume_queue_dir / BATCH / "0").iterdir())
    with cq_file.open("r+b") as f:  # the last unit's size torn (a valid-looking unit)
        f.seek(2 * BCQ_STORE_UNIT_SIZE + 8)
        f.write((1).to_bytes(4, "big"))
    s = open_copy(cfg, manual_clock)
    try:
        cq = s.find_consume_queue(BATCH, 0)
        assert cq is not None
        assert cq.unit_at(9)[1] > 1
        assert put_all(s, [inner(1)]) == [12]
        assert check_store(s) == []
    finally:
        s.close()


def test_retention_moves_the_min_offset(small_config: Callable[..., StoreConfig]) -> None:
    clock = ManualClock()
    cfg = small_config(mapper_file_size_batch_consume_queue=4 * BCQ_STORE_UNIT_SIZE)
    s = MessageStore(cfg, clock_ms=clock, disk_usage=lambda _p: 0.1)
    s.set_queue_type(BATCH, CQType.BATCH_CQ)
    with s:
        big = b"x" * 6000
        n = 0
        while len(s.commitlog.queue.files) < 4:
            r = put_and_dispatch(s, MessageRecord(BATCH, big, properties={"INNER_NUM": "10"},
                                                  sys_flag=INNER))  # fmt: skip
            assert r.status is PutStatus.PUT_OK
            n += 1
        deleted = retention.delete_commitlog_files(s, lambda mf: True)
        assert deleted > 0
        retention.clean_logics_if_moved(s)
        lo = s.get_min_offset_in_queue(BATCH, 0)
        assert lo > 0
        assert lo % 10 == 0
        too_small = s.get_messages(BATCH, 0, 0, 32)
        assert (too_small.status, too_small.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, lo)
        got = s.get_messages(BATCH, 0, lo, 32)
        assert got.status is GetStatus.FOUND
        assert got.queue_offsets == [lo]
        assert s.get_max_offset_in_queue(BATCH, 0) == 10 * n
        assert check_store(s) == []


def test_delete_topic_removes_the_batch_queue_directory(bstore: MessageStore) -> None:
    put_all(bstore, [inner(8), single(topic=SIMPLE)])
    assert bstore.delete_topic(BATCH) == 1
    assert not (bstore.config.batch_consume_queue_dir / BATCH).exists()
    assert bstore.find_consume_queue(BATCH, 0) is None
    assert put_all(bstore, [inner(3)]) == [0]  # starts again at 0
    assert check_store(bstore) == []
    assert bstore.get_messages(SIMPLE, 0, 0, 1).status is GetStatus.FOUND


def test_dispatch_pending_after_put_messages_of_several_queues(bstore: MessageStore) -> None:
    bstore.put_messages([inner(3, qid=0), inner(4, qid=1), inner(5, qid=0)])
    drain_dispatch(bstore)
    assert bstore.get_max_offset_in_queue(BATCH, 0) == 8
    assert bstore.get_max_offset_in_queue(BATCH, 1) == 4
    assert check_store(bstore) == []


def test_lost_batch_queue_directory_is_rebuilt_as_a_batch_queue(
    bstore: MessageStore, tmp_path: Path, manual_clock: ManualClock
) -> None:
    put_all(bstore, [inner(32), single(), inner(5)])
    bstore.flush_logics()
    cfg = crash_copy(bstore, tmp_path / "crash")
    shutil.rmtree(cfg.batch_consume_queue_dir)
    s = open_copy(cfg, manual_clock, typed=False)  # the broker has not said the type yet
    try:
        cq = s.find_consume_queue(BATCH, 0)
        assert isinstance(cq, BatchConsumeQueue)  # its first record is an inner batch
        assert (cq.min_offset, cq.max_offset) == (0, 38)
        s.set_queue_type(BATCH, CQType.BATCH_CQ)
        assert put_all(s, [inner(2)]) == [38]
        assert check_store(s) == []
    finally:
        s.close()
