"""Tests for GroupCommitWorker (store/group_commit.py): the SYNC_FLUSH flush thread.

The worker is a plain thread body, so these tests drive it with a stand-in flush function
(a counter of "appended" bytes, not our store) and real threads; every wait has a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from store.group_commit import GroupCommitWorker

DEADLINE_S = 30.0


class FakeDisk:
    """What the worker flushes: an appended end offset and a flush that can be held."""

    def __init__(self) -> None:
        self.appended = 0
        self.calls = 0
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Semaphore(0)
        self.reported: list[int] = []
        self.reported_cond = threading.Condition()

    def flush(self) -> int:
        self.calls += 1
        target = self.appended  # what a flush covers is read when it starts
        self.entered.release()
        assert self.hold.wait(DEADLINE_S)
        return target

    def on_flushed(self, offset: int) -> None:
        with self.reported_cond:
            self.reported.append(offset)
            self.reported_cond.notify_all()

    def wait_reported(self, offset: int) -> None:
        with self.reported_cond:
            assert self.reported_cond.wait_for(
                lambda: self.reported and self.reported[-1] >= offset, DEADLINE_S
            )


@pytest.fixture
def disk() -> FakeDisk:
    return FakeDisk()


@pytest.fixture
def worker(disk: FakeDisk) -> Iterator[GroupCommitWorker]:
    w = GroupCommitWorker(disk.flush, disk.on_flushed, interval_s=DEADLINE_S * 10)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    yield w
    disk.hold.set()
    w.stop()
    thread.join(DEADLINE_S)
    assert not thread.is_alive()


def test_a_request_is_flushed_and_reported(disk: FakeDisk, worker: GroupCommitWorker) -> None:
    disk.appended = 100
    worker.request(100)
    disk.wait_reported(100)
    assert worker.flushed == 100
    assert worker.flushes == 1
    assert worker.flush_seconds > 0


def test_a_request_already_covered_flushes_nothing(
    disk: FakeDisk, worker: GroupCommitWorker
) -> None:
    disk.appended = 50
    worker.request(50)
    disk.wait_reported(50)
    worker.request(40)  # below what is durable: no round
    worker.request(50)
    disk.appended = 80
    worker.request(80)
    disk.wait_reported(80)
    assert disk.calls == 2
    assert disk.reported == [50, 80]


def test_requests_during_a_flush_share_the_next_one(
    disk: FakeDisk, worker: GroupCommitWorker
) -> None:
    disk.hold.clear()
    disk.appended = 10
    worker.request(10)
    assert disk.entered.acquire(timeout=DEADLINE_S)  # the first round is under way
    for end in range(20, 100, 10):  # eight puts arrive while it flushes
        disk.appended = end
        worker.request(end)
    disk.hold.set()
    disk.wait_reported(90)
    assert disk.reported == [10, 90]
    assert worker.flushes == 2


def test_without_requests_it_flushes_every_interval(disk: FakeDisk) -> None:
    w = GroupCommitWorker(disk.flush, disk.on_flushed, interval_s=0.01)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    try:
        disk.appended = 7  # a put that does not wait for the disk
        disk.wait_reported(7)
        assert w.flushed == 7
    finally:
        w.stop()
        thread.join(DEADLINE_S)
    assert not thread.is_alive()


def test_stop_waits_for_the_flush_under_way(disk: FakeDisk) -> None:
    w = GroupCommitWorker(disk.flush, disk.on_flushed, interval_s=DEADLINE_S * 10)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    disk.hold.clear()
    disk.appended = 5
    w.request(5)
    assert disk.entered.acquire(timeout=DEADLINE_S)
    w.stop()
    thread.join(0.05)
    assert thread.is_alive()  # still in the flush, which is never abandoned
    disk.hold.set()
    thread.join(DEADLINE_S)
    assert not thread.is_alive()
    assert disk.reported == [5]


def test_a_failed_flush_ends_the_worker_and_is_kept() -> None:
    calls = []
    reported: list[int] = []

    def broken() -> int:
        calls.append(1)
        raise OSError(5, "Input/output error")

    w = GroupCommitWorker(broken, reported.append, interval_s=DEADLINE_S * 10)
    w.request(1)
    w.run()  # returns: the error is kept, not raised in the thread
    assert isinstance(w.error, OSError)
    assert w.error.errno == 5
    w.request(2)
    w.run()  # a failed worker flushes no more
    assert len(calls) == 1
    assert reported == []
    assert w.flushes == 0
