"""Deleting a topic: its queues go at once, its records stay dead through crashes and restarts."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from store import GetStatus, MessageStore, PutStatus, StoreConfig
from store.deleted_topics import FILE_NAME, DeletedTopics
from store.invariants import check_store
from tests.conftest import ManualClock, drain_dispatch, make_msg, small_store_config
from tests.store.faults import stall_fdatasync

LONG_MAX = 2**63 - 1
GONE, KEPT = "Gone", "Kept"


def put(store: MessageStore, topic: str, queue_id: int, n: int, tag: str = "a") -> list[int]:
    """Put ``n`` keyed messages one at a time (not dispatched); return their queue offsets."""
    out = []
    for i in range(n):
        msg = make_msg(topic, b"%s-%d" % (topic.encode(), i), queue_id, keys=f"{topic}-k{i}")
        msg.properties["UNIQ_KEY"] = f"{topic}-{queue_id}-{i}-{tag}"
        result = store.put_messages([msg])
        assert result.status is PutStatus.PUT_OK
        out.append(result.queue_offsets[0])
    return out


def queue_bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    """Every readable body of a queue, in order."""
    got = store.get_messages(topic, queue_id, 0, 1000)
    if got.status is not GetStatus.FOUND:
        return []
    from common.record import decode_records

    return [r.body for r in decode_records(b"".join(got.records))]


def fill(store: MessageStore) -> None:
    put(store, GONE, 0, 5)
    put(store, GONE, 1, 3)
    put(store, KEPT, 0, 4)
    drain_dispatch(store)
    put(store, GONE, 0, 2)  # appended, not yet dispatched when the topic goes


def crashed_copy(store: MessageStore, tmp_path: Path) -> Path:
    """Copy the open store's files as a kill would leave them (abort file, page cache)."""
    copy = tmp_path / "crashed"
    shutil.copytree(store.config.store_path_root_dir, copy)
    return copy


def fill_and_flush(store: MessageStore) -> None:
    """:func:`fill`, dispatched, with consume queues, index and checkpoint flushed."""
    fill(store)
    drain_dispatch(store)
    store.flush_logics()


def test_delete_topic_drops_its_queues_and_restarts_its_offsets(
    small_config: Callable[..., StoreConfig], manual_clock: ManualClock
) -> None:
    cfg = small_config()
    with MessageStore(cfg, clock_ms=manual_clock) as store:
        fill(store)
        assert store.delete_topic("Never") == 0  # no queues of it
        assert store.delete_topic(GONE) == 2
        assert not (cfg.consume_queue_dir / GONE).exists()
        assert store.find_consume_queue(GONE, 0) is None
        drain_dispatch(store)  # the two pending records are dead: no queue comes back
        assert store.find_consume_queue(GONE, 0) is None
        assert store.get_messages(GONE, 0, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.query_messages(GONE, f"{GONE}-k0", 10, 0, LONG_MAX).records == []
        assert len(queue_bodies(store, KEPT, 0)) == 4
        assert put(store, GONE, 0, 1, tag="again") == [0]  # a new queue, from offset 0
        drain_dispatch(store)
        assert queue_bodies(store, GONE, 0) == [b"Gone-0"]
        assert len(store.query_messages(GONE, f"{GONE}-k0", 10, 0, LONG_MAX).records) == 1
        assert check_store(store) == []
        assert DeletedTopics(cfg.store_path_root_dir / FILE_NAME).path.exists()


def test_has_topic_while_a_queue_or_a_queue_offset_of_it_exists(
    small_config: Callable[..., StoreConfig], manual_clock: ManualClock
) -> None:
    with MessageStore(small_config(), clock_ms=manual_clock) as store:
        assert not store.has_topic(GONE)
        put(store, GONE, 0, 1)  # appended, not dispatched: no queue yet, but an offset
        assert store.has_topic(GONE)
        drain_dispatch(store)
        assert store.has_topic(GONE)
        store.delete_topic(GONE)
        assert not store.has_topic(GONE)
        assert store.has_topic(GONE[:-1]) is False  # a prefix is another topic


def test_deleted_topic_stays_deleted_after_a_crash_and_a_clean_restart(
    small_config: Callable[..., StoreConfig],
    manual_clock: ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    cfg = small_config()
    store = MessageStore(cfg, clock_ms=manual_clock).open()
    try:
        fill_and_flush(store)  # the checkpoint vouches for the topic's units
        store.delete_topic(GONE)
        put(store, GONE, 1, 2, tag="again")
        drain_dispatch(store)
        copy = crashed_copy(store, tmp_path)
    finally:
        store.close()
    for root in (copy, cfg.store_path_root_dir):  # after a crash, and after a clean close
        with MessageStore(small_config(root), clock_ms=manual_clock) as reopened:
            assert check_store(reopened) == []
            assert reopened.find_consume_queue(GONE, 0) is None
            assert queue_bodies(reopened, GONE, 1) == [b"Gone-0", b"Gone-1"]
            assert len(queue_bodies(reopened, KEPT, 0)) == 4
        # the checkpoint's unit count dropped with the topic: no whole-log re-dispatch
        assert "files were lost" not in caplog.text


def test_a_topic_sent_to_again_after_its_deletion_lost_the_log_tail(
    small_config: Callable[..., StoreConfig], manual_clock: ManualClock, tmp_path: Path
) -> None:
    """The deletion is durable, the records before it were not (ASYNC_FLUSH): a power cut
    takes the log back below where the topic was deleted. Messages sent to the topic after
    that land below the old cut, and are the new topic's: alive, at queue offsets from 0."""
    cfg = small_config()
    store = MessageStore(cfg, clock_ms=manual_clock).open()
    try:
        fill_and_flush(store)
        store.flush_commitlog()
        durable_end = store.commitlog.max_offset
        put(store, GONE, 0, 6)  # never flushed
        store.delete_topic(GONE)
        copy = crashed_copy(store, tmp_path)
    finally:
        store.close()
    path = small_config(copy).commitlog_dir / f"{0:020d}"  # everything in the first file
    with open(path, "r+b") as f:
        f.seek(durable_end)
        f.write(bytes(path.stat().st_size - durable_end))  # the power cut took the tail
    with MessageStore(small_config(copy), clock_ms=manual_clock) as reopened:
        assert reopened.commitlog.max_offset == durable_end
        assert put(reopened, GONE, 0, 3, tag="new") == [0, 1, 2]
        drain_dispatch(reopened)
        assert queue_bodies(reopened, GONE, 0) == [b"Gone-0", b"Gone-1", b"Gone-2"]
        assert check_store(reopened) == []
    with MessageStore(small_config(copy), clock_ms=manual_clock) as again:  # and after a restart
        assert queue_bodies(again, GONE, 0) == [b"Gone-0", b"Gone-1", b"Gone-2"]


def test_a_queue_of_the_topic_created_again_that_came_back_empty(
    small_config: Callable[..., StoreConfig], manual_clock: ManualClock, tmp_path: Path
) -> None:
    """A queue of a deleted topic without a readable unit may be the new topic's (its file
    came back empty from a power cut): open() removes it, so recovery must dispatch the
    topic's live records again, though other queues and the index cover them."""
    cfg = small_config()
    store = MessageStore(cfg, clock_ms=manual_clock).open()
    try:
        fill_and_flush(store)
        store.delete_topic(GONE)
        store.flush_logics()
        put(store, GONE, 1, 2, tag="again")
        put(store, KEPT, 0, 3, tag="later")
        drain_dispatch(store)
        copy = crashed_copy(store, tmp_path)
    finally:
        store.close()
    (only,) = (small_config(copy).consume_queue_dir / GONE / "1").iterdir()
    only.write_bytes(bytes(only.stat().st_size))  # never flushed: zeros after the power cut
    with MessageStore(small_config(copy), clock_ms=manual_clock) as reopened:
        assert queue_bodies(reopened, GONE, 1) == [b"Gone-0", b"Gone-1"]
        assert check_store(reopened) == []


def test_queues_left_by_a_crash_during_deletion_are_removed_at_open(
    small_config: Callable[..., StoreConfig],
    manual_clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The deletion is recorded before any file goes: files found after it are removed."""
    caplog.set_level(logging.WARNING)
    cfg = small_config()
    store = MessageStore(cfg, clock_ms=manual_clock).open()
    try:
        fill_and_flush(store)
        # as if the process died right after recording the deletion
        store.deleted_topics.add(GONE, store.commitlog.max_offset)
    finally:
        store.close()
    assert (cfg.consume_queue_dir / GONE / "0").exists()
    with MessageStore(cfg, clock_ms=manual_clock) as reopened:
        assert not (cfg.consume_queue_dir / GONE).exists()
        assert reopened.find_consume_queue(GONE, 1) is None
        assert check_store(reopened) == []
        assert reopened.dead_units_dropped == 10
    assert "files were lost" not in caplog.text  # the removed units are accounted for


def test_retention_forgets_a_deletion_once_its_records_are_gone(
    small_config: Callable[..., StoreConfig], manual_clock: ManualClock
) -> None:
    cfg = small_config(file_reserved_time=1)
    with MessageStore(cfg, clock_ms=manual_clock) as store:
        put(store, GONE, 0, 3)
        drain_dispatch(store)
        store.delete_topic(GONE)
        while len(store.commitlog.queue.files) < 3:  # fill past the first files
            put(store, KEPT, 0, 20)
            drain_dispatch(store)
        assert store.deleted_topics.cuts
        old = (manual_clock.now - 2 * 3600 * 1000) / 1000
        for mf in store.commitlog.queue.files[:-1]:
            os.utime(mf.path, (old, old))
        assert store.clean_expired_files(manual=True) > 0
        assert store.commitlog.min_offset > 0
        assert store.deleted_topics.cuts == {}
        on_disk = DeletedTopics(cfg.store_path_root_dir / FILE_NAME)
        on_disk.load()
        assert on_disk.cuts == {}
        assert check_store(store) == []


def test_a_topic_deleted_while_the_queues_flush_is_not_counted_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint's unit count is read before the queues are flushed. A topic deleted
    while the flush runs lowers the count at once; the flush must not then write back the
    count from before, or the next crash recovery would take the missing units for lost files
    and re-dispatch the whole log."""
    cfg = small_store_config(tmp_path / "store")
    store = MessageStore(cfg).open()
    try:
        for topic in ("Kept", "Gone"):
            store.put_messages([make_msg(topic, b"x%d" % i) for i in range(5)])
        drain_dispatch(store)
        store.flush_commitlog()  # (recorded by the checkpoint the flush below writes)
        kept = store.find_consume_queue("Kept", 0)
        assert kept is not None
        stall = stall_fdatasync({f.fd for f in kept.queue.files}, monkeypatch.setattr)
        flusher = threading.Thread(target=store.flush_logics)
        flusher.start()
        assert stall.entered.wait(30)  # the flush has read the count and is syncing
        store.delete_topic("Gone")
        stall.released.set()
        flusher.join(30)
        assert not flusher.is_alive()
        assert store.checkpoint.logics_unit_count == 5
        copy = crashed_copy(store, tmp_path)
    finally:
        store.close()
    with MessageStore(small_store_config(copy)) as crashed:
        assert crashed.recovered_range[0] > 0  # no re-dispatch of the whole log
        assert check_store(crashed) == []


def test_a_deletion_that_cannot_be_written_changes_nothing(
    small_config: Callable[..., StoreConfig], manual_clock: ManualClock
) -> None:
    """The deletion file cannot be written (a full disk): the deletion fails as a whole. The
    topic's offsets were reset first, so later sends were stored at 0, 1, ... while its old
    queues stayed, and dispatch skipped them as already there: acknowledged, never readable."""
    cfg = small_config()
    with MessageStore(cfg, clock_ms=manual_clock) as store:
        fill_and_flush(store)
        blocker = cfg.store_path_root_dir / (FILE_NAME + ".tmp")
        blocker.mkdir()  # where the file is written before its rename
        with pytest.raises(IsADirectoryError):
            store.delete_topic(GONE)
        assert store.deleted_topics.cuts == {}
        assert put(store, GONE, 0, 1, tag="after") == [7]  # the queue goes on
        drain_dispatch(store)
        assert queue_bodies(store, GONE, 0)[-1] == b"Gone-0"  # the new one, at 7
        assert len(queue_bodies(store, GONE, 0)) == 8
        assert check_store(store) == []
        blocker.rmdir()
        assert store.delete_topic(GONE) == 2
        assert store.find_consume_queue(GONE, 0) is None
