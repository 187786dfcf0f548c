"""The checkpoint's RocketMQ timestamps survive restarts that flush nothing new.

RocketMQ writes ``indexMsgTimestamp`` only when an index file that filled up has been flushed
(``IndexService#flush``: ``if (indexMsgTimestamp > 0)``), and ``physicMsgTimestamp`` /
``logicsMsgTimestamp`` only when there is a newer one. A store reopened after a clean close
(or after recovery) must not overwrite them with 0 at its first flush: the checkpoint would
claim the index was never flushed, and a reopen of a store nobody wrote to would not leave
its files as they were (the reliability plan's R4).
"""

from __future__ import annotations

import struct
from pathlib import Path

from store import MessageStore, PutStatus
from store.invariants import check_store
from tests.conftest import ManualClock, drain_dispatch, make_msg, tiny_store_config
from tests.store.test_recovery import Workload, crash_copy

TIMESTAMPS = struct.Struct(">qqq")
"""physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp: the checkpoint's first longs."""


def checkpoint_timestamps(root: Path) -> tuple[int, int, int]:
    """The three timestamps as the checkpoint file on disk holds them."""
    data = (root / "checkpoint").read_bytes()
    return TIMESTAMPS.unpack_from(data, 0)  # type: ignore[return-value]


def fill_index_files(store: MessageStore, clock: ManualClock, count: int) -> None:
    """Put ``count`` keyed messages (16-entry index files: several fill up) and dispatch."""
    for i in range(count):
        clock.advance(1)
        msg = make_msg("TopicA", f"m{i}".encode(), keys=f"key-{i}")
        assert store.put_messages([msg]).status is PutStatus.PUT_OK
    drain_dispatch(store)


def test_reopening_keeps_the_index_msg_timestamp(tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = tiny_store_config(tmp_path / "store")
    with MessageStore(cfg, clock_ms=clock) as store:
        fill_index_files(store, clock, 40)
        assert len(store.index.files) > 1  # a full file was flushed at close
    written = checkpoint_timestamps(cfg.store_path_root_dir)
    assert all(written), written
    for _ in range(2):  # clean reopens that write nothing: flush_logics runs at each close
        with MessageStore(cfg, clock_ms=clock) as store:
            store.flush_logics()
        assert checkpoint_timestamps(cfg.store_path_root_dir) == written


def store_files(root: Path) -> dict[str, bytes]:
    """Every file under the store root but the lock, by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def test_a_clean_restart_after_recovery_leaves_every_file_as_it_was(tmp_path: Path) -> None:
    """The plan's R4: after a crash, recovery and a clean close, a restart that writes nothing
    changes no byte of any file."""
    clock = ManualClock()
    work = Workload(clock)
    live = MessageStore(tiny_store_config(tmp_path / "live"), clock_ms=clock).open()
    try:
        work.put(live, 120)
        live.flush_logics()
        work.put(live, 40)  # past the checkpoint: recovery re-dispatches these
        cfg = crash_copy(live, tmp_path / "crashed")
    finally:
        live.close()
    with MessageStore(cfg, clock_ms=clock) as recovered:
        assert not recovered.last_exit_ok
        assert check_store(recovered) == []
    after_recovery = store_files(cfg.store_path_root_dir)
    with MessageStore(cfg, clock_ms=clock) as reopened:
        assert reopened.last_exit_ok
    assert store_files(cfg.store_path_root_dir) == after_recovery
