"""Files the store deletes stay deleted across a power cut.

An unlink (or a rmdir) changes only the directory that held the name, and is durable only once
that directory is synced: before that a power cut can bring the file back. A commitlog file
retention deleted would then come back with the records of a deleted topic whose entry
(``deletedTopics.json``, synced) is already gone, and a consume-queue file recovery cut would
come back behind units written since. So every deletion in the store is followed by a sync of
its directory: one per batch (a retention pass, a topic's queues), off the put path.

The tests run the store in a child process under ``strace`` and read the system calls it
made: every store file unlinked, and every store directory removed, must be followed by an
``fsync`` of the directory that held it, or by the removal (itself durable) of that directory.
``strace`` only observes; nothing of the store is replaced. Skipped where it cannot trace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store import MessageStore, PutStatus
from tests.conftest import ManualClock, drain_dispatch, make_msg, tiny_store_config

pytestmark = pytest.mark.timeout(180)

STORE_DIRS = ("commitlog", "consumequeue", "index")
_CALL = re.compile(r"^\d+\s+(unlink|unlinkat|rmdir|fsync)\((.*)\)\s+=\s+0$")
_QUOTED = re.compile(r'"([^"]*)"')
_FD_PATH = re.compile(r"^\d+<(.*)>$")
HOUR_MS = 3600 * 1000


def _strace() -> str | None:
    """The ``strace`` binary if it can trace a child here, else None."""
    path = shutil.which("strace")
    if path is None:
        return None
    probe = subprocess.run(
        [path, "-qq", "-e", "trace=none", "true"], capture_output=True, timeout=60, check=False
    )
    return path if probe.returncode == 0 else None


def run_child(step: str, root: str) -> None:
    """The traced child's work on the store at ``root``: ``reopen`` (recovery, then close) or
    ``retention`` (a manual pass with every file expired, deleting topic B, then close)."""
    cfg = tiny_store_config(Path(root))
    cfg.delete_commit_log_files_interval = 0
    clock = ManualClock(int(time.time() * 1000) + 1000 * HOUR_MS)  # every file expired
    with MessageStore(cfg, clock_ms=clock, disk_usage=lambda _path: 0.1) as store:
        if step == "retention":
            assert store.clean_expired_files(manual=True) > 0
            assert store.delete_topic("DurB") == 2


def _traced(strace: str, step: str, root: Path, out: Path) -> list[tuple[str, Path]]:
    """Run :func:`run_child` under ``strace``; the deletions and directory syncs it made, in
    order, as ``("unlink" | "rmdir" | "fsync", path)``."""
    code = f"from {__name__} import run_child; run_child({step!r}, {str(root)!r})"
    cmd = [strace, "-f", "-y", "-qq", "-o", str(out)]
    cmd += ["-e", "trace=unlink,unlinkat,rmdir,fsync", sys.executable, "-c", code]
    repo = Path(__file__).resolve().parents[2]
    paths = [str(repo), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, timeout=150, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return _parse(out.read_text(), repo)


def _parse(trace: str, cwd: Path) -> list[tuple[str, Path]]:
    events: list[tuple[str, Path]] = []
    for line in trace.splitlines():
        m = _CALL.match(line.strip())
        if m is None:
            continue
        call, args = m.groups()
        if call == "fsync":
            fd = _FD_PATH.match(args)
            if fd is not None:
                events.append(("fsync", Path(fd.group(1))))
            continue
        quoted = _QUOTED.search(args)
        if quoted is None:
            continue
        kind = "rmdir" if call == "rmdir" or "AT_REMOVEDIR" in args else "unlink"
        events.append((kind, cwd / quoted.group(1)))
    return events


def _durable(events: list[tuple[str, Path]], index: int, path: Path) -> bool:
    """True when the deletion of ``path`` at ``events[index]`` is made durable later: its
    directory is synced, or removed (durably) itself."""
    for kind, other in events[index + 1 :]:
        if other == path.parent and kind == "fsync":
            return True
    for later, (kind, other) in enumerate(events[index + 1 :], start=index + 1):
        if other == path.parent and kind == "rmdir":
            return _durable(events, later, other)
    return False


def _undurable_deletions(events: list[tuple[str, Path]], root: Path) -> list[str]:
    """The store files and directories deleted without a directory sync after."""
    out = []
    for i, (kind, path) in enumerate(events):
        if kind == "fsync" or not path.is_relative_to(root):
            continue
        if path.relative_to(root).parts[0] in STORE_DIRS and not _durable(events, i, path):
            out.append(f"{kind} {path.relative_to(root)}")
    return out


def _fill(root: Path) -> None:
    """Topics DurA (2 queues) and DurB (2 queues), keyed, over several files of each kind."""
    clock = ManualClock(int(time.time() * 1000))
    with MessageStore(tiny_store_config(root), clock_ms=clock) as store:
        for i in range(300):
            clock.advance(1)
            msg = make_msg(("DurA", "DurB")[i % 2], b"d%05d" % i * 20, i // 2 % 2, keys=f"k{i}")
            assert store.put_message(msg).status is PutStatus.PUT_OK
        drain_dispatch(store)


def test_retention_recovery_and_topic_deletion_sync_what_they_delete(tmp_path: Path) -> None:
    """Every deletion is followed by a sync of its directory: retention's commitlog files (one
    sync for the pass), consume-queue and index files; a recovery's cut of consume-queue
    files; a deleted topic's queue files and directories."""
    strace = _strace()
    if strace is None:
        pytest.skip("strace cannot trace a child process here")
    root = tmp_path / "store"
    _fill(root)
    commitlog = sorted((root / "commitlog").iterdir())
    assert len(commitlog) >= 6
    commitlog[-1].unlink()  # lost with a disk: recovery cuts the queues pointing into it
    reopen = _traced(strace, "reopen", root, tmp_path / "reopen.trace")
    assert any(k == "unlink" and "consumequeue" in p.parts for k, p in reopen)
    assert _undurable_deletions(reopen, root) == []
    retention = _traced(strace, "retention", root, tmp_path / "retention.trace")
    deletions = [p for k, p in retention if k != "fsync" and p.is_relative_to(root)]
    deleted = {p.relative_to(root).parts[0] for p in deletions}
    assert {"commitlog", "consumequeue", "index"} <= deleted
    assert sum(k == "unlink" and p.parent == root / "commitlog" for k, p in retention) >= 2
    assert _undurable_deletions(retention, root) == []
    # one sync of the commitlog's directory for the whole pass, not one per file
    assert [p for k, p in retention if k == "fsync" and p == root / "commitlog"] == [
        root / "commitlog"
    ]
    assert not (root / "consumequeue" / "DurB").exists()
