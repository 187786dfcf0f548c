"""Power cuts against the names of new files and directories (:mod:`store.mapped_file`).

A file's ``fdatasync`` does not make its name durable, nor the name of a directory created for
it: each lives in its parent directory, which must be synced after the entry appeared. The
flush recorder (:mod:`tests.store.flush_recorder`) logs every directory the store creates and
every directory sync; after a simulated power cut, a directory whose name was never made
durable is gone with everything in it, and a file created but never flushed may come back
missing, empty or cut short.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from common.json_store import load_json, write_json_atomic
from common.record import decode_record
from store import MessageStore, PutStatus
from store.config import StoreConfig
from tests.conftest import ManualClock, drain_dispatch, make_msg, small_store_config
from tests.store.flush_recorder import abandon, install, power_loss

pytestmark = pytest.mark.timeout(60)


def _put(store: MessageStore, clock: ManualClock, topic: str, bodies: list[bytes]) -> None:
    for body in bodies:
        clock.advance(1)
        assert store.put_messages([make_msg(topic, body, 0)]).status is PutStatus.PUT_OK
    drain_dispatch(store)


def _bodies(store: MessageStore, topic: str) -> list[bytes]:
    """Every message in queue 0 of ``topic``, in queue order."""
    got = store.get_messages(topic, 0, 0, 32)
    return [decode_record(r).body for r in got.records]


def _power_cut(store: MessageStore, record: Path, baseline: Path | None, seed: int = 0) -> None:
    """Leave ``store`` as a power cut now would (no write-back of unflushed pages)."""
    abandon(store)
    power_loss(
        store.config.store_path_root_dir,
        baseline,
        record / "log",
        record / "snapshots",
        seed,
        writeback=False,
    )


def test_a_new_topics_queue_directory_survives_a_power_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new topic's first dispatch creates ``consumequeue/<topic>/<queueId>/``. Once its queue
    is flushed and the checkpoint counts its units, the topic's directory must be named durably
    in ``consumequeue/``: otherwise a power cut can take the whole queue, and when another
    queue's units flushed since make up the count (a cut between the queues' flush and the
    checkpoint's write), recovery sees nothing missing and, the checkpoint vouching for every
    record before the last flush, never dispatches the lost queue's messages again."""
    clock = ManualClock()
    cfg = small_store_config(tmp_path / "store")
    with MessageStore(cfg, clock_ms=clock) as store:
        _put(store, clock, "TopicB", [b"b0"])
    baseline = tmp_path / "baseline"
    shutil.copytree(cfg.store_path_root_dir, baseline)
    record = tmp_path / "record"
    install(record / "log", record / "snapshots", monkeypatch.setattr)
    store = MessageStore(cfg, clock_ms=clock).open()
    _put(store, clock, "TopicA", [b"a0", b"a1", b"a2"])
    _put(store, clock, "TopicB", [b"b1", b"b2", b"b3"])
    store.flush_commitlog()
    store.flush_logics()  # the checkpoint counts 7 units: TopicA's 3 and TopicB's 4
    _put(store, clock, "TopicB", [b"b4", b"b5", b"b6"])
    store.flush_commitlog()
    for cq in store.consume_queues():  # flush_logics' first step; the power cut comes
        cq.flush()  # before its checkpoint write
    _power_cut(store, record, baseline)
    with MessageStore(cfg, clock_ms=clock) as recovered:
        assert _bodies(recovered, "TopicB") == [f"b{i}".encode() for i in range(7)]
        assert _bodies(recovered, "TopicA") == [b"a0", b"a1", b"a2"]


def test_a_new_store_directory_survives_a_power_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a store in a directory that does not exist creates it: its name must be durable
    in its parent before a flush acknowledges anything, or a power cut takes the whole store
    with every flushed (SYNC_FLUSH-acknowledged) message."""
    clock = ManualClock()
    record = tmp_path / "record"
    install(record / "log", record / "snapshots", monkeypatch.setattr)
    cfg: StoreConfig = small_store_config(tmp_path / "brokers" / "store")
    store = MessageStore(cfg, clock_ms=clock).open()
    _put(store, clock, "TopicA", [b"a0"])
    store.flush_commitlog()
    _power_cut(store, record, None)
    with MessageStore(cfg, clock_ms=clock) as recovered:
        assert _bodies(recovered, "TopicA") == [b"a0"]


@pytest.mark.parametrize("seed", range(6))
def test_files_named_by_another_files_flush_come_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """With ASYNC_FLUSH the log can run several files ahead of the flush. The first flush of
    the oldest new file syncs the directory, which makes every name in it durable, those of the
    files after it too; their allocations must be durable by then, or a power cut leaves an
    empty or short file in the middle of the log, and the store refuses to open (a file of the
    wrong size that is not the last). Every flushed message must come back."""
    clock = ManualClock()
    cfg = small_store_config(tmp_path / "store")
    record = tmp_path / "record"
    install(record / "log", record / "snapshots", monkeypatch.setattr)
    store = MessageStore(cfg, clock_ms=clock).open()
    bodies = [f"{i:04d}".encode() + bytes(8000) for i in range(24)]  # three 64 KiB files
    _put(store, clock, "TopicA", bodies)
    files = store.commitlog.queue.files
    assert len(files) == 3
    flushed = files[0].flush()  # the flush thread's first step; the cut comes before the next
    _power_cut(store, record, None, seed)
    with MessageStore(cfg, clock_ms=clock) as recovered:
        got = _bodies(recovered, "TopicA")
        assert got == bodies[: len(got)]
        kept = recovered.commitlog.max_offset
        assert kept >= flushed


def test_a_json_file_in_a_new_directory_survives_a_power_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``write_json_atomic`` (consumerOffset.json, topics.json, ... under ``<root>/config/``)
    syncs the file and its directory; when it has to create that directory, the directory's
    own name must be durable too, or a power cut takes the file it reported written."""
    root = tmp_path / "store"
    root.mkdir()  # before the recording starts: durable; only config/ is new
    record = tmp_path / "record"
    install(record / "log", record / "snapshots", monkeypatch.setattr)
    path = root / "config" / "consumerOffset.json"
    write_json_atomic(path, {"offsetTable": {"TopicA@g": {"0": 7}}})
    power_loss(root, None, record / "log", record / "snapshots", 0, writeback=False)
    assert load_json(path) == {"offsetTable": {"TopicA@g": {"0": 7}}}
