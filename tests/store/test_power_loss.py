"""Simulated power failures: what the store flushed must survive, whatever it did not.

A SIGKILL (``test_crash.py``) leaves the page cache intact, so it cannot tell a store that
flushes before acknowledging from one that does not. Here the crash child runs with
:mod:`tests.store.flush_recorder`, which logs every completed flush and directory sync; after
the SIGKILL :func:`~tests.store.flush_recorder.power_loss` rewrites the files as a power
failure would have left them (unflushed bytes back to what the disk held before, some of them
saved by write-back; files whose name was never synced gone; files written in place as last
synced). Then recovery must give back every acknowledged message with SYNC_FLUSH, and every
message whose record was flushed with ASYNC_FLUSH, with the invariants of ``check_store``.
"""

from __future__ import annotations

import random
import shutil
import signal
import struct
from pathlib import Path

import pytest

from common.record import decode_record, encode_properties, record_length
from store import MessageStore, PutStatus
from store.checkpoint import PAGE
from store.config import FlushDiskType
from store.invariants import check_store
from tests.conftest import ManualClock, drain_dispatch, make_msg, small_store_config
from tests.store.crash_child import child_config, message_for, uniq_key
from tests.store.flush_recorder import Durable, abandon, install, power_loss
from tests.store.test_crash import SEED, Child, children, read_store, verify
from tests.store.test_recovery import (
    TOPICS,
    Workload,
    commitlog_file,
    crash_copy,
    overwrite,
    verify_contents,
)

__all__ = ["children"]  # the fixture, imported for the tests below

ROUNDS = 4


def _snapshot(store_dir: Path, dest: Path) -> Path | None:
    """Copy the store as it is on disk now (the next child's starting point)."""
    if dest.exists():
        shutil.rmtree(dest)
    if not store_dir.exists():
        return None
    shutil.copytree(store_dir, dest)
    return dest


def _run_round(
    tmp_path: Path, children: list[Child], round_no: int, wanted: int, mode: list[str]
) -> tuple[Child, Path]:
    store_dir = tmp_path / "store"
    record = tmp_path / f"record-{round_no}"
    child = Child(store_dir, round_no, tmp_path, [str(record), *mode])
    children.append(child)
    child.wait_ready()
    child.read_until(wanted)
    if mode == ["async"]:  # go on until a timed flush completed, then a little further
        child.wait_for(lambda: _commitlog_flushes(record) > 0, "a commitlog flush")
        child.read_until(len(child.acks) + wanted // 4)
    code = child.kill()
    assert code == -signal.SIGKILL, f"child ended with {code}{child.tail()}"
    return child, record


def test_power_loss_rounds_lose_no_acknowledged_sync_flush_message(
    tmp_path: Path, children: list[Child]
) -> None:
    rng = random.Random(SEED)
    store_dir = tmp_path / "store"
    acked: list[dict[str, int | str]] = []
    reverted = 0
    for round_no in range(ROUNDS):
        baseline = _snapshot(store_dir, tmp_path / "baseline")
        child, record = _run_round(tmp_path, children, round_no, rng.randint(40, 300), [])
        acked.extend(child.acks)
        seed = rng.randrange(1 << 30)
        report = power_loss(
            store_dir, baseline, record / "log", record / "snapshots", seed, index_writeback=True
        )
        reverted += report.reverted_pages
        target = store_dir
        if round_no % 2 == 0:  # check a copy: the next child recovers the raw state itself
            target = tmp_path / "copy"
            shutil.copytree(store_dir, target)
        with MessageStore(child_config(target)) as store:
            assert not store.last_exit_ok
            verify(store, acked)
        if target != store_dir:
            shutil.rmtree(target)
    assert reverted > 0  # the power failures did take unflushed bytes away
    with MessageStore(child_config(store_dir)) as store:
        assert verify(store, acked) >= len(acked)


def test_what_recovery_cuts_stays_cut_after_a_power_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery cuts consume-queue units whose records the commitlog lost, and moves the
    index's newest offset back. Unless what it did is durable before new records are written,
    a power cut can bring the old state back behind new records: units pointing at records
    that are gone, an index claiming new records it does not hold."""
    clock = ManualClock()
    store = MessageStore(small_store_config(tmp_path / "live"), clock_ms=clock).open()
    work = Workload(clock)
    try:
        work.put(store, 400, topics=(TOPICS[0],), batch_max=1)
        store.flush_logics()
        cfg = crash_copy(store, tmp_path / "copy")
    finally:
        store.close()
    lost_from = work.stored[250].phys  # the commitlog lost these records, the queues did not
    path, pos = commitlog_file(cfg, lost_from)
    overwrite(path, pos, bytes(path.stat().st_size - pos))
    for later in sorted(cfg.commitlog_dir.iterdir()):
        if later.name > path.name:
            later.unlink()
    baseline = _snapshot(cfg.store_path_root_dir, tmp_path / "baseline")
    record = tmp_path / "record"
    install(record / "log", record / "snapshots", monkeypatch.setattr)
    recovered = MessageStore(cfg, clock_ms=clock).open()
    after_recovery = _store_files(cfg.store_path_root_dir)
    work.stored = work.survivors(lost_from)
    work.put(recovered, 60, topics=(TOPICS[0],), batch_max=1)  # over the cut, dispatched
    recovered.flush_commitlog()  # the new records are durable; their units and keys are not
    abandon(recovered)
    power_loss(cfg.store_path_root_dir, baseline, record / "log", record / "snapshots", 0,
               writeback=False)  # fmt: skip
    for name, data in _store_files(cfg.store_path_root_dir).items():
        if not name.startswith("commitlog"):  # the rest is as recovery left it
            assert data == after_recovery[name], name
    with MessageStore(cfg, clock_ms=clock) as again:
        assert check_store(again) == []
        verify_contents(again, work.stored)


def _store_files(root: Path) -> dict[str, bytes]:
    """The bytes of every commitlog, consume-queue and index file and of the checkpoint."""
    files = [
        *(root / "commitlog").iterdir(),
        *(root / "consumequeue").glob("*/*/*"),
        *(root / "index").iterdir(),
        root / "checkpoint",
    ]
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(files)}


def test_power_loss_with_async_flush_keeps_every_flushed_message(
    tmp_path: Path, children: list[Child]
) -> None:
    """ASYNC_FLUSH acknowledges before flushing, so a power failure may take acknowledged
    messages; never one whose record the last completed flush covered, and never a damaged
    or invented one."""
    rng = random.Random(SEED + 1)
    store_dir = tmp_path / "store"
    survivors_required = 0
    for round_no in range(2):
        baseline = _snapshot(store_dir, tmp_path / "baseline")
        child, record = _run_round(tmp_path, children, round_no, rng.randint(300, 600), ["async"])
        durable = Durable.read(record / "log")
        flushed = [a for a in child.acks if _record_flushed(store_dir, durable, a)]
        survivors_required += len(flushed)
        seed = rng.randrange(1 << 30)
        report = power_loss(
            store_dir, baseline, record / "log", record / "snapshots", seed, index_writeback=True
        )
        before = describe_store(store_dir, durable)  # as recovery will find it
        with MessageStore(child_config(store_dir, FlushDiskType.ASYNC_FLUSH)) as store:
            assert not store.last_exit_ok
            problems = check_store(store)
            assert problems == [], (
                f"round {round_no}, {len(child.acks)} acks, deleted {report.deleted}, "
                f"recovery started from:\n{before}"
            )
            verify(store, flushed)  # every stored record intact and generated; these present
            contents = read_store(store)
            assert sum(len(q) for q in contents.values()) >= len(flushed)
    assert survivors_required > 0  # the 200 ms flush interval did complete flushes


def describe_store(store_dir: Path, durable: Durable) -> str:
    """The files recovery will find: each commitlog file's size of non-zero data and last
    flush, each consume-queue file's units (count, first and last commitlog offsets), and the
    checkpoint's fields."""
    lines = []
    for path in sorted((store_dir / "commitlog").iterdir()):
        data = path.read_bytes()
        lines.append(
            f"commitlog {path.name}: data to {len(data.rstrip(bytes(1)))}, "
            f"flushed {durable.flushed.get(path, 0)}"
        )
    for path in sorted((store_dir / "consumequeue").glob("*/*/*")):
        data = path.read_bytes()
        units = [struct.unpack_from(">qiq", data, i) for i in range(0, len(data), 20)]
        valid = [u for u in units if u[0] >= 0 and u[1] > 0]
        first_bad = next((i for i, u in enumerate(units) if not (u[0] >= 0 and u[1] > 0)), None)
        edges = f"{valid[0][0]}..{valid[-1][0]}" if valid else "-"
        lines.append(
            f"cq {path.relative_to(store_dir / 'consumequeue')}: {len(valid)} units {edges}, "
            f"first invalid at {first_bad}, flushed {durable.flushed.get(path, 0)}"
        )
    checkpoint = store_dir / "checkpoint"
    if checkpoint.exists():
        lines.append(f"checkpoint {struct.unpack_from('>7q', checkpoint.read_bytes())}")
    return "\n".join(lines)


def _commitlog_flushes(record: Path) -> int:
    """Completed commitlog flushes in the recorder's log so far."""
    return sum(1 for p in Durable.read(record / "log").flushed if p.parent.name == "commitlog")


def _record_flushed(store_dir: Path, durable: Durable, ack: dict[str, int | str]) -> bool:
    """True when the acknowledged record lies wholly below its commitlog file's last flush."""
    file_size = child_config(store_dir).mapped_file_size_commit_log
    phys = int(ack["p"])
    start = phys - phys % file_size
    msg = message_for(uniq_key(int(ack["r"]), int(ack["k"]), int(ack["j"])))
    size = record_length(
        len(msg.body), len(msg.topic.encode()), len(encode_properties(msg.properties))
    )
    path = store_dir / "commitlog" / f"{start:020d}"
    return phys - start + size <= durable.flushed.get(path, 0)


def test_index_pages_saved_ahead_of_the_entries_they_count(tmp_path: Path) -> None:
    """Write-back saved an index file's first page (header, slots) after the last flush, but
    not the page of entries written since: the header counts entries that are zeros and the
    slots point at them. Recovery cuts the file back to what the checkpoint vouches for and
    indexes the rest again: every key finds every message, newest first."""
    clock = ManualClock()
    cfg = small_store_config(tmp_path / "live", max_hash_slot_num=100, max_index_num=1000)
    store = MessageStore(cfg, clock_ms=clock).open()
    keys = [f"key-{i % 20}" for i in range(600)]

    def put(numbers: range) -> None:
        for i in numbers:
            clock.advance(1)
            msg = make_msg(TOPICS[0], f"m{i}".encode(), i % 2, keys=keys[i])
            assert store.put_messages([msg]).status is PutStatus.PUT_OK
        drain_dispatch(store)

    try:
        put(range(250))  # entries 1..250: the first two pages of the entries' region
        store.flush_logics()
        index_path = store.index.files[-1].path
        at_checkpoint = index_path.read_bytes()
        put(range(250, 600))
        store.flush_commitlog()  # every record is durable; the index past 250 is not
        copy = crash_copy(store, tmp_path / "copy")
    finally:
        store.close()
    lost = copy.index_dir / index_path.name
    current = lost.read_bytes()
    entries_at = 40 + 100 * 4
    first_new_page = (entries_at + 251 * 20) // PAGE + 1  # the first page of new entries only
    overwrite(lost, first_new_page * PAGE, at_checkpoint[first_new_page * PAGE :])
    assert lost.read_bytes()[:PAGE] == current[:PAGE]  # the header and slots as they were last
    with MessageStore(copy, clock_ms=clock) as recovered:
        assert check_store(recovered) == []
        for key in sorted(set(keys)):
            hits = recovered.query_messages(TOPICS[0], key, 64, 0, 2**63 - 1)
            want = [f"m{i}".encode() for i in reversed(range(600)) if keys[i] == key]
            assert [decode_record(r).body for r in hits.records] == want, key


def test_a_crash_before_the_first_checkpoint_trusts_no_index_file(tmp_path: Path) -> None:
    """A new store killed before its first consume-queue flush has a checkpoint of zeros, so
    nothing vouches for its index files: write-back may have saved their headers and slots
    without their entries. Recovery indexes the whole log again."""
    clock = ManualClock()
    cfg = small_store_config(tmp_path / "live", max_hash_slot_num=100, max_index_num=1000)
    store = MessageStore(cfg, clock_ms=clock).open()
    try:
        for i in range(300):
            clock.advance(1)
            msg = make_msg(TOPICS[0], f"m{i}".encode(), keys=f"key-{i % 20}")
            assert store.put_messages([msg]).status is PutStatus.PUT_OK
        drain_dispatch(store)
        store.flush_commitlog()  # the records are durable; the checkpoint was never written
        copy = crash_copy(store, tmp_path / "copy")
    finally:
        store.close()
    assert not any((copy.checkpoint_path).read_bytes())
    (index_file,) = copy.index_dir.iterdir()
    entries_at = 40 + 100 * 4
    data = bytearray(index_file.read_bytes())
    data[PAGE:] = bytes(len(data) - PAGE)  # only the first page (header, slots) was saved
    index_file.write_bytes(bytes(data))
    assert entries_at < PAGE
    with MessageStore(copy, clock_ms=clock) as recovered:
        assert check_store(recovered) == []
        for k in range(20):
            hits = recovered.query_messages(TOPICS[0], f"key-{k}", 64, 0, 2**63 - 1)
            want = [f"m{i}".encode() for i in reversed(range(300)) if i % 20 == k]
            assert [decode_record(r).body for r in hits.records] == want
