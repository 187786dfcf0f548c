"""A key lookup in steps (``MessageStore.query_steps``) pauses every ``walk_step`` entries; what
the broker's loop does between two steps (index new records, let retention delete index files)
does not change its result."""

from __future__ import annotations

from pathlib import Path

from common.record import decode_record
from store import MessageStore
from store.index_service import run_steps
from tests.conftest import ManualClock, drain_dispatch, make_msg, small_store_config

TOPIC = "T"


def filled(root: Path, clock: ManualClock) -> tuple[MessageStore, int]:
    """A store whose 20 oldest messages with key ``hot`` are followed, a minute later, by 2,000
    newer ones, all in its first index file (it holds 2,099); and the time of the old ones."""
    cfg = small_store_config(root, max_hash_slot_num=16, max_index_num=2_100)
    store = MessageStore(cfg, clock_ms=clock).open()
    old_time = clock.now
    store.put_messages([make_msg(TOPIC, b"old%d" % i, keys="hot") for i in range(20)])
    clock.advance(60_000)
    for _ in range(20):
        store.put_messages([make_msg(TOPIC, b"new", keys="hot") for _ in range(100)])
        drain_dispatch(store)
    return store, old_time


def bodies(raws: list[bytes]) -> list[bytes]:
    """The bodies of raw records."""
    return [decode_record(raw).body for raw in raws]


def test_query_steps_pause_and_find_what_query_messages_finds(tmp_path: Path) -> None:
    store, old_time = filled(tmp_path / "store", ManualClock())
    try:
        expected = store.query_messages(TOPIC, "hot", 64, old_time, old_time + 999)
        assert sorted(bodies(expected.records)) == sorted(b"old%d" % i for i in range(20))
        store.index.walk_step = 50
        steps = store.query_steps(TOPIC, "hot", 64, old_time, old_time + 999)
        pauses = sum(1 for _ in steps)
        assert pauses >= 2_000 // 50 - 1
        again = run_steps(store.query_steps(TOPIC, "hot", 64, old_time, old_time + 999))
        assert again == expected
    finally:
        store.close()


def test_a_paused_lookup_survives_new_entries_and_deleted_files(tmp_path: Path) -> None:
    clock = ManualClock()
    store, old_time = filled(tmp_path / "store", clock)
    try:
        expected = store.query_messages(TOPIC, "hot", 64, old_time, old_time + 999)
        store.index.walk_step = 50
        steps = store.query_steps(TOPIC, "hot", 64, old_time, old_time + 999)
        next(steps)
        walked = store.index.files[0]
        files_before = len(store.index.files)
        for _ in range(3):  # new entries, then a new file, while the walk is paused
            store.put_messages([make_msg(TOPIC, b"newer", keys="hot") for _ in range(100)])
            drain_dispatch(store)
            next(steps)
        assert len(store.index.files) > files_before
        # retention deletes every index file but the newest (the commitlog keeps the records)
        assert store.index.delete_expired(store.commitlog.max_offset) > 0
        assert not walked.path.exists()
        assert run_steps(steps) == expected
    finally:
        store.close()
