"""Tests for broker/topic_config.py and broker/json_store.py."""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from broker.json_store import backup_path, load_json, temp_path, write_json_atomic
from broker.topic_config import TopicConfigManager
from common.route import TopicConfig
from common.topic import (
    dlq_topic,
    is_not_allowed_send_topic,
    is_system_topic,
    retry_topic,
    topic_problem,
)


def _manager(tmp_path: Path, auto: bool = True) -> TopicConfigManager:
    return TopicConfigManager(tmp_path / "config", default_queue_nums=8, auto_create_enable=auto)


@pytest.mark.parametrize(
    "name", ["TopicTest", "a", "%RETRY%group", "%DLQ%g-1", "with_under-dash", "x|y", "A" * 127]
)
def test_valid_topic_names(name: str) -> None:
    assert topic_problem(name) is None


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "blank"),
        ("   ", "blank"),
        ("A" * 128, "127"),
        ("has space", "characters"),
        ("topic@group", "characters"),
        ("dot.topic", "characters"),
        ("中文", "characters"),
    ],
)
def test_invalid_topic_names(name: str, reason: str) -> None:
    result = topic_problem(name)
    assert result is not None
    assert reason in result


def test_system_topic_predicates() -> None:
    for topic in (
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    ):
        assert is_system_topic(topic)
        assert is_not_allowed_send_topic(topic)
    assert is_system_topic("TBW102")
    assert not is_not_allowed_send_topic("TBW102")
    assert is_system_topic("rmq_sys_anything")
    assert not is_system_topic("TopicTest")
    assert not is_not_allowed_send_topic("TopicTest")
    assert retry_topic("g1") == "%RETRY%g1"
    assert dlq_topic("g1") == "%DLQ%g1"


def test_system_topics_present(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    tbw = manager.select("TBW102")
    assert tbw is not None
    assert (tbw.read_queue_nums, tbw.write_queue_nums, tbw.perm) == (8, 8, 7)
    for topic in ("SELF_TEST_TOPIC", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT"):
        assert topic in manager
    schedule = manager.select("SCHEDULE_TOPIC_XXXX")
    assert schedule is not None
    assert schedule.read_queue_nums == 18
    assert manager.data_version == 0
    assert not manager.path.exists()
    assert "TBW102" not in _manager(tmp_path / "off", auto=False)


def test_auto_create_on(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    created = manager.create_on_send("NewTopic")
    assert created == TopicConfig("NewTopic", 8, 8, 6)
    assert manager.select("NewTopic") == created
    assert manager.data_version == 1
    assert manager.create_on_send("NewTopic") is created
    assert manager.data_version == 1
    assert manager.create_on_send("bad name") is None
    assert manager.create_on_send("RMQ_SYS_TRANS_HALF_TOPIC") is not None  # exists already
    manager.delete("RMQ_SYS_TRANS_HALF_TOPIC")
    assert manager.create_on_send("RMQ_SYS_TRANS_HALF_TOPIC") is None
    # the producer's defaultTopicQueueNums, at most TBW102's write queues (RocketMQ's rule)
    assert manager.create_on_send("Fewer", 3) == TopicConfig("Fewer", 3, 3, 6)
    assert manager.create_on_send("More", 64) == TopicConfig("More", 8, 8, 6)


def test_auto_create_off(tmp_path: Path) -> None:
    manager = _manager(tmp_path, auto=False)
    assert manager.create_on_send("NewTopic") is None
    assert manager.select("NewTopic") is None
    manager.create_or_update(TopicConfig("NewTopic", 4, 4))
    assert manager.create_on_send("NewTopic") == TopicConfig("NewTopic", 4, 4)


def test_create_update_delete_bump_version(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.create_or_update(TopicConfig("T1", 4, 4))
    assert manager.data_version == 1
    manager.create_or_update(TopicConfig("T1", 4, 4))  # no change
    assert manager.data_version == 1
    manager.create_or_update(TopicConfig("T1", 2, 2, perm=4))
    assert manager.data_version == 2
    assert manager.delete("T1") == TopicConfig("T1", 2, 2, perm=4)
    assert manager.delete("T1") is None
    assert manager.data_version == 3
    with pytest.raises(ValueError, match="characters"):
        manager.create_or_update(TopicConfig("bad topic"))


def test_persistence_round_trip(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.create_or_update(TopicConfig("T1", 4, 2, perm=2, order=True))
    manager.create_on_send("T2")
    doc = json.loads(manager.path.read_text())
    assert doc["topicConfigTable"]["T1"] == {
        "topicName": "T1",
        "readQueueNums": 4,
        "writeQueueNums": 2,
        "perm": 2,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": True,
    }
    assert doc["dataVersion"]["counter"] == 2
    again = _manager(tmp_path)
    assert again.topics() == manager.topics()
    assert again.data_version == 2
    assert backup_path(manager.path).exists()


def test_crashed_writer_leaves_valid_file(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.create_or_update(TopicConfig("T1", 4, 4))
    temp_path(manager.path).write_bytes(b'{"topicConfigTable": {"T1": {"topicN')
    again = _manager(tmp_path)
    assert again.select("T1") == TopicConfig("T1", 4, 4)


def test_corrupt_main_file_falls_back_to_bak(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = _manager(tmp_path)
    manager.create_or_update(TopicConfig("T1", 4, 4))
    manager.create_or_update(TopicConfig("T2", 4, 4))  # bak now holds T1 only
    manager.path.write_bytes(b"\x00\x00garbage")
    with caplog.at_level(logging.WARNING):
        again = _manager(tmp_path)
    assert "T1" in again
    assert "T2" not in again
    assert again.data_version == 1
    assert any("topics.json" in r.getMessage() for r in caplog.records)
    # The next write keeps the good .bak instead of copying the corrupt file over it.
    again.create_or_update(TopicConfig("T3", 1, 1))
    assert json.loads(backup_path(again.path).read_text())["dataVersion"]["counter"] == 1


def test_json_store_missing_and_both_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert load_json(path) is None
    write_json_atomic(path, {"a": 1})
    assert not backup_path(path).exists()
    write_json_atomic(path, {"a": 2})
    assert json.loads(backup_path(path).read_text()) == {"a": 1}
    path.unlink()
    assert load_json(path) == {"a": 1}
    path.write_text("")
    backup_path(path).write_text("{nope")
    with pytest.raises(ValueError, match="corrupt"):
        load_json(path)
    assert not temp_path(path).exists()


def _unwritable(path: Path) -> Path:
    """Make the next atomic write of ``path`` fail for real: its temp name is a directory
    (EISDIR), as a full disk would make it fail (ENOSPC)."""
    blocker = temp_path(path)
    blocker.mkdir(parents=True)
    return blocker


def test_a_topic_change_that_cannot_be_written_is_not_kept(tmp_path: Path) -> None:
    """In memory only, a created topic would vanish at the next restart (its acknowledged
    messages unreachable) and a retry would write nothing, the table being "unchanged"; a
    deleted one would come back. A change counts only once it is on disk."""
    mgr = _manager(tmp_path)
    mgr.create_or_update(TopicConfig("Kept", 2, 2, 6))
    version = mgr.data_version
    blocker = _unwritable(mgr.path)
    with pytest.raises(IsADirectoryError):
        mgr.create_or_update(TopicConfig("T4", 2, 2, 6))
    with pytest.raises(IsADirectoryError):
        mgr.create_on_send("AutoT5")
    with pytest.raises(IsADirectoryError):
        mgr.create_or_update(TopicConfig("Kept", 4, 4, 6))
    with pytest.raises(IsADirectoryError):
        mgr.delete("Kept")
    assert mgr.select("T4") is None
    assert mgr.select("AutoT5") is None
    assert mgr.select("Kept") == TopicConfig("Kept", 2, 2, 6)
    assert mgr.data_version == version
    blocker.rmdir()  # space is back: the retries write
    mgr.create_or_update(TopicConfig("T4", 2, 2, 6))
    mgr.delete("Kept")
    again = _manager(tmp_path)
    assert again.select("T4") == TopicConfig("T4", 2, 2, 6)
    assert again.select("Kept") is None


def test_a_write_that_fails_part_way_leaves_no_temp_file(tmp_path: Path) -> None:
    """A real short write: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes ``write``
    fail with EFBIG after the temp file was made, as ENOSPC would on a full disk. The part-written
    temp file goes (it would hold space on that disk); the old file stays."""
    target = tmp_path / "topics.json"
    write_json_atomic(target, {"old": True})
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from common.json_store import write_json_atomic\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    write_json_atomic(Path(sys.argv[1]), {'big': 'x' * 100000})\n"
        "except OSError as exc:\n"
        "    print(exc.errno)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(target)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == str(errno.EFBIG), out.stderr
    assert not temp_path(target).exists()
    assert load_json(target) == {"old": True}
