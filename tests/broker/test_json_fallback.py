"""Every JSON state file of the broker falls back to its ``.bak`` when the main file is valid
JSON of the wrong shape (RocketMQ's ``ConfigManager.load`` tries ``loadBak`` on any decode
failure), and fails with the file named when there is no good copy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.consumer_offset import ConsumerOffsetManager
from broker.json_store import backup_path
from broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from common.route import TopicConfig
from store.deleted_topics import DeletedTopics


@dataclass(frozen=True)
class StateFile:
    """How to write two generations of a file, reload it and read what it holds."""

    name: str
    write_two: Callable[[Path], Path]  # returns the file's path; the .bak has generation 1
    reload: Callable[[Path], object]
    generation: Callable[[object], int | None]
    wrong_shapes: tuple[str, ...]
    change: Callable[[object], None]  # one more change, persisted


def _topics_two(d: Path) -> Path:
    manager = TopicConfigManager(d, 4, False)
    manager.create_or_update(TopicConfig("T", 1, 1))
    manager.create_or_update(TopicConfig("T", 2, 2))
    return manager.path


def _topics_generation(manager: object) -> int | None:
    assert isinstance(manager, TopicConfigManager)
    config = manager.select("T")
    return None if config is None else config.read_queue_nums


def _groups_two(d: Path) -> Path:
    manager = SubscriptionGroupManager(d, auto_create=False)
    manager.create_or_update(SubscriptionGroupConfig("cg", retry_max_times=1))
    manager.create_or_update(SubscriptionGroupConfig("cg", retry_max_times=2))
    return manager.path


def _groups_generation(manager: object) -> int | None:
    assert isinstance(manager, SubscriptionGroupManager)
    config = manager.select("cg")
    return None if config is None else config.retry_max_times


def _offsets_two(d: Path) -> Path:
    manager = ConsumerOffsetManager(d)
    for offset in (1, 2):
        manager.commit_offset("g", "T", 0, offset)
        manager.persist()
    return manager.path


def _offsets_generation(manager: object) -> int | None:
    assert isinstance(manager, ConsumerOffsetManager)
    offset = manager.query_offset("g", "T", 0)
    return None if offset < 0 else offset


def _deleted_two(d: Path) -> Path:
    deleted = DeletedTopics(d / "deletedTopics.json")
    deleted.add("T", 1)
    deleted.add("T", 2)
    return deleted.path


def _topics_change(manager: object) -> None:
    assert isinstance(manager, TopicConfigManager)
    manager.create_or_update(TopicConfig("U", 1, 1))


def _groups_change(manager: object) -> None:
    assert isinstance(manager, SubscriptionGroupManager)
    manager.create_or_update(SubscriptionGroupConfig("other"))


def _offsets_change(manager: object) -> None:
    assert isinstance(manager, ConsumerOffsetManager)
    manager.commit_offset("g", "U", 0, 9)
    manager.persist()


def _deleted_change(deleted: object) -> None:
    assert isinstance(deleted, DeletedTopics)
    deleted.add("U", 9)


def _deleted_reload(d: Path) -> object:
    deleted = DeletedTopics(d / "deletedTopics.json")
    deleted.load()
    return deleted


def _deleted_generation(deleted: object) -> int | None:
    assert isinstance(deleted, DeletedTopics)
    return deleted.cuts.get("T")


STATE_FILES = [
    StateFile(
        "topics",
        _topics_two,
        lambda d: TopicConfigManager(d, 4, False),
        _topics_generation,
        ("[]", '{"topicConfigTable": {"T": {"readQueueNums": 8}}}', '{"topicConfigTable": 5}'),
        _topics_change,
    ),
    StateFile(
        "subscription groups",
        _groups_two,
        lambda d: SubscriptionGroupManager(d, auto_create=False),
        _groups_generation,
        ('{"subscriptionGroupTable": []}', '{"subscriptionGroupTable": {"cg": 1}}', "7"),
        _groups_change,
    ),
    StateFile(
        "consumer offsets",
        _offsets_two,
        ConsumerOffsetManager,
        _offsets_generation,
        ('{"offsetTable": 5}', '{"offsetTable": {"T@g": {"x": 1}}}', "[1, 2]"),
        _offsets_change,
    ),
    StateFile(
        "deleted topics",
        _deleted_two,
        _deleted_reload,
        _deleted_generation,
        ("[]", '{"T": "two"}', '{"T": -1}'),
        _deleted_change,
    ),
]


@pytest.mark.parametrize("state", STATE_FILES, ids=lambda s: s.name)
def test_wrong_shape_falls_back_to_the_backup(
    state: StateFile, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = state.write_two(tmp_path)
    assert state.generation(state.reload(tmp_path)) == 2
    for shape in state.wrong_shapes:
        path.write_text(shape)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert state.generation(state.reload(tmp_path)) == 1, shape
        assert any(path.name in r.getMessage() for r in caplog.records), shape


@pytest.mark.parametrize("state", STATE_FILES, ids=lambda s: s.name)
def test_wrong_shape_without_a_good_backup_names_the_file(state: StateFile, tmp_path: Path) -> None:
    path = state.write_two(tmp_path)
    path.write_text(state.wrong_shapes[0])
    backup_path(path).unlink()
    with pytest.raises(ValueError, match="is corrupt and has no backup") as no_backup:
        state.reload(tmp_path)
    assert str(path) in str(no_backup.value)
    backup_path(path).write_text(state.wrong_shapes[1])
    with pytest.raises(ValueError, match="both corrupt") as both:
        state.reload(tmp_path)
    assert path.name + ".bak" in str(both.value)
    path.unlink()
    with pytest.raises(ValueError, match="is missing and its backup is corrupt"):
        state.reload(tmp_path)


@pytest.mark.parametrize("state", STATE_FILES, ids=lambda s: s.name)
def test_a_refused_file_never_replaces_a_good_backup(state: StateFile, tmp_path: Path) -> None:
    """The next write after loading the backup must not copy the refused file over it."""
    path = state.write_two(tmp_path)
    path.write_text(state.wrong_shapes[0])
    state.change(state.reload(tmp_path))  # loaded generation 1 from the backup, then wrote
    path.unlink()
    assert state.generation(state.reload(tmp_path)) == 1
