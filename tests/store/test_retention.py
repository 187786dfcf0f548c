"""Retention with an injected clock and disk usage; file ages come from mtimes set with os.utime.

Rules under test (RocketMQ's CleanCommitLogService): expired commitlog files (mtime older than
``file_reserved_time`` hours) go at the ``delete_when`` hour, or at any hour when the disk is
fuller than ``disk_max_used_space_ratio``; past ``disk_space_clean_forcibly_ratio`` (or the
warning level) unexpired files go too, unless ``clean_file_forcibly_enable`` is off; the file
being written never goes; at most ``delete_file_batch_max`` per pass; consume-queue and index
files that only point below the new minimum follow. Past ``disk_space_warning_level_ratio``
puts are refused until usage drops.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from common.record import decode_record, decode_records
from store import GetStatus, MessageStore, PutStatus, StoreConfig
from store.invariants import check_store
from store.mapped_file import MappedFile
from store.retention import disk_usage_ratio, used_space_ratio
from store.services import StoreServices
from tests.conftest import (
    ManualClock,
    drain_dispatch,
    make_msg,
    small_store_config,
    tiny_store_config,
)
from tests.store.test_services import wait_until

HOUR_MS = 3600 * 1000
RESERVED_HOURS = 72


@dataclass
class Env:
    """An open store plus the knobs the test turns: the clock and the disk usage ratio."""

    store: MessageStore
    now: list[int]
    ratio: list[float]
    puts: list[tuple[str, int, int, int, str]]  # topic, queue, queue offset, phys, uniq key

    @property
    def files(self) -> list[MappedFile]:
        """The commitlog files, oldest first."""
        return self.store.commitlog.queue.files

    def age(self, count: int, *, hours: float = RESERVED_HOURS + 1) -> None:
        """Make the first ``count`` commitlog files ``hours`` old and the others 1 hour old."""
        for i, mf in enumerate(self.files):
            age_ms = hours * HOUR_MS if i < count else HOUR_MS
            stamp = (self.now[0] - age_ms) / 1000
            os.utime(mf.path, (stamp, stamp))

    def put(self, n: int) -> None:
        """Put ``n`` keyed messages over 2 topics x 2 queues and dispatch them."""
        for _ in range(n):
            i = len(self.puts)
            topic, qid = ("RetA", "RetB")[i % 2], (i // 2) % 2
            msg = make_msg(topic, b"r%06d-" % i * 40, qid, tags=f"t{i % 3}", keys=f"key{i}")
            msg.properties["UNIQ_KEY"] = f"RET{i:08d}"
            self.now[0] += 10
            result = self.store.put_message(msg)
            assert result.status is PutStatus.PUT_OK
            self.puts.append(
                (topic, qid, result.queue_offsets[0], result.phys_offsets[0], f"key{i}")
            )
        drain_dispatch(self.store)


EnvFactory = Callable[..., Env]


def steady_start_ms() -> int:
    """A start for the injected clock: 10 minutes into the current UTC hour, not the real now.

    The tests pick ``delete_when`` from the clock's local hour and then move the clock by
    seconds (10 ms a put); starting from the real time, a run just before the hour turned
    (seen in CI at 13:59) crossed into the next hour and flipped what the tests expect.
    At least 5 minutes remain before the local hour turns, in any time zone (offsets are
    whole hours, or 30 or 45 minutes off).
    """
    return int(time.time() * 1000) // HOUR_MS * HOUR_MS + 10 * 60 * 1000


def local_hour(ms: int) -> int:
    """The local hour of ``ms``, as retention computes it."""
    return time.localtime(ms / 1000).tm_hour


def make_config(
    root: Path, now_ms: int, *, at_delete_hour: bool, **overrides: object
) -> StoreConfig:
    """Small files; ``delete_when`` is the clock's current hour or the one after it."""
    hour = local_hour(now_ms) if at_delete_hour else (local_hour(now_ms) + 1) % 24
    settings: dict[str, object] = {
        "file_reserved_time": RESERVED_HOURS,
        "delete_when": f"{hour:02d}",
        "max_hash_slot_num": 50,
        "max_index_num": 200,
        "delete_commit_log_files_interval": 0,
    }
    settings.update(overrides)
    return small_store_config(root, **settings)


@pytest.fixture
def env_factory(tmp_path: Path) -> Iterator[EnvFactory]:
    """``env_factory(at_delete_hour=..., files=8, **config)`` -> an :class:`Env` with data."""
    opened: list[MessageStore] = []

    def make(*, at_delete_hour: bool = False, files: int = 8, **overrides: object) -> Env:
        now = [steady_start_ms()]
        ratio = [0.10]
        cfg = make_config(tmp_path / "store", now[0], at_delete_hour=at_delete_hour, **overrides)
        store = MessageStore(cfg, clock_ms=lambda: now[0], disk_usage=lambda _path: ratio[0])
        store.open()
        opened.append(store)
        env = Env(store, now, ratio, [])
        while len(env.files) < files:
            env.put(50)
        assert len(env.files) == files
        return env

    try:
        yield make
    finally:
        for s in opened:
            s.close()


def file_starts(env: Env) -> list[int]:
    """Start offsets of the commitlog files."""
    return [mf.file_from_offset for mf in env.files]


# -- when files go -----------------------------------------------------------------------------
def test_nothing_goes_outside_the_delete_hour_at_low_usage(env_factory: EnvFactory) -> None:
    env = env_factory(at_delete_hour=False)
    before = file_starts(env)
    env.age(len(env.files))
    assert env.store.clean_expired_files() == 0
    assert file_starts(env) == before


def test_expired_files_go_at_the_delete_hour(env_factory: EnvFactory) -> None:
    env = env_factory(at_delete_hour=True)
    before = file_starts(env)
    env.age(3)
    deleted = env.store.clean_expired_files()
    assert file_starts(env) == before[3:]
    assert deleted >= 3  # plus consume-queue and index files
    assert env.store.commitlog.min_offset == before[3]
    assert check_store(env.store) == []
    # a second pass finds nothing more to do: the rest is young
    assert env.store.clean_expired_files() == 0


def test_young_file_stops_the_pass(env_factory: EnvFactory) -> None:
    """Files are deleted oldest first; a young file in front protects older ones behind it."""
    env = env_factory(at_delete_hour=True)
    env.age(4)
    young = env.files[0]
    stamp = (env.now[0] - HOUR_MS) / 1000
    os.utime(young.path, (stamp, stamp))
    assert env.store.clean_expired_files() == 0


def test_manual_clean_ignores_the_hour(env_factory: EnvFactory) -> None:
    env = env_factory(at_delete_hour=False)
    before = file_starts(env)
    env.age(2)
    env.store.clean_expired_files(manual=True)
    assert file_starts(env) == before[2:]


@pytest.mark.parametrize(("ratio", "gone"), [(0.74, 0), (0.76, 3), (0.84, 3)])
def test_disk_over_max_used_ratio_deletes_expired_at_any_hour(
    env_factory: EnvFactory,
    ratio: float,
    gone: int,
) -> None:
    env = env_factory(at_delete_hour=False)
    before = file_starts(env)
    env.age(3)
    env.ratio[0] = ratio
    env.store.clean_expired_files()
    assert file_starts(env) == before[gone:]
    assert not env.store.disk_full
    assert check_store(env.store) == []


def test_forcible_clean_deletes_unexpired_but_never_the_last_file(env_factory: EnvFactory) -> None:
    env = env_factory(at_delete_hour=False, files=6)
    before = file_starts(env)
    env.age(0)  # nothing is expired
    env.ratio[0] = 0.86
    env.store.clean_expired_files()
    assert file_starts(env) == before[-1:]  # all but the file being written
    assert env.store.clean_expired_files() == 0
    assert file_starts(env) == before[-1:]
    assert check_store(env.store) == []
    env.ratio[0] = 0.2
    env.put(20)
    assert check_store(env.store) == []


@pytest.mark.parametrize("ratio", [0.86, 0.91])
def test_clean_file_forcibly_disabled_deletes_only_expired_files(
    env_factory: EnvFactory, ratio: float
) -> None:
    """``cleanFileForciblyEnable=false`` (RocketMQ's ``cleanAtOnce`` is then false): past the
    forcibly and warning ratios expired files still go at any hour, unexpired ones stay."""
    env = env_factory(at_delete_hour=False, files=6, clean_file_forcibly_enable=False)
    before = file_starts(env)
    env.age(2)
    env.ratio[0] = ratio
    env.store.clean_expired_files()
    assert file_starts(env) == before[2:]
    assert env.store.clean_expired_files() == 0
    assert file_starts(env) == before[2:]
    assert env.store.disk_full is (ratio > 0.90)
    assert check_store(env.store) == []


@pytest.mark.parametrize(
    ("ratio", "settings"),
    [
        (0.88, {"disk_max_used_space_ratio": 95}),  # past forcibly, below max used
        (0.92, {"disk_max_used_space_ratio": 95}),  # past the warning level too
        (0.60, {"disk_space_warning_level_ratio": 50}),  # warning level below forcibly
    ],
)
def test_disk_past_forcibly_or_warning_ratio_cleans_whatever_max_used_says(
    env_factory: EnvFactory, ratio: float, settings: dict[str, int]
) -> None:
    """RocketMQ's ``isSpaceToDelete`` answers true past ``diskSpaceCleanForciblyRatio`` or
    ``diskSpaceWarningLevelRatio`` even when ``diskMaxUsedSpaceRatio`` is higher: a full disk
    is cleaned at once, not at the next delete hour while every put is refused."""
    env = env_factory(at_delete_hour=False, files=5, **settings)
    before = file_starts(env)
    env.age(0)  # nothing is expired
    env.ratio[0] = ratio
    env.store.clean_expired_files()
    assert file_starts(env) == before[-1:]
    assert check_store(env.store) == []


def test_last_file_survives_even_when_expired(env_factory: EnvFactory) -> None:
    env = env_factory(at_delete_hour=True, files=4)
    before = file_starts(env)
    env.age(4)
    env.store.clean_expired_files()
    assert file_starts(env) == before[-1:]
    env.put(200)  # appending continues in the kept file and rolls on
    assert check_store(env.store) == []


def test_at_most_batch_max_files_per_pass(env_factory: EnvFactory) -> None:
    env = env_factory(at_delete_hour=True, files=8, delete_file_batch_max=2)
    before = file_starts(env)
    env.age(7)
    for passes in range(1, 4):
        env.store.clean_expired_files()
        assert file_starts(env) == before[2 * passes :]
        assert check_store(env.store) == []
    env.store.clean_expired_files()
    assert file_starts(env) == before[7:]


# -- what follows the commitlog ----------------------------------------------------------------
def test_logics_follow_and_deleted_ranges_read_as_too_small(
    env_factory: EnvFactory, tmp_path: Path
) -> None:
    env = env_factory(at_delete_hour=True, files=8)
    store = env.store
    cq_files = {key: len(cq.queue.files) for key, cq in store.cq_table.items()}
    index_files = len(store.index.files)
    assert min(cq_files.values()) >= 3
    assert index_files >= 3
    env.age(5)
    store.clean_expired_files()
    new_min = store.commitlog.min_offset
    assert new_min == env.puts[-1][3] - env.puts[-1][3] % 65536 - 2 * 65536
    for key, cq in store.cq_table.items():
        assert len(cq.queue.files) < cq_files[key], key
        assert cq.queue.files[0].file_from_offset >= 0
    assert len(store.index.files) < index_files
    assert all(f.end_phy_offset >= new_min for f in store.index.files)
    check_reads_after_retention(env, new_min)
    assert check_store(store) == []
    # the same after a restart: the readable minimum is recomputed from the files
    store.close()
    reopened = MessageStore(store.config, clock_ms=lambda: env.now[0], disk_usage=lambda _: 0.1)
    with reopened:
        env.store = reopened
        assert check_store(reopened) == []
        check_reads_after_retention(env, new_min)


def check_reads_after_retention(env: Env, new_min: int) -> None:
    """Deleted ranges answer OFFSET_TOO_SMALL (never crash); what is left reads normally."""
    store = env.store
    for topic in ("RetA", "RetB"):
        for qid in (0, 1):
            lo = store.get_min_offset_in_queue(topic, qid)
            kept = [p for p in env.puts if p[:2] == (topic, qid) and p[3] >= new_min]
            gone = [p for p in env.puts if p[:2] == (topic, qid) and p[3] < new_min]
            assert gone
            assert lo == kept[0][2] == gone[-1][2] + 1
            for offset in (0, gone[len(gone) // 2][2], lo - 1):
                got = store.get_messages(topic, qid, offset, 32)
                assert got.status is GetStatus.OFFSET_TOO_SMALL
                assert got.next_begin_offset == lo
                assert got.min_offset == lo
            got = store.get_messages(topic, qid, lo, 32)
            assert got.status is GetStatus.FOUND
            first = decode_records(got.records[0])[0]
            assert (first.queue_offset, first.physical_offset) == (lo, kept[0][3])
            assert store.get_offset_in_queue_by_time(topic, qid, 0) == lo
            assert store.lookup_message_by_offset(gone[-1][3]) is None
            assert store.query_messages(topic, gone[-1][4], 32, 0, 2**62).records == []
            assert len(store.query_messages(topic, kept[0][4], 32, 0, 2**62).records) == 1


# -- disk full ---------------------------------------------------------------------------------
def test_small_ratios_act_as_rocketmqs_lower_bounds(env_factory: EnvFactory) -> None:
    """5 % for every ratio (a typo for 50 or 85) acts as RocketMQ's 10 % (max used), 30 %
    (forcibly) and 35 % (warning): on a disk 20 % full only expired files go, and puts go on."""
    env = env_factory(
        at_delete_hour=False,
        disk_max_used_space_ratio=5,
        disk_space_clean_forcibly_ratio=5,
        disk_space_warning_level_ratio=5,
    )
    before = file_starts(env)
    env.age(2)
    env.ratio[0] = 0.20
    env.store.clean_expired_files()
    assert file_starts(env) == before[2:]  # above 10 %: the expired ones, at any hour
    assert not env.store.disk_full
    assert env.store.put_message(make_msg("RetA", b"taken", 0)).status is PutStatus.PUT_OK


def test_high_warning_ratio_acts_as_rocketmqs_upper_bound(env_factory: EnvFactory) -> None:
    """A warning level of 100 % acts as 90 %: a disk 95 % full refuses puts."""
    env = env_factory(at_delete_hour=False, files=2, disk_space_warning_level_ratio=100)
    env.ratio[0] = 0.95
    env.store.clean_expired_files()
    assert env.store.disk_full


def test_disk_warning_level_refuses_puts_until_usage_drops(env_factory: EnvFactory) -> None:
    env = env_factory(at_delete_hour=False, files=3)
    store = env.store
    env.age(0)
    env.ratio[0] = 0.91
    store.clean_expired_files()
    assert store.disk_full
    result = store.put_message(make_msg("RetA", b"refused", 0))
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "disk" in result.remark
    # forcible cleaning ran too (91% > 85%): all but the last file went
    assert len(env.files) == 1
    lo = store.get_min_offset_in_queue("RetA", 0)
    assert store.get_messages("RetA", 0, 0, 8).status is GetStatus.OFFSET_TOO_SMALL
    got = store.get_messages("RetA", 0, lo, 8)
    assert got.status is GetStatus.FOUND
    first_left = decode_record(got.records[0], with_body=False).store_timestamp
    assert store.get_earliest_message_time("RetA", 0) == first_left  # of the surviving file
    last_key = next(p[4] for p in reversed(env.puts) if p[0] == "RetA")
    assert store.query_messages("RetA", last_key, 8, 0, 2**62).records
    env.ratio[0] = 0.5
    store.clean_expired_files()
    assert not store.disk_full
    env.put(10)
    assert check_store(store) == []


def test_puts_stay_refused_until_usage_is_back_under_the_forcibly_ratio(
    env_factory: EnvFactory,
) -> None:
    """RocketMQ's ``isSpaceToDelete`` marks the disk full above ``diskSpaceWarningLevelRatio``
    (90 %) and marks it OK again only at or below ``diskSpaceCleanForciblyRatio`` (85 %): in
    between the mark stays, so a disk hovering around 90 % does not flip between refusing and
    taking puts with every file written or deleted."""
    env = env_factory(at_delete_hour=False, files=2)
    store = env.store
    env.ratio[0] = 0.88  # under the warning level, never full: puts go on
    store.clean_expired_files()
    assert not store.disk_full
    env.ratio[0] = 0.91
    store.clean_expired_files()
    assert store.disk_full
    for ratio in (0.895, 0.87, 0.851):
        env.ratio[0] = ratio
        store.clean_expired_files()
        result = store.put_message(make_msg("RetA", b"refused", 0))
        assert result.status is PutStatus.SERVICE_NOT_AVAILABLE, ratio
    env.ratio[0] = 0.85
    store.clean_expired_files()
    assert not store.disk_full
    assert store.put_message(make_msg("RetA", b"taken", 0)).status is PutStatus.PUT_OK
    env.ratio[0] = 0.88  # back up, but not past the warning level: still taking puts
    store.clean_expired_files()
    assert store.put_message(make_msg("RetA", b"taken", 0)).status is PutStatus.PUT_OK


class UsageProbe:
    """An injected ``disk_usage`` whose answer a trio test sets, and can wait on.

    ``await probe.set(ratio)`` returns once two retention passes have read the new ratio: the
    second one starts only after the first finished, so the first one's effects are visible.
    """

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self._target = ratio
        self._seen = 0
        self._event: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    def __call__(self, _path: Path) -> float:
        ratio = self.ratio
        if self._event is not None and ratio == self._target:
            self._seen += 1
            if self._seen == 2 and self._token is not None:
                self._token.run_sync_soon(self._event.set)
        return ratio

    async def set(self, ratio: float) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._event = event = trio.Event()
        self._seen = 0
        self._target = ratio
        self.ratio = ratio
        with trio.fail_after(60):
            await event.wait()


async def test_services_clean_loop_applies_the_watermarks(tmp_path: Path) -> None:
    # real time: retention runs in a worker thread, which an autojump clock would outrun
    now = [steady_start_ms()]
    usage = UsageProbe(0.1)
    cfg = make_config(tmp_path / "store", now[0], at_delete_hour=False, clean_resource_interval=20)
    store = MessageStore(cfg, clock_ms=lambda: now[0], disk_usage=usage).open()
    try:
        services = StoreServices(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            assert (await services.put_message(make_msg("RetA", b"a", 0))).status.ok
            await usage.set(0.95)
            assert store.disk_full
            result = await services.put_message(make_msg("RetA", b"b", 0))
            assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
            assert store.get_messages("RetA", 0, 0, 8).status is GetStatus.FOUND
            await usage.set(0.3)
            assert not store.disk_full
            assert (await services.put_message(make_msg("RetA", b"c", 0))).status.ok
            nursery.cancel_scope.cancel()
        drain_dispatch(store)
        assert check_store(store) == []
    finally:
        store.close()


def five_expired_files(tmp_path: Path, **settings: object) -> tuple[MessageStore, Env, list[int]]:
    """An open store at its delete hour, a retention pass every 20 ms and a disk 10 % full,
    with five commitlog files, all but the last expired; and those files' start offsets."""
    now = [steady_start_ms()]
    cfg = make_config(
        tmp_path / "store", now[0], at_delete_hour=True, clean_resource_interval=20, **settings
    )
    store = MessageStore(cfg, clock_ms=lambda: now[0], disk_usage=lambda _path: 0.1).open()
    env = Env(store, now, [0.1], [])
    while len(env.files) < 5:
        env.put(50)
    starts = file_starts(env)
    env.age(3)
    return store, env, starts


async def test_a_file_that_cannot_be_unlinked_is_tried_again_and_stops_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A commitlog file whose unlink fails (here its name holds a directory: EISDIR, as a
    read-only or immutable file system gives EROFS / EPERM). RocketMQ's CleanCommitLogService
    logs the failed pass and runs again next period. The retention loop used to raise, which
    ended the store's task tree and the broker process with it; and the file left the list
    before its unlink, so once deleting worked again the files behind it went and the next
    open found the commitlog not contiguous and refused to start."""
    store, env, starts = five_expired_files(tmp_path)
    try:
        stuck = env.files[0].path
        aside = stuck.with_name("moved-away")
        stuck.rename(aside)  # the mapping and the descriptor stay valid
        (stuck / "child").mkdir(parents=True)
        old = os.stat(aside).st_mtime
        os.utime(stuck, (old, old))
        services = StoreServices(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            await wait_until(
                lambda: any("retention pass failed" in r.message for r in caplog.records)
            )
            assert file_starts(env) == starts  # the stuck file stays, and so do those after it
            assert (await services.put_message(make_msg("RetA", b"during", 0))).status.ok
            (stuck / "child").rmdir()
            stuck.rmdir()
            aside.rename(stuck)  # deletable again
            await wait_until(lambda: file_starts(env) == starts[3:])
            nursery.cancel_scope.cancel()
        drain_dispatch(store)
        assert check_store(store) == []
    finally:
        store.close()
    with MessageStore(store.config, clock_ms=lambda: env.now[0], disk_usage=lambda _: 0.1) as again:
        assert again.commitlog.min_offset == starts[3]
        assert check_store(again) == []


async def test_deletions_of_a_pass_pause_without_the_lock_and_stop_with_the_services(
    tmp_path: Path,
) -> None:
    """RocketMQ's ``deleteCommitLogFilesInterval``: one file, then a pause before the next.
    Puts go on during the pause (the commitlog lock is not held), and stopping the services
    cuts a pause short instead of waiting it out (here an hour)."""
    store, env, starts = five_expired_files(tmp_path, delete_commit_log_files_interval=3_600_000)
    try:
        services = StoreServices(store)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(services.run)
                await wait_until(lambda: file_starts(env) != starts)
                assert file_starts(env) == starts[1:]  # one, then the pause
                result = await services.put_message(make_msg("RetA", b"during the pause", 0))
                assert result.status.ok
                assert file_starts(env) == starts[1:]
                nursery.cancel_scope.cancel()  # returns although the pause has an hour to go
        drain_dispatch(store)
        assert check_store(store) == []
    finally:
        store.close()


RACING_READS = (GetStatus.FOUND, GetStatus.OFFSET_TOO_SMALL, GetStatus.MESSAGE_WAS_REMOVING)
"""A read from offset 0 while a pass runs: its data deleted and the queue not yet following
is MESSAGE_WAS_REMOVING (never FOUND with the gone records skipped)."""


def test_reads_racing_retention_never_crash(env_factory: EnvFactory) -> None:
    """Retention runs in a worker thread while the event loop reads: reads must not raise."""
    env = env_factory(at_delete_hour=True, files=10, delete_file_batch_max=1)
    store = env.store
    env.age(9)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for topic in ("RetA", "RetB"):
                    got = store.get_messages(topic, 0, 0, 32)
                    assert got.status in RACING_READS, got.status
                    store.lookup_message_by_offset(store.commitlog.min_offset)
                    store.query_messages(topic, "key0", 32, 0, 2**62)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(9):
            store.clean_expired_files()
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert len(env.files) == 1


@pytest.mark.parametrize(
    ("total", "free", "available", "ratio"),
    [
        (1000, 1000, 1000, 0.0),  # empty
        (1000, 250, 250, 0.75),  # no reserve: used over the whole size
        (1000, 300, 250, 0.7 / 0.95),  # root's reserve of 50: neither used nor usable
        (270, 229, 67, 41 / 108),  # this VM: 75 % of the size is not what df says (38 %)
        (1000, 0, 0, 1.0),  # full
        (0, 0, 0, 0.0),  # nothing to measure
    ],
)
def test_used_space_ratio_counts_as_df_and_rocketmq_do(
    total: int, free: int, available: int, ratio: float
) -> None:
    assert used_space_ratio(total, free, available) == pytest.approx(ratio)


def test_disk_usage_ratio_of_a_real_directory(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    used = st.f_blocks - st.f_bfree
    expected = used / (used + st.f_bavail)
    assert disk_usage_ratio(tmp_path) == pytest.approx(expected, abs=0.01)  # others write too


def test_queues_left_by_a_crash_mid_pass_are_cleaned_outside_the_delete_hour(
    env_factory: EnvFactory,
) -> None:
    """A pass deletes commitlog files, then the consume-queue and index files below them; a
    crash between the two left queues starting in deleted data until the next delete hour.
    Once the commitlog's minimum moved, any pass cleans them (a restart counts as moved)."""
    env = env_factory(at_delete_hour=False)
    store = env.store
    env.age(3)
    with store.commitlog.lock:  # the first half of a pass, then the crash
        store.commitlog.queue.delete_first_files(lambda mf: True, 3)
    store.close()
    reopened = MessageStore(store.config, clock_ms=lambda: env.now[0], disk_usage=lambda _: 0.1)
    with reopened:
        env.store = reopened
        assert check_store(reopened) == []  # recovery put the minimums past the deleted data
        assert reopened.clean_expired_files() > 0  # not the delete hour, low usage
        assert check_store(reopened) == []
        assert reopened.clean_expired_files() == 0


@pytest.mark.parametrize("queue_files_deleted", [0, 5])
def test_recovery_puts_min_offsets_past_data_a_crashed_pass_deleted(
    tmp_path: Path, queue_files_deleted: int
) -> None:
    """A pass deletes commitlog files, then the consume-queue files below them: a crash in
    between (here: the oldest commitlog files, and some of one queue's files, deleted by hand
    under a closed store) leaves queues whose first files point into deleted data. Recovery
    computes each queue's readable minimum from what is on disk (RocketMQ's
    ``correctMinOffset``): the first unit whose record is still in the commitlog, or the end
    of a queue none of whose records is left. Pulling from the reported minimum finds it."""
    cfg = tiny_store_config(tmp_path / "store")  # 8 KiB commitlog files, 4-unit queue files
    clock = ManualClock()
    puts: dict[int, list[tuple[int, int]]] = {0: [], 1: []}  # queue -> (queue offset, phys)
    with MessageStore(cfg, clock_ms=clock) as store:
        for i in range(300):
            qid = i % 2 if i < 20 else 0  # queue 1's records: all in the oldest file
            clock.advance(1)
            got = store.put_message(make_msg("Crashed", b"m%05d" % i * 20, qid))
            assert got.status is PutStatus.PUT_OK
            puts[qid].append((got.queue_offsets[0], got.phys_offsets[0]))
        drain_dispatch(store)
    commitlog = sorted((cfg.store_path_root_dir / "commitlog").iterdir())
    assert len(commitlog) >= 6
    for path in commitlog[:3]:  # retention's first half
        path.unlink()
    queue_files = sorted((cfg.consume_queue_dir / "Crashed" / "0").iterdir())
    for path in queue_files[:queue_files_deleted]:  # some of the second half
        path.unlink()
    new_min = int(commitlog[3].name)
    with MessageStore(cfg, clock_ms=clock) as store:
        assert store.commitlog.min_offset == new_min
        for qid, written in puts.items():
            kept = [q for q, phys in written if phys >= new_min]
            expected = kept[0] if kept else len(written)
            assert store.get_min_offset_in_queue("Crashed", qid) == expected, qid
            got = store.get_messages("Crashed", qid, expected, 4)
            if not kept:
                assert got.status is GetStatus.OFFSET_OVERFLOW_ONE
                continue
            assert got.status is GetStatus.FOUND
            assert decode_record(got.records[0]).queue_offset == expected
            too_small = store.get_messages("Crashed", qid, expected - 1, 4)
            assert too_small.status is GetStatus.OFFSET_TOO_SMALL
            assert too_small.next_begin_offset == expected
        assert check_store(store) == []
