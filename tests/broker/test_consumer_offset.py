"""Tests for broker/consumer_offset.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.consumer_offset import ConsumerOffsetManager
from broker.json_store import backup_path, temp_path
from tests.broker.inprocess import running_broker


def test_commit_and_query(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    assert not manager.dirty
    assert manager.query_offset("g1", "T", 0) == -1
    manager.commit_offset("g1", "T", 0, 12)
    manager.commit_offset("g1", "T", 3, 7)
    assert manager.dirty
    assert manager.query_offset("g1", "T", 0) == 12
    assert manager.query_offset("g1", "T", 1) == -1
    assert manager.query_offset("g2", "T", 0) == -1
    assert manager.query_offsets("g1", "T") == {0: 12, 3: 7}
    assert manager.query_offsets("g1", "other") == {}
    with pytest.raises(ValueError, match="queue_id"):
        manager.commit_offset("g1", "T", -1, 0)
    with pytest.raises(ValueError, match="offset"):
        manager.commit_offset("g1", "T", 0, -5)


def test_pull_offsets_are_kept_in_memory_and_dropped_with_the_group(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("g1", "T", 0, 3)
    assert manager.query_pull_offset("g1", "T", 0) == 3  # no pull yet: the committed offset
    assert manager.query_pull_offset("g1", "T", 1) == -1
    manager.persist()
    manager.commit_pull_offset("g1", "T", 0, 9)
    manager.commit_pull_offset("g1", "U", 0, 4)
    manager.commit_pull_offset("g2", "T", 0, 5)
    assert not manager.dirty  # nothing to persist
    assert manager.query_pull_offset("g1", "T", 0) == 9
    assert manager.to_wire() == {"offsetTable": {"T@g1": {"0": 3}}}
    manager.remove_group("g1", "T")
    assert manager.query_pull_offset("g1", "T", 0) == -1
    assert manager.query_pull_offset("g1", "U", 0) == 4
    manager.remove_topic("T")
    assert manager.query_pull_offset("g2", "T", 0) == -1
    manager.remove_group("g1")
    assert manager.query_pull_offset("g1", "U", 0) == -1


def test_which_topics_and_groups(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("g1", "T1", 0, 1)
    manager.commit_offset("g1", "%RETRY%g1", 0, 1)
    manager.commit_offset("g2", "T1", 0, 1)
    assert manager.which_topics_by_group("g1") == {"T1", "%RETRY%g1"}
    assert manager.which_groups_by_topic("T1") == {"g1", "g2"}
    assert manager.which_groups_by_topic("nope") == set()


def test_clone_and_remove(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("g1", "T1", 0, 5)
    manager.commit_offset("g1", "T2", 1, 6)
    assert manager.clone_offset("g1", "g9", "T1")
    assert not manager.clone_offset("missing", "g9", "T1")
    assert manager.query_offsets("g9", "T1") == {0: 5}
    manager.commit_offset("g1", "T1", 0, 50)  # clone is a copy
    assert manager.query_offset("g9", "T1", 0) == 5
    assert manager.remove_group("g1", topic="T2") == 1
    assert manager.which_topics_by_group("g1") == {"T1"}
    assert manager.remove_group("g1") == 1
    assert manager.which_topics_by_group("g1") == set()
    assert manager.query_offset("g9", "T1", 0) == 5


def test_json_shape_and_round_trip(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("g1", "T1", 0, 12)
    manager.commit_offset("g1", "T1", 1, 3)
    manager.commit_offset("g2", "%RETRY%g2", 0, 0)
    manager.persist()
    assert not manager.dirty
    doc = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert doc == {"offsetTable": {"%RETRY%g2@g2": {"0": 0}, "T1@g1": {"0": 12, "1": 3}}}
    again = ConsumerOffsetManager(tmp_path)
    assert again.query_offsets("g1", "T1") == {0: 12, 1: 3}
    assert again.which_groups_by_topic("%RETRY%g2") == {"g2"}
    assert not again.dirty


def test_dirty_flag_skips_unchanged(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    assert not manager.persist_if_dirty()
    assert not manager.path.exists()
    manager.commit_offset("g", "T", 0, 1)
    assert manager.persist_if_dirty()
    assert not manager.persist_if_dirty()
    manager.commit_offset("g", "T", 0, 1)  # same value: not a change
    assert not manager.dirty


def test_corrupt_main_falls_back_to_bak(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("g", "T", 0, 1)
    manager.persist()
    manager.commit_offset("g", "T", 0, 2)
    manager.persist()
    assert json.loads(backup_path(manager.path).read_text()) == {"offsetTable": {"T@g": {"0": 1}}}
    temp_path(manager.path).write_text("garbage from a crashed writer")
    assert ConsumerOffsetManager(tmp_path).query_offset("g", "T", 0) == 2
    manager.path.write_text('{"offsetTable": {"T@g": {"0": ')
    assert ConsumerOffsetManager(tmp_path).query_offset("g", "T", 0) == 1


def test_bad_shape_rejected(tmp_path: Path) -> None:
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable": {"T@g": {"x": 1}}}')
    with pytest.raises(ValueError, match="bad offset"):
        ConsumerOffsetManager(tmp_path)


def test_take_dirty_snapshot_is_taken_once(tmp_path: Path) -> None:
    mgr = ConsumerOffsetManager(tmp_path)
    assert mgr.take_dirty_snapshot() is None
    mgr.commit_offset("g", "T", 0, 7)
    doc = mgr.take_dirty_snapshot()
    assert doc == {"offsetTable": {"T@g": {"0": 7}}}
    assert not mgr.dirty
    assert mgr.take_dirty_snapshot() is None
    mgr.commit_offset("g", "T", 0, 8)  # a later change is not in the earlier snapshot
    assert doc == {"offsetTable": {"T@g": {"0": 7}}}
    assert mgr.dirty


async def test_offsets_that_cannot_be_written_at_shutdown_do_not_stop_the_close(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk at SIGTERM: the broker says which file it could not write and still closes
    its store cleanly (checkpoint written, abort file removed) instead of failing the whole
    shutdown (which the command line reported as "cannot start")."""
    async with running_broker(tmp_path) as (broker, _addr):
        assert broker.offsets is not None
        broker.offsets.commit_offset("cg", "T", 0, 7)
        temp_path(broker.offsets.path).mkdir(parents=True)  # the write fails for real (EISDIR)
    assert "consumer offsets not persisted on shutdown" in caplog.text
    assert broker.store is not None
    assert not broker.store.config.abort_path.exists()


def test_clone_to_a_group_with_the_key_separator_is_refused(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("g1", "T1", 0, 5)
    with pytest.raises(ValueError, match="must not contain '@'"):
        manager.clone_offset("g1", "x@y", "T1")
    assert manager.which_groups_by_topic("T1") == {"g1"}
    assert manager.which_topics_by_group("y") == set()
