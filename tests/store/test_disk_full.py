"""A real full disk: a child process under a low RLIMIT_FSIZE cannot allocate the next file.

The child (this module run as ``python -m tests.store.test_disk_full MODE STORE_DIR`` from the
repository root) lowers its file-size limit with ``resource.setrlimit`` and ignores SIGXFSZ, so
``posix_fallocate`` of a file larger than the limit fails with EFBIG, exactly where a full disk
fails with ENOSPC. It reports what it observed as JSON lines on stdout; the test asserts on them
and on the exit status (a SIGBUS or an uncaught exception would show there).

Modes:
- ``commitlog``: the next commitlog file cannot be created. Puts answer
  CREATE_MAPPED_FILE_FAILED (no exception), reads and queries keep working, nothing half-made is
  left; after the limit is raised puts succeed again, the store is consistent and reopens clean.
- ``consume-queue``: a consume-queue file cannot be created during dispatch. ``dispatch_pending``
  raises MappedFileCreateError and keeps the batch pending; once space is back, dispatch
  completes with every message exactly once.
- ``index`` / ``index-crash``: the next index file cannot be created while a record's keys are
  half in the full one; once space is back (or after a SIGKILL and recovery) every key is found.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from common.record import MessageRecord, decode_records
from store import GetStatus, MappedFileCreateError, MessageStore, PutStatus, StoreConfig
from store.invariants import check_store

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMITLOG_SIZE = 64 * 1024
CHILD_TIMEOUT_S = 60


# -- the child ---------------------------------------------------------------------------------
def _emit(step: str, **facts: Any) -> None:
    os.write(1, (json.dumps({"step": step, **facts}) + "\n").encode())


def _limit_file_size(limit: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))


def _message(i: int, topic: str = "FullTopic", queue_id: int | None = None) -> MessageRecord:
    return MessageRecord(
        topic,
        (b"payload-%06d|" % i) * 20,
        queue_id=i % 3 if queue_id is None else queue_id,
        properties={"TAGS": f"T{i % 2}", "KEYS": f"full-{i}", "UNIQ_KEY": f"FULL{i:06d}"},
    )


def _queue_contents(store: MessageStore) -> dict[str, list[str]]:
    """Every readable record as ``"topic/queue" -> [UNIQ_KEY in queue-offset order]``."""
    out: dict[str, list[str]] = {}
    for (topic, qid), cq in sorted(store.cq_table.items()):
        keys: list[str] = []
        offset = cq.min_offset
        while offset < cq.max_offset:
            got = store.get_messages(topic, qid, offset, 32)
            if got.status is not GetStatus.FOUND:
                keys.append(f"<{got.status.name} at {offset}>")
                break
            keys.extend(r.uniq_key or "?" for r in decode_records(b"".join(got.records)))
            offset = got.next_begin_offset
        out[f"{topic}/{qid}"] = keys
    return out


def _drain(store: MessageStore) -> None:
    while store.dispatch_pending():
        pass


def _child_commitlog(config: StoreConfig) -> None:
    store = MessageStore(config).open()
    acked: list[str] = []
    i = 0
    while store.commitlog.max_offset < COMMITLOG_SIZE * 3 // 4:
        result = store.put_message(_message(i))
        assert result.status is PutStatus.PUT_OK
        acked.append(f"FULL{i:06d}")
        i += 1
    _drain(store)
    _limit_file_size(COMMITLOG_SIZE // 2)  # smaller than a commitlog file, larger than the rest
    statuses: list[str] = []
    remark = ""
    for _ in range(400):
        result = store.put_message(_message(i))
        statuses.append(result.status.name)
        if result.status is PutStatus.PUT_OK:
            acked.append(f"FULL{i:06d}")
            i += 1
        else:
            remark = result.remark
            break
    for _ in range(3):
        statuses.append(store.put_messages([_message(10_000), _message(10_001)]).status.name)
    _drain(store)
    names = sorted(p.name for p in config.commitlog_dir.iterdir())
    sizes = sorted({p.stat().st_size for p in config.commitlog_dir.iterdir()})
    hits = store.query_messages("FullTopic", "full-3", 8, 0, 2**62).records
    _emit(
        "full",
        statuses=statuses,
        remark=remark,
        acked=acked,
        files=names,
        sizes=sizes,
        contents=_queue_contents(store),
        query_hits=len(hits),
        problems=check_store(store),
    )
    _limit_file_size(resource.RLIM_INFINITY)
    after: list[str] = []
    for _ in range(20):
        result = store.put_message(_message(i))
        after.append(result.status.name)
        if result.status is PutStatus.PUT_OK:
            acked.append(f"FULL{i:06d}")
            i += 1
    _drain(store)
    _emit(
        "space back",
        statuses=after,
        acked=acked,
        files=len(store.commitlog.queue.files),
        contents=_queue_contents(store),
        problems=check_store(store),
    )
    store.close()
    with MessageStore(config) as reopened:
        _emit("reopened", contents=_queue_contents(reopened), problems=check_store(reopened))


def _child_consume_queue(config: StoreConfig) -> None:
    store = MessageStore(config).open()
    for i in range(5):
        assert store.put_message(_message(i, "OldQueue", 0)).status is PutStatus.PUT_OK
    _drain(store)
    _limit_file_size(10_000)  # below a consume-queue file (12,000), above an index file (8,440)
    statuses = []
    for i in range(5, 45):
        topic, qid = ("OldQueue", 0) if i % 2 else ("NewQueue", i % 2)
        statuses.append(store.put_message(_message(i, topic, qid)).status.name)
    behind = store.dispatch_behind
    errors = []
    for _ in range(3):
        try:
            store.dispatch_pending()
            errors.append("")
        except MappedFileCreateError as exc:
            errors.append(f"{type(exc).__name__}: errno {exc.errno}")
    refused = store.put_message(_message(99, "OldQueue", 0))
    _emit(
        "stalled",
        statuses=statuses,
        behind_before=behind,
        behind_after=store.dispatch_behind,
        errors=errors,
        contents=_queue_contents(store),
        new_queue=store.get_messages("NewQueue", 0, 0, 8).status.name,
        put=[refused.status.name, refused.remark],
    )
    _limit_file_size(resource.RLIM_INFINITY)
    _drain(store)
    _emit(
        "space back",
        behind=store.dispatch_behind,
        contents=_queue_contents(store),
        problems=check_store(store),
        refusal=store.write_refusal,
    )
    store.close()
    with MessageStore(config) as reopened:
        _emit("reopened", contents=_queue_contents(reopened), problems=check_store(reopened))


def _child_index(config: StoreConfig, *, crash: bool) -> None:
    """Fill the index file to one free entry, then a 2-key record cannot get its second key."""
    store = MessageStore(config).open()
    for i in range(199):  # 2 keys each: 398 of the 399 entries of an index file
        assert store.put_message(_message(i)).status is PutStatus.PUT_OK
    _drain(store)
    _limit_file_size(4_000)  # below an index file (8,440), above a consume-queue file (1,000)
    for i in (199, 200):
        assert store.put_message(_message(i)).status is PutStatus.PUT_OK
    try:
        store.dispatch_pending()
        error = ""
    except MappedFileCreateError as exc:
        error = type(exc).__name__
    _emit(
        "stalled",
        error=error,
        index_files=len(store.index.files),
        entries=store.index.files[0].index_count,
        behind=store.dispatch_behind,
    )
    if crash:
        os.kill(os.getpid(), signal.SIGKILL)
    _limit_file_size(resource.RLIM_INFINITY)
    _drain(store)
    _emit("space back", problems=check_store(store))
    store.close()
    with MessageStore(config) as reopened:
        _emit("reopened", problems=check_store(reopened))


def child_config(root: Path, mode: str) -> StoreConfig:
    """Small files. In ``consume-queue`` mode a consume-queue file is the largest file made."""
    cq_units = 600 if mode == "consume-queue" else 50
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=COMMITLOG_SIZE,
        mapped_file_size_consume_queue=20 * cq_units,
        max_hash_slot_num=100,
        max_index_num=400,  # 8,440-byte index files
    )


def child_main(mode: str, root: str) -> None:
    """Run one child scenario (SIGXFSZ ignored, so EFBIG comes back as an error)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    config = child_config(Path(root), mode)
    if mode == "commitlog":
        _child_commitlog(config)
    elif mode == "consume-queue":
        _child_consume_queue(config)
    else:
        _child_index(config, crash=mode == "index-crash")
    _emit("done")


# -- the tests ---------------------------------------------------------------------------------
def run_child(mode: str, root: Path, *, exit_code: int = 0) -> dict[str, dict[str, Any]]:
    """Run the child to completion; return its reports by step."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.store.test_disk_full", mode, str(root)],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == exit_code, (
        f"child exited {proc.returncode}:\n{proc.stderr.decode()[-3000:]}"
    )
    steps = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    if exit_code == 0:
        assert steps[-1] == {"step": "done"}
    return {s.pop("step"): s for s in steps}


def by_queue(keys: list[str]) -> dict[str, list[str]]:
    """The expected queue contents of ``_message`` keys put without an explicit queue."""
    out: dict[str, list[str]] = {}
    for key in keys:
        i = int(key[4:])
        out.setdefault(f"FullTopic/{i % 3}", []).append(key)
    return out


def test_commitlog_file_that_cannot_be_allocated(tmp_path: Path) -> None:
    report = run_child("commitlog", tmp_path / "store")
    full = report["full"]
    # puts went on until the roll, then failed with a clear status, and kept failing
    *ok, failed = full["statuses"][:-3]
    assert ok
    assert set(ok) == {"PUT_OK"}
    assert failed == "CREATE_MAPPED_FILE_FAILED"
    assert full["statuses"][-3:] == ["CREATE_MAPPED_FILE_FAILED"] * 3
    assert "File too large" in full["remark"] or "EFBIG" in full["remark"]
    # nothing half-made: one full-size file, no temporary file
    assert full["files"] == [f"{0:020d}"]
    assert full["sizes"] == [COMMITLOG_SIZE]
    # everything acknowledged reads back, queries work, the store is consistent
    assert full["contents"] == by_queue(full["acked"])
    assert full["query_hits"] == 1
    assert full["problems"] == []
    back = report["space back"]
    assert set(back["statuses"]) == {"PUT_OK"}
    assert back["files"] == 2
    assert back["contents"] == by_queue(back["acked"])
    assert back["problems"] == []
    assert report["reopened"] == {"contents": back["contents"], "problems": []}


def test_consume_queue_file_that_cannot_be_created(tmp_path: Path) -> None:
    report = run_child("consume-queue", tmp_path / "store")
    stalled = report["stalled"]
    assert set(stalled["statuses"]) == {"PUT_OK"}  # the commitlog file had room
    assert stalled["behind_before"] == 40
    assert stalled["behind_after"] == 40  # the batch stayed pending
    assert all(e.startswith("MappedFileCreateError") for e in stalled["errors"]), stalled
    assert stalled["new_queue"] in ("NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE")
    # while messages cannot reach their queues, sends are refused instead of acknowledged
    # into a store nobody can read from (RocketMQ's makeLogicsQueueError)
    status, remark = stalled["put"]
    assert status == "SERVICE_NOT_AVAILABLE"
    assert "consume queue or index files cannot be created (EFBIG" in remark
    assert str(tmp_path) not in remark  # paths go to the broker's log
    assert "consumequeue" not in remark
    old = [f"FULL{i:06d}" for i in range(5)] + [f"FULL{i:06d}" for i in range(5, 45) if i % 2]
    new = [f"FULL{i:06d}" for i in range(5, 45) if not i % 2]
    # a queue whose file existed may already show part of the stalled batch: only a prefix
    seen = stalled["contents"]["OldQueue/0"]
    assert seen == old[: len(seen)]
    assert len(seen) >= 5
    back = report["space back"]
    assert back["behind"] == 0
    assert back["problems"] == []
    assert back["refusal"] is None  # writes resume by themselves
    assert back["contents"] == {"NewQueue/0": new, "OldQueue/0": old}
    assert report["reopened"] == {"contents": back["contents"], "problems": []}


def test_index_file_that_cannot_be_created(tmp_path: Path) -> None:
    report = run_child("index", tmp_path / "store")
    assert report["stalled"] == {
        "error": "MappedFileCreateError",
        "index_files": 1,
        "entries": 400,  # full: the second key of record 199 did not fit
        "behind": 2,
    }
    assert report["space back"] == {"problems": []}
    assert report["reopened"] == {"problems": []}


def test_crash_while_the_next_index_file_cannot_be_created(tmp_path: Path) -> None:
    root = tmp_path / "store"
    report = run_child("index-crash", root, exit_code=-signal.SIGKILL)
    assert report["stalled"]["entries"] == 400
    with MessageStore(child_config(root, "index-crash")) as store:
        assert check_store(store) == []
        for i in (199, 200):
            assert len(store.query_messages("FullTopic", f"full-{i}", 8, 0, 2**62).records) == 1
            assert len(store.query_messages("FullTopic", f"FULL{i:06d}", 8, 0, 2**62).records) == 1


if __name__ == "__main__":
    child_main(sys.argv[1], sys.argv[2])
