"""Crash safety: SIGKILL a SYNC_FLUSH producer process at seeded random points, then recover
(and the same with ASYNC_FLUSH: a process kill keeps the page cache, so nothing acked is lost).

The child (``tests/store/crash_child.py``) puts messages forever and reports each acknowledged
one on stdout. Each round the test waits for a seeded random number of acknowledgements (read
with a deadline), SIGKILLs the child, reads what the pipe still holds, and opens the store:
``check_store`` must be clean; every acknowledged message must be at its queue offset with
identical body, flag, tags, keys and properties; every record in the store must be one the
child generated (nothing garbled, nothing twice). The same store goes through several rounds:
rounds 0, 2, 4 check a copy, so the next child recovers the raw crash state itself; the others
check in place (the test's own recovery, then a clean close) and the next child continues.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from common.record import decode_records
from store import GetStatus, MessageStore
from store.config import FlushDiskType
from store.invariants import check_store
from tests.store.crash_child import child_config, message_for, uniq_key

REPO_ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 5
ACK_DEADLINE_S = 30.0
SEED = int(os.environ.get("CRASH_SEED", "20240611"))


class Child:
    """One crash_child process and the acknowledgements read from its stdout."""

    def __init__(
        self, store_dir: Path, round_no: int, log_dir: Path, extra: Sequence[str] = ()
    ) -> None:
        self.stderr_path = log_dir / f"child-{round_no}.stderr"
        argv = ["-m", "tests.store.crash_child", str(store_dir), str(round_no), *extra]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        self.buffer = b""
        self.ready = False
        self.acks: list[dict[str, int | str]] = []

    def _take_lines(self) -> None:
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line == b"READY":
                self.ready = True
            elif line:
                self.acks.append(json.loads(line))

    def wait_ready(self, deadline_s: float = ACK_DEADLINE_S) -> None:
        """Read stdout until the child said READY (its store is open and recovered)."""
        self._read(lambda: self.ready, "READY", deadline_s)

    def read_until(self, acks: int, deadline_s: float = ACK_DEADLINE_S) -> None:
        """Read stdout until ``acks`` acknowledgements arrived; fail after the deadline."""
        self._read(lambda: len(self.acks) >= acks, f"{acks} acks", deadline_s)

    def wait_for(
        self, done: Callable[[], bool], what: str, deadline_s: float = ACK_DEADLINE_S
    ) -> None:
        """Keep reading acknowledgements (so the child never blocks on a full pipe) until
        ``done()``; fail after the deadline."""
        self._read(done, what, deadline_s)

    def _read(self, done: Callable[[], bool], what: str, deadline_s: float) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + deadline_s
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {what} in {deadline_s}s ({len(self.acks)} acks){self.tail()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    pytest.fail(f"child exited ({self.proc.wait()}) early{self.tail()}")
                self.buffer += chunk
                self._take_lines()

    def kill(self) -> int:
        """SIGKILL the child, wait for it, and read every complete line it had written."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        code = self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read(1 << 16):
            self.buffer += chunk
        self._take_lines()  # an incomplete last line is an ack we cannot check: dropped
        self.proc.stdout.close()
        return code

    def tail(self) -> str:
        """The end of the child's stderr, for failure messages."""
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return f"\nchild stderr:\n{text[-3000:]}"


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Children started by a test; each is killed and waited for at teardown."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.proc.pid, signal.SIGKILL)
                child.proc.wait(timeout=30)
            if child.proc.stdout is not None:
                child.proc.stdout.close()


def read_store(store: MessageStore) -> dict[tuple[str, int], dict[int, object]]:
    """Every readable record of every queue: (topic, queue) -> queue offset -> record."""
    out: dict[tuple[str, int], dict[int, object]] = {}
    for (topic, qid), cq in sorted(store.cq_table.items()):
        recs: dict[int, object] = {}
        offset = cq.min_offset
        while offset < cq.max_offset:
            got = store.get_messages(topic, qid, offset, 32)
            assert got.status is GetStatus.FOUND, (topic, qid, offset, got.status)
            decoded = decode_records(b"".join(got.records), check_crc=True)
            recs.update(zip(got.queue_offsets, decoded, strict=True))
            offset = got.next_begin_offset
        out[(topic, qid)] = recs
    return out


def verify(store: MessageStore, acked: list[dict[str, int | str]]) -> int:
    """Check the invariant, the acknowledged messages and every stored record; return a count."""
    assert check_store(store) == []
    contents = read_store(store)
    seen: set[str] = set()
    for (topic, qid), recs in contents.items():
        for qoff, rec in recs.items():
            key = rec.uniq_key
            assert key is not None, (topic, qid, qoff)
            assert key not in seen, f"{key} stored twice"
            seen.add(key)
            want = message_for(key)
            assert (rec.topic, rec.queue_id, rec.queue_offset) == (topic, want.queue_id, qoff)
            assert rec.topic == want.topic
            assert rec.body == want.body, key
            assert rec.flag == want.flag
            assert rec.properties == want.properties, key
            assert rec.born_timestamp == want.born_timestamp
    for ack in acked:
        key = uniq_key(int(ack["r"]), int(ack["k"]), int(ack["j"]))
        rec = contents.get((str(ack["t"]), int(ack["q"])), {}).get(int(ack["o"]))
        assert rec is not None, f"acknowledged {key} lost (ack {ack})"
        assert rec.uniq_key == key, f"ack {ack} but {rec.uniq_key} is there"
        assert rec.physical_offset == ack["p"]
        want = message_for(key)
        assert (rec.tags, rec.keys) == (want.tags, want.keys)
    return len(seen)


@pytest.mark.parametrize(
    "flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH], ids=["sync", "async"]
)
def test_sigkill_rounds_lose_no_acknowledged_message(
    tmp_path: Path, children: list[Child], flush: FlushDiskType
) -> None:
    """With ASYNC_FLUSH too (the plan's R1-ASYNC): a process kill leaves the page cache, so
    every acknowledged message survives even if nothing was flushed."""
    rng = random.Random(SEED)
    store_dir = tmp_path / "store"
    extra = ["async"] if flush is FlushDiskType.ASYNC_FLUSH else []
    acked: list[dict[str, int | str]] = []
    stored_counts: list[int] = []
    for round_no in range(ROUNDS):
        child = Child(store_dir, round_no, tmp_path, extra)
        children.append(child)
        wanted = rng.randint(30, 400)
        child.wait_ready()
        child.read_until(wanted)
        code = child.kill()
        assert code == -signal.SIGKILL, f"child ended with {code}{child.tail()}"
        assert len(child.acks) >= wanted
        acked.extend(child.acks)
        if round_no % 2 == 0:
            copy = tmp_path / f"copy-{round_no}"
            shutil.copytree(store_dir, copy)
            with MessageStore(child_config(copy, flush)) as store:
                assert not store.last_exit_ok
                stored_counts.append(verify(store, acked))
            shutil.rmtree(copy)
        else:
            with MessageStore(child_config(store_dir, flush)) as store:
                assert not store.last_exit_ok
                stored_counts.append(verify(store, acked))
    # the final state, recovered by the test, reopened cleanly once more
    with MessageStore(child_config(store_dir, flush)) as store:
        verify(store, acked)
    assert len({(a["r"], a["k"], a["j"]) for a in acked}) == len(acked)
    assert stored_counts == sorted(stored_counts)  # nothing acknowledged ever disappears
    assert stored_counts[-1] >= len(acked)


def test_kill_during_startup_and_recovery(tmp_path: Path, children: list[Child]) -> None:
    """Kill children before they are ready (inside imports, open or recovery), then recover."""
    store_dir = tmp_path / "store"
    first = Child(store_dir, 0, tmp_path)
    children.append(first)
    first.read_until(200)
    first.kill()
    acked = list(first.acks)
    for round_no in (1, 2):
        child = Child(store_dir, round_no, tmp_path)
        children.append(child)
        child.kill()  # wherever it got to
        acked.extend(child.acks)
    child = Child(store_dir, 3, tmp_path)
    children.append(child)
    child.read_until(50)
    child.kill()
    acked.extend(child.acks)
    with MessageStore(child_config(store_dir)) as store:
        assert verify(store, acked) >= len(acked)
