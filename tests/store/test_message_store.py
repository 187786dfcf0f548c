"""Tests for the MessageStore facade (store/message_store.py): puts, gets, queries, reopen."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.hashing import java_string_hash
from common.message import MessageSysFlag
from common.record import (
    BLANK_MAGIC_CODE,
    PROPERTY_CRC32,
    MessageRecord,
    decode_record,
    decode_records,
    record_crc_ok,
)
from store import (
    GetStatus,
    MessageStore,
    PutStatus,
    StoreConfig,
    StoreLockedError,
    retention,
)
from store.checkpoint import NO_INDEX_FILE, IndexMark, StoreCheckpoint
from store.invariants import check_store
from store.mapped_file import offset_to_name
from tests.conftest import (
    SMALL_COMMITLOG_SIZE,
    ManualClock,
    drain_dispatch,
    make_msg,
    properties_at,
    put_and_dispatch,
)

LONG_MAX = 2**63 - 1
TOPIC = "TopicTest"


def bodies(result_records: list[bytes]) -> list[bytes]:
    """Bodies of raw records."""
    return [decode_record(r).body for r in result_records]


def put_n(store: MessageStore, n: int, *, topic: str = TOPIC, queue_id: int = 0, **kw) -> None:
    """Put and dispatch ``n`` messages with bodies b"m0", b"m1", ..."""
    for i in range(n):
        r = put_and_dispatch(store, make_msg(topic, f"m{i}".encode(), queue_id, **kw))
        assert r.status is PutStatus.PUT_OK


def commitlog_bytes(config: StoreConfig) -> bytes:
    """Every commitlog file's content, concatenated."""
    return b"".join(p.read_bytes() for p in sorted(config.commitlog_dir.iterdir()))


# -- puts ------------------------------------------------------------------------------------


def test_put_result_fields(store: MessageStore, manual_clock: ManualClock) -> None:
    r = store.put_message(make_msg(body=b"x" * 10))
    assert r.status is PutStatus.PUT_OK
    assert r.phys_offsets == [0]
    assert r.queue_offsets == [0]
    size = 91 + 10 + len(TOPIC)
    assert (r.wrote_bytes, r.end_offset, r.msg_num) == (size, size, 1)
    assert r.store_timestamp == manual_clock.now
    raw = store.lookup_message_by_offset(0)
    assert raw is not None
    rec = decode_record(raw, check_crc=True)
    assert (rec.store_timestamp, rec.physical_offset, rec.queue_offset) == (manual_clock.now, 0, 0)
    assert store.commitlog.max_offset == size


def test_queue_offsets_per_topic_and_queue(store: MessageStore) -> None:
    targets = [("A", 0), ("A", 1), ("B", 0), ("A", 0), ("B", 0), ("A", 0), ("A", 1)]
    got = [store.put_message(make_msg(t, b"x", q)).queue_offsets[0] for t, q in targets]
    assert got == [0, 0, 0, 1, 1, 2, 1]
    batch = store.put_messages([make_msg("A", b"x", 0), make_msg("A", b"y", 1)] * 2)
    assert batch.queue_offsets == [3, 2, 4, 3]
    drain_dispatch(store)
    assert store.get_max_offset_in_queue("A", 0) == 5
    assert store.get_max_offset_in_queue("A", 1) == 4
    assert store.get_max_offset_in_queue("B", 0) == 2
    assert store.get_max_offset_in_queue("C", 0) == 0
    # the record carries its queue offset and physical offset at RocketMQ's positions
    for phys, qoff in zip(batch.phys_offsets, batch.queue_offsets, strict=True):
        raw = store.lookup_message_by_offset(phys)
        assert raw is not None
        assert struct.unpack_from(">q", raw, 20)[0] == qoff
        assert struct.unpack_from(">q", raw, 28)[0] == phys


@pytest.mark.parametrize(
    ("msg", "status"),
    [
        (make_msg(body=b"x" * 1025), PutStatus.MESSAGE_ILLEGAL),
        (make_msg("bad topic"), PutStatus.MESSAGE_ILLEGAL),
        (make_msg("topic/slash"), PutStatus.MESSAGE_ILLEGAL),
        (make_msg(""), PutStatus.MESSAGE_ILLEGAL),
        (make_msg("T" * 128), PutStatus.MESSAGE_ILLEGAL),
        (make_msg("Tö"), PutStatus.MESSAGE_ILLEGAL),
        (make_msg(properties={"big": "v" * 32767}), PutStatus.PROPERTIES_SIZE_EXCEEDED),
        # numbers outside their field's Java int or long: refused, no queue offset used up
        (make_msg(born_timestamp=2**63), PutStatus.MESSAGE_ILLEGAL),
        (make_msg(flag=2**31), PutStatus.MESSAGE_ILLEGAL),
        (make_msg(reconsume_times=-(2**31) - 1), PutStatus.MESSAGE_ILLEGAL),
        (make_msg(prepared_transaction_offset=2**64), PutStatus.MESSAGE_ILLEGAL),
        (make_msg(sys_flag=2**40), PutStatus.MESSAGE_ILLEGAL),
        (make_msg(queue_id=2**31), PutStatus.MESSAGE_ILLEGAL),
    ],
)
def test_put_validation(
    small_config: Callable[..., StoreConfig], msg: MessageRecord, status: PutStatus
) -> None:
    cfg = small_config(max_message_size=1024)
    with MessageStore(cfg) as s:
        s.put_message(make_msg(body=b"first"))
        before = commitlog_bytes(cfg)
        r = s.put_message(msg)
        assert r.status is status
        assert r.remark
        assert r.phys_offsets == []
        # a batch with one bad message is rejected whole
        assert s.put_messages([make_msg(body=b"ok"), msg]).status is status
        assert commitlog_bytes(cfg) == before
        assert s.commitlog.max_offset == 91 + 5 + len(TOPIC)
        assert s.dispatch_behind == 1
        assert s.commitlog.topic_queue_table == {(TOPIC, 0): 1}


def test_a_checkpoint_from_older_code_gets_the_index_mark_at_open(
    small_config: Callable[..., StoreConfig],
) -> None:
    """A checkpoint never written vouches for no index file; one an older minimq wrote (no
    mark, other fields set) gets the old repair after a crash, and the mark at the next open."""
    cfg = small_config()
    blank = StoreCheckpoint(cfg.checkpoint_path)
    assert blank.index_mark == IndexMark(NO_INDEX_FILE, 0, -1)
    blank.abandon()
    with MessageStore(cfg) as store:
        store.put_message(make_msg(keys="k"))
    older = StoreCheckpoint(cfg.checkpoint_path)
    older.index_mark = None  # as an older minimq wrote it
    older.flush()
    assert older.index_mark is None
    older.abandon()
    with MessageStore(cfg) as store:
        newest = store.index.files[-1]
        mark = IndexMark(int(newest.path.name), newest.index_count, newest.end_phy_offset)
        assert store.checkpoint.index_mark == mark  # recorded by the next checkpoint write


def test_put_limits_are_inclusive(small_config: Callable[..., StoreConfig]) -> None:
    with MessageStore(small_config(max_message_size=1024)) as s:
        assert s.put_message(make_msg(body=b"x" * 1024)).status is PutStatus.PUT_OK
        assert s.put_message(make_msg("%RETRY%|g-1_x" + "T" * 114)).status is PutStatus.PUT_OK
        big_props = {"k": "v" * (32767 - 3)}  # k \x01 v... \x02 = 32767 bytes
        assert s.put_message(make_msg(properties=big_props)).status is PutStatus.PUT_OK


def test_long_properties_end_with_a_crc_of_the_record(
    small_config: Callable[..., StoreConfig],
) -> None:
    """Past 512 bytes of properties a record ends with RocketMQ's ``__CRC32#`` property (a
    CRC of the rest of it), on every put path; a sender's own ``__CRC32#`` is dropped."""
    long_props = {"k": "v" * 600}
    with MessageStore(small_config()) as s:
        sent = [
            make_msg(properties={"short": "x"}),
            make_msg(properties=long_props),  # a single put
            *[make_msg(properties=long_props)] * 2,  # a batch of one queue
            make_msg(properties={PROPERTY_CRC32: "0123456789", "a": "b"}),  # a sender's own
            make_msg(properties={**long_props, PROPERTY_CRC32: "0123456789"}),
        ]
        results = [s.put_message(sent[0]), s.put_message(sent[1]), s.put_messages(sent[2:4])]
        results += [s.put_message(sent[4]), s.put_message(sent[5])]
        offsets = [o for r in results for o in r.phys_offsets]
        records = [s.lookup_message_by_offset(o) for o in offsets]
    crc_at_end = [r is not None and r[-20:].startswith(b"__CRC32#\x01") for r in records]
    assert crc_at_end == [False, True, True, True, False, True]
    for raw, msg in zip(records, sent, strict=True):
        assert raw is not None
        assert record_crc_ok(raw, properties_at(raw))
        props = decode_record(raw).properties
        assert props.pop(PROPERTY_CRC32, None) != "0123456789"
        assert props == {k: v for k, v in msg.properties.items() if k != PROPERTY_CRC32}


def test_a_property_named_like_the_crc_does_not_fail_recovery(
    small_config: Callable[..., StoreConfig],
) -> None:
    """``x__CRC32#`` with a 10-byte value ends a record the way the CRC property does; it is
    not one, and a crash recovery keeps the record."""
    cfg = small_config()
    s = MessageStore(cfg).open()
    s.put_message(make_msg(properties={"x__CRC32#": "0123456789"}))
    drain_dispatch(s)
    s.flush_commitlog()
    copy = cfg.store_path_root_dir.parent / "crashed"
    shutil.copytree(cfg.store_path_root_dir, copy)
    s.close()
    with MessageStore(small_config(copy)) as crashed:
        assert not crashed.last_exit_ok
        assert crashed.get_max_offset_in_queue(TOPIC, 0) == 1
        assert check_store(crashed) == []


def test_enabled_append_prop_crc_ends_every_record_with_it(
    small_config: Callable[..., StoreConfig],
) -> None:
    cfg = small_config(enabled_append_prop_crc=True)
    with MessageStore(cfg) as s:
        r = s.put_message(make_msg(body=b"plain"))
        r2 = s.put_messages([make_msg(body=b"a"), make_msg(body=b"b", tags="T")])
        raws = [s.lookup_message_by_offset(o) for o in [*r.phys_offsets, *r2.phys_offsets]]
    assert all(raw is not None and record_crc_ok(raw, properties_at(raw)) for raw in raws)
    assert all(raw is not None and PROPERTY_CRC32 in decode_record(raw).properties for raw in raws)
    with MessageStore(cfg) as again:  # recovery verifies them
        assert check_store(again) == []
        assert again.get_messages(TOPIC, 0, 0, 32).status is GetStatus.FOUND


def test_empty_batch_is_illegal(store: MessageStore) -> None:
    assert store.put_messages([]).status is PutStatus.MESSAGE_ILLEGAL
    end = store.commitlog.max_offset
    assert store.commitlog.append([]).status is PutStatus.MESSAGE_ILLEGAL  # the log itself too
    assert store.commitlog.max_offset == end


def test_put_after_close_is_refused(store_config: StoreConfig) -> None:
    s = MessageStore(store_config).open()
    s.close()
    r = s.put_message(make_msg())
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
    s.close()  # twice is fine


def test_put_when_disk_full_is_refused(store_config: StoreConfig) -> None:
    usage = {"ratio": 0.95}
    with MessageStore(store_config, disk_usage=lambda p: usage["ratio"]) as s:
        assert s.put_message(make_msg(body=b"before")).status is PutStatus.PUT_OK
        s.clean_expired_files()
        assert s.disk_full
        end = s.commitlog.max_offset
        r = s.put_message(make_msg(body=b"refused"))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.commitlog.max_offset == end
        usage["ratio"] = 0.5
        s.clean_expired_files()
        assert not s.disk_full
        assert s.put_message(make_msg(body=b"after")).status is PutStatus.PUT_OK


def test_batch_lands_in_one_file_after_blank_marker(store: MessageStore) -> None:
    # records of exactly 1000 bytes: 65 fit in the 64 KiB file, leaving 536 bytes
    body = b"b" * (1000 - 91 - len(TOPIC))
    for _ in range(65):
        store.put_message(make_msg(body=body))
    assert store.commitlog.max_offset == 65_000
    r = store.put_messages([make_msg(body=body, queue_id=1) for _ in range(3)])
    assert r.status is PutStatus.PUT_OK
    assert r.phys_offsets == [SMALL_COMMITLOG_SIZE + i * 1000 for i in range(3)]
    assert r.end_offset == SMALL_COMMITLOG_SIZE + 3000
    cl_dir = store.config.commitlog_dir
    assert sorted(p.name for p in cl_dir.iterdir()) == [
        offset_to_name(0),
        offset_to_name(SMALL_COMMITLOG_SIZE),
    ]
    first = (cl_dir / offset_to_name(0)).read_bytes()
    assert struct.unpack_from(">ii", first, 65_000) == (
        SMALL_COMMITLOG_SIZE - 65_000,
        BLANK_MAGIC_CODE,
    )
    second = (cl_dir / offset_to_name(SMALL_COMMITLOG_SIZE)).read_bytes()
    recs = decode_records(second[:3000], check_crc=True)
    assert [rec.queue_offset for rec in recs] == [0, 1, 2]
    assert [rec.physical_offset for rec in recs] == r.phys_offsets
    drain_dispatch(store)
    g = store.get_messages(TOPIC, 0, 60, 32)
    assert g.status is GetStatus.FOUND
    assert g.queue_offsets == [60, 61, 62, 63, 64]
    assert store.get_messages(TOPIC, 1, 0, 32).message_count == 3


def test_batch_larger_than_a_file_is_illegal(store: MessageStore) -> None:
    body = b"b" * 30_000
    r = store.put_messages([make_msg(body=body)] * 3)
    assert r.status is PutStatus.MESSAGE_ILLEGAL
    assert store.commitlog.max_offset == 0


def test_prepared_messages_are_stored_but_not_queued(store: MessageStore) -> None:
    prepared = make_msg(body=b"half", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    rollback = make_msg(body=b"rb", sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
    r1 = put_and_dispatch(store, prepared)
    assert r1.status is PutStatus.PUT_OK
    assert r1.queue_offsets == [0]
    assert store.get_messages(TOPIC, 0, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    raw = store.lookup_message_by_offset(r1.phys_offsets[0])
    assert raw is not None
    assert decode_record(raw).sys_flag == MessageSysFlag.TRANSACTION_PREPARED_TYPE
    put_and_dispatch(store, rollback)
    commit = make_msg(body=b"commit", sys_flag=MessageSysFlag.TRANSACTION_COMMIT_TYPE)
    r3 = put_and_dispatch(store, commit)
    assert r3.queue_offsets == [0]
    normal = put_and_dispatch(store, make_msg(body=b"normal"))
    assert normal.queue_offsets == [1]
    g = store.get_messages(TOPIC, 0, 0, 32)
    assert bodies(g.records) == [b"commit", b"normal"]


# -- dispatch --------------------------------------------------------------------------------


def test_messages_invisible_until_dispatched(store: MessageStore) -> None:
    calls: list[tuple[str, int, int]] = []
    store.arrival_listener = lambda t, q, n: calls.append((t, q, n))
    store.put_messages([make_msg(body=b"a"), make_msg(body=b"b"), make_msg("Other", b"c", 3)])
    assert store.dispatch_behind == 3
    assert store.get_messages(TOPIC, 0, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    assert calls == []
    assert store.dispatch_pending() == 3
    assert store.dispatch_pending() == 0
    assert store.dispatch_behind == 0
    assert sorted(calls) == [("Other", 3, 1), (TOPIC, 0, 2)]
    assert store.reput_offset == store.commitlog.max_offset
    store.put_message(make_msg(body=b"d"))
    assert store.get_max_offset_in_queue(TOPIC, 0) == 2
    assert store.dispatch_pending(max_batch=1) == 1
    assert calls[-1] == (TOPIC, 0, 3)
    assert bodies(store.get_messages(TOPIC, 0, 0, 32).records) == [b"a", b"b", b"d"]


def test_dispatch_in_small_batches(store: MessageStore) -> None:
    for i in range(10):
        store.put_message(make_msg(body=b"%d" % i))
    assert store.dispatch_pending(max_batch=4) == 4
    assert store.get_max_offset_in_queue(TOPIC, 0) == 4
    assert drain_dispatch(store) == 6
    assert store.get_max_offset_in_queue(TOPIC, 0) == 10


# -- gets ------------------------------------------------------------------------------------


def test_get_statuses_and_next_offsets(store: MessageStore) -> None:
    g = store.get_messages(TOPIC, 0, 5, 32)
    assert (g.status, g.next_begin_offset, g.min_offset, g.max_offset) == (
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
        0,
        0,
        0,
    )
    put_n(store, 5)
    g = store.get_messages(TOPIC, 0, 0, 32)
    assert (g.status, g.next_begin_offset, g.min_offset, g.max_offset) == (GetStatus.FOUND, 5, 0, 5)
    assert bodies(g.records) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert g.queue_offsets == [0, 1, 2, 3, 4]
    assert g.total_size == sum(len(r) for r in g.records)
    g = store.get_messages(TOPIC, 0, 3, 32)
    assert (g.status, g.next_begin_offset, g.queue_offsets) == (GetStatus.FOUND, 5, [3, 4])
    g = store.get_messages(TOPIC, 0, 5, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 5)
    assert g.records == []
    g = store.get_messages(TOPIC, 0, 9, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5)  # max offset
    assert store.get_messages(TOPIC, 1, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE


def test_no_message_in_queue(store_config: StoreConfig) -> None:
    with MessageStore(store_config) as s:
        put_and_dispatch(s, make_msg())
    # the commitlog loses its only record (say, a torn write); the queue survives, empty
    path = store_config.commitlog_dir / offset_to_name(0)
    raw = bytearray(path.read_bytes())
    raw[4:8] = bytes(4)
    path.write_bytes(raw)
    with MessageStore(store_config) as s:
        assert s.find_consume_queue(TOPIC, 0) is not None
        g = s.get_messages(TOPIC, 0, 3, 32)
        assert (g.status, g.next_begin_offset, g.max_offset) == (
            GetStatus.NO_MESSAGE_IN_QUEUE,
            0,
            0,
        )
        assert put_and_dispatch(s, make_msg(body=b"again")).queue_offsets == [0]
        assert bodies(s.get_messages(TOPIC, 0, 0, 32).records) == [b"again"]


def test_offset_too_small_and_overflow_badly_after_retention(
    small_config: Callable[..., StoreConfig],
) -> None:
    cfg = small_config(file_reserved_time=0)
    clock = ManualClock(4_000_000_000_000)  # far past the files' mtimes: everything expired
    with MessageStore(cfg, clock_ms=clock, disk_usage=lambda p: 0.1) as s:
        body = b"b" * (1000 - 91 - len(TOPIC))
        for _ in range(150):  # 65 per commitlog file: 3 files
            assert put_and_dispatch(s, make_msg(body=body)).status is PutStatus.PUT_OK
        assert s.clean_expired_files(manual=True) >= 2
        assert s.commitlog.min_offset == 2 * SMALL_COMMITLOG_SIZE
        lo = s.get_min_offset_in_queue(TOPIC, 0)
        assert lo == 130  # first record in the third file
        g = s.get_messages(TOPIC, 0, 10, 32)
        assert (g.status, g.next_begin_offset, g.min_offset) == (
            GetStatus.OFFSET_TOO_SMALL,
            130,
            130,
        )
        g = s.get_messages(TOPIC, 0, 500, 32)
        assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 150)
        g = s.get_messages(TOPIC, 0, 130, 32)
        assert g.status is GetStatus.FOUND
        assert g.queue_offsets[0] == 130
        assert s.lookup_message_by_offset(0) is None


def test_reads_never_mix_found_records_with_gone_ones(
    small_config: Callable[..., StoreConfig],
) -> None:
    """Between retention deleting commitlog files and the consume queue's minimum following
    (the pauses of a pass, the next pass), units point at gone data. A read that meets them
    answers MESSAGE_WAS_REMOVING up to the first kept record and never FOUND with them
    skipped, so a reader that filters by tag can tell them from filtered-out records."""
    cfg = small_config(file_reserved_time=0)
    with MessageStore(cfg, disk_usage=lambda p: 0.1) as s:
        body = b"b" * (1000 - 91 - len(TOPIC) - 10)
        for i in range(150):  # about 65 per commitlog file: 3 files
            msg = make_msg(body=body, tags=f"T{i % 2}")
            assert put_and_dispatch(s, msg).status is PutStatus.PUT_OK
        assert retention.delete_commitlog_files(s, lambda mf: True) == 2  # queues not yet
        assert s.get_min_offset_in_queue(TOPIC, 0) == 0
        cq = s.find_consume_queue(TOPIC, 0)
        assert cq is not None
        kept = next(o for o in range(150) if cq.unit_at(o)[0] >= s.commitlog.min_offset)
        assert 120 < kept < 140
        t0 = [java_string_hash("T0")]
        filters: list[dict[str, Any]] = [
            {},
            {"tag_codes": t0},
            {"record_filter": lambda record: b"TAGS\x01T0" in record},  # as an SQL92 filter
        ]
        for kw in filters:
            g = s.get_messages(TOPIC, 0, 0, 32, **kw)
            assert (g.status, g.message_count) == (GetStatus.MESSAGE_WAS_REMOVING, 0)
            assert g.next_begin_offset <= kept  # 16,000 bytes of units a read at most
            g = s.get_messages(TOPIC, 0, kept - 5, 32, **kw)
            assert (g.status, g.next_begin_offset) == (GetStatus.MESSAGE_WAS_REMOVING, kept)
            g = s.get_messages(TOPIC, 0, kept, 32, **kw)
            assert g.status is GetStatus.FOUND
            assert g.queue_offsets[0] in (kept, kept + 1)


def test_max_msgs_and_max_bytes(small_config: Callable[..., StoreConfig]) -> None:
    cfg = small_config(max_transfer_count_on_message_in_memory=8)
    with MessageStore(cfg) as s:
        put_n(s, 20)
        g = s.get_messages(TOPIC, 0, 0, 3)
        assert (g.message_count, g.next_begin_offset) == (3, 3)
        g = s.get_messages(TOPIC, 0, 0, 100)
        assert (g.message_count, g.next_begin_offset) == (8, 8)  # config cap
        size = len(g.records[0])
        g = s.get_messages(TOPIC, 0, 2, 100, max_bytes=3 * size)
        assert (g.message_count, g.next_begin_offset, g.total_size) == (3, 5, 3 * size)
        g = s.get_messages(TOPIC, 0, 2, 100, max_bytes=3 * size - 1)
        assert g.message_count == 2
        g = s.get_messages(TOPIC, 0, 2, 100, max_bytes=1)
        assert (g.status, g.message_count, g.next_begin_offset) == (GetStatus.FOUND, 1, 3)


def test_tag_filter(store: MessageStore) -> None:
    tag_a, tag_b = java_string_hash("TagA"), java_string_hash("TagB")
    for i in range(10):
        put_and_dispatch(store, make_msg(body=b"%d" % i, tags="TagA" if i % 2 == 0 else "TagB"))
    g = store.get_messages(TOPIC, 0, 0, 32, tag_codes=[tag_a])
    assert g.queue_offsets == [0, 2, 4, 6, 8]
    assert g.next_begin_offset == 10
    g = store.get_messages(TOPIC, 0, 0, 2, tag_codes={tag_b})
    assert (g.queue_offsets, g.next_begin_offset) == ([1, 3], 4)
    g = store.get_messages(TOPIC, 0, 0, 32, tag_codes=[])
    assert (g.status, g.next_begin_offset, g.records) == (GetStatus.NO_MATCHED_MESSAGE, 10, [])
    g = store.get_messages(TOPIC, 0, 0, 32, tag_codes=[tag_a, tag_b])
    assert g.message_count == 10
    put_and_dispatch(store, make_msg(body=b"untagged"))
    g = store.get_messages(TOPIC, 0, 10, 32, tag_codes=[0])
    assert bodies(g.records) == [b"untagged"]


def test_tag_filter_advances_past_a_whole_queue_file(store: MessageStore) -> None:
    put_n(store, 60, tags="TagA")  # 50 units per consume-queue file
    g = store.get_messages(TOPIC, 0, 0, 32, tag_codes=[java_string_hash("TagB")])
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 50)
    g = store.get_messages(TOPIC, 0, 50, 32, tag_codes=[java_string_hash("TagB")])
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 60)


def test_reads_stop_at_queue_file_end(store: MessageStore) -> None:
    put_n(store, 60)
    g = store.get_messages(TOPIC, 0, 45, 32)
    assert g.queue_offsets == [45, 46, 47, 48, 49]
    assert g.next_begin_offset == 50
    g = store.get_messages(TOPIC, 0, 50, 32)
    assert g.queue_offsets == list(range(50, 60))


# -- lookups ---------------------------------------------------------------------------------


def test_lookup_message_by_offset(store: MessageStore) -> None:
    r = put_and_dispatch(store, [make_msg(body=b"one"), make_msg(body=b"two")])
    second = store.lookup_message_by_offset(r.phys_offsets[1])
    assert second is not None
    assert decode_record(second).body == b"two"
    assert store.lookup_message_by_offset(r.phys_offsets[1] + 1) is None
    assert store.lookup_message_by_offset(r.end_offset) is None
    assert store.lookup_message_by_offset(10**9) is None
    assert store.lookup_message_by_offset(-1) is None


def test_get_offset_in_queue_by_time(store: MessageStore, manual_clock: ManualClock) -> None:
    t0 = manual_clock.now
    for i in range(10):
        put_and_dispatch(store, make_msg(body=b"%d" % i))
        manual_clock.advance(1000)
    assert store.get_offset_in_queue_by_time(TOPIC, 0, t0) == 0
    assert store.get_offset_in_queue_by_time(TOPIC, 0, t0 - 10**6) == 0
    assert store.get_offset_in_queue_by_time(TOPIC, 0, t0 + 3000) == 3
    assert store.get_offset_in_queue_by_time(TOPIC, 0, t0 + 2500) == 3
    assert store.get_offset_in_queue_by_time(TOPIC, 0, t0 + 9000) == 9
    assert store.get_offset_in_queue_by_time(TOPIC, 0, t0 + 10**6) == 10
    assert store.get_offset_in_queue_by_time("Nope", 0, t0) == 0


def test_query_by_keys_and_uniq_key(store: MessageStore, manual_clock: ManualClock) -> None:
    t0 = manual_clock.now
    r1 = put_and_dispatch(store, make_msg(body=b"1", keys="order-1 user-7", uniq_key="U1"))
    manual_clock.advance(5000)
    r2 = put_and_dispatch(store, make_msg(body=b"2", keys=["order-2", "user-7"], uniq_key="U2"))
    r3 = put_and_dispatch(store, make_msg("Other", b"3", keys="user-7"))
    q = store.query_messages(TOPIC, "user-7", 32, 0, LONG_MAX)
    assert bodies(q.records) == [b"2", b"1"]
    assert q.index_last_update_phy_offset == r3.phys_offsets[0]
    assert q.index_last_update_timestamp == manual_clock.now
    assert bodies(store.query_messages(TOPIC, "order-1", 32, 0, LONG_MAX).records) == [b"1"]
    assert bodies(store.query_messages(TOPIC, "U2", 32, 0, LONG_MAX).records) == [b"2"]
    assert bodies(store.query_messages("Other", "user-7", 32, 0, LONG_MAX).records) == [b"3"]
    assert store.query_messages(TOPIC, "missing", 32, 0, LONG_MAX).records == []
    assert bodies(store.query_messages(TOPIC, "user-7", 1, 0, LONG_MAX).records) == [b"2"]
    window = store.query_messages(TOPIC, "user-7", 32, t0, t0 + 1000)
    assert bodies(window.records) == [b"1"]
    assert r1.phys_offsets[0] < r2.phys_offsets[0]


def test_query_filters_hash_collisions(small_config: Callable[..., StoreConfig]) -> None:
    # "Aa" and "BB" have the same Java hashCode, so "T#Aa" and "T#BB" share an index hash,
    # and so do "Aa#k" and "BB#k"
    assert java_string_hash("T#Aa") == java_string_hash("T#BB")
    assert java_string_hash("Aa#k") == java_string_hash("BB#k")
    with MessageStore(small_config(max_hash_slot_num=1)) as s:
        put_and_dispatch(s, make_msg("T", b"aa", keys="Aa"))
        put_and_dispatch(s, make_msg("T", b"bb", keys="BB"))
        put_and_dispatch(s, make_msg("T", b"cc", keys="other"))
        put_and_dispatch(s, make_msg("Aa", b"topic-aa", keys="k"))
        put_and_dispatch(s, make_msg("BB", b"topic-bb", uniq_key="k"))
        # the index alone cannot tell them apart
        assert len(s.index.query_offsets("T", "Aa", 32, 0, LONG_MAX)[0]) == 2
        assert bodies(s.query_messages("T", "Aa", 32, 0, LONG_MAX).records) == [b"aa"]
        assert bodies(s.query_messages("T", "BB", 32, 0, LONG_MAX).records) == [b"bb"]
        assert bodies(s.query_messages("Aa", "k", 32, 0, LONG_MAX).records) == [b"topic-aa"]
        assert bodies(s.query_messages("BB", "k", 32, 0, LONG_MAX).records) == [b"topic-bb"]


def test_index_can_be_disabled(small_config: Callable[..., StoreConfig]) -> None:
    with MessageStore(small_config(message_index_enable=False)) as s:
        put_and_dispatch(s, make_msg(keys="k"))
        assert s.query_messages(TOPIC, "k", 32, 0, LONG_MAX).records == []
        assert s.get_messages(TOPIC, 0, 0, 32).message_count == 1


# -- lifecycle -------------------------------------------------------------------------------


def test_a_consume_queue_size_off_the_unit_is_rounded_up_and_reopens(
    small_config: Callable[..., StoreConfig],
) -> None:
    """RocketMQ's ``getMappedFileSizeConsumeQueue`` rounds the size up to whole 20-byte units
    (70 -> 80): a store made with 70 has 80-byte files and opens again with 70 or with 80,
    the value ``mqbroker -p`` prints."""
    config = small_config(mapped_file_size_consume_queue=70)
    assert config.mapped_file_size_consume_queue == 80
    with MessageStore(config, clock_ms=ManualClock()) as s:
        put_n(s, 6)  # two consume queue files of 4 units
    cq_dir = config.consume_queue_dir / TOPIC / "0"
    assert sorted(p.stat().st_size for p in cq_dir.iterdir()) == [80, 80]
    for size in (70, 80, 61):
        with MessageStore(small_config(mapped_file_size_consume_queue=size)) as s:
            g = s.get_messages(TOPIC, 0, 4, 32)
            assert bodies(g.records) == [b"m4", b"m5"]


def test_reopen_after_clean_close(store_config: StoreConfig) -> None:
    clock = ManualClock()
    with MessageStore(store_config, clock_ms=clock) as s:
        assert s.last_exit_ok
        assert store_config.abort_path.exists()
        body = b"b" * 2000
        for i in range(40):  # about 84 KB: two commitlog files
            put_and_dispatch(s, make_msg(body=body, queue_id=i % 2, keys=f"k{i}"))
        put_and_dispatch(s, make_msg("Other", b"o"))
        s.put_message(make_msg(body=b"undispatched", queue_id=0, keys="late"))
        end = s.commitlog.max_offset
    assert not store_config.abort_path.exists()
    assert len(list(store_config.commitlog_dir.iterdir())) == 2
    with MessageStore(store_config, clock_ms=clock) as s:
        assert s.last_exit_ok
        assert s.commitlog.max_offset == end
        assert s.get_max_offset_in_queue(TOPIC, 0) == 21
        assert s.get_max_offset_in_queue(TOPIC, 1) == 20
        assert s.get_max_offset_in_queue("Other", 0) == 1
        g = s.get_messages(TOPIC, 0, 18, 32)
        assert bodies(g.records) == [body, body, b"undispatched"]
        r = put_and_dispatch(s, make_msg(body=b"next", queue_id=1))
        assert r.queue_offsets == [20]
        assert r.phys_offsets == [end]
        assert bodies(s.query_messages(TOPIC, "late", 32, 0, LONG_MAX).records) == [b"undispatched"]
        assert bodies(s.query_messages(TOPIC, "k3", 32, 0, LONG_MAX).records) == [body]


def test_second_store_on_same_root_is_locked(
    store: MessageStore, store_config: StoreConfig
) -> None:
    other = MessageStore(store_config)
    with pytest.raises(StoreLockedError):
        other.open()
    assert not other.running
    # the first store is unaffected
    assert put_and_dispatch(store, make_msg()).status is PutStatus.PUT_OK


def test_lock_is_released_on_close(store_config: StoreConfig) -> None:
    MessageStore(store_config).open().close()
    with MessageStore(store_config) as s:
        assert s.running
    assert Path(store_config.lock_path).exists()


def test_the_checkpoint_counts_the_flushed_consume_queue_units(
    small_config: Callable[..., StoreConfig],
) -> None:
    """What recovery compares the consume queues it finds with (store/checkpoint.py)."""
    cfg = small_config()
    store = MessageStore(cfg).open()
    try:
        for i in range(7):
            assert store.put_message(make_msg(queue_id=i % 3)).status is PutStatus.PUT_OK
        store.dispatch_pending()
        store.flush_logics()
        assert store.checkpoint.logics_unit_count == 7
        newest = store.index.files[-1]
        mark = IndexMark(int(newest.path.name), newest.index_count, newest.end_phy_offset)
        assert store.checkpoint.index_mark == mark
    finally:
        store.close()
    read_back = StoreCheckpoint(cfg.checkpoint_path)  # from disk
    assert (read_back.logics_unit_count, read_back.index_mark) == (7, mark)
    read_back.abandon()


def test_dispatch_counts_its_calls_and_time(store: MessageStore) -> None:
    """``dispatch_ns`` and ``dispatch_calls`` (what ``mqbench store put`` reports as the reput
    step) count only the calls that dispatched something."""
    assert (store.dispatch_ns, store.dispatch_calls) == (0, 0)
    assert store.dispatch_pending() == 0
    assert (store.dispatch_ns, store.dispatch_calls) == (0, 0)
    put_and_dispatch(store, [make_msg(body=b"a"), make_msg(body=b"b")])
    assert store.dispatch_calls == 1
    assert store.dispatch_ns > 0
