"""Tests for the blocking-to-trio bridge (client/loop_thread.py): a real loop in a real thread."""

from __future__ import annotations

import _thread
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from client import loop_thread
from client.loop_thread import LoopThread

WAIT_S = 10.0
"""Generous bound for waiting on events that should happen almost at once."""


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


@pytest.fixture
def loop(request: pytest.FixtureRequest) -> Iterator[LoopThread]:
    """A started LoopThread whose thread must be gone after the test."""
    lt = LoopThread(name=f"lt-{request.node.name}")
    lt.start()
    yield lt
    lt.stop(timeout=WAIT_S)
    assert not _threads_named(lt.name), "loop thread leaked"


async def add(a: int, b: int) -> int:
    await trio.lowlevel.checkpoint()
    return a + b


async def noop() -> None:
    pass


def test_run_returns_value(loop: LoopThread) -> None:
    assert loop.running
    assert loop.run(add, 2, 3) == 5
    assert loop.run(add, 2, 3, timeout=WAIT_S) == 5


def test_run_reraises_the_same_exception(loop: LoopThread) -> None:
    class Boom(Exception):
        pass

    boom = Boom("x")

    async def fail() -> None:
        await trio.lowlevel.checkpoint()
        raise boom

    with pytest.raises(Boom) as info:
        loop.run(fail)
    assert info.value is boom
    assert loop.run(add, 1, 1) == 2  # the loop survived


def test_run_timeout_cancels_the_task(loop: LoopThread) -> None:
    cleaned = threading.Event()
    finished = threading.Event()

    async def forever() -> None:
        try:
            await trio.sleep_forever()
            finished.set()
        finally:
            cleaned.set()

    with pytest.raises(TimeoutError, match="forever"):
        loop.run(forever, timeout=0.05)
    assert cleaned.is_set()  # the task's cleanup ran before the caller was told
    assert not finished.is_set()
    assert loop.run(add, 1, 2) == 3


def test_calls_from_several_threads_run_concurrently(loop: LoopThread) -> None:
    # Two blocking callers whose tasks wait for each other: only possible if both run at once.
    arrived = [0]
    both = trio.Event()

    async def rendezvous() -> int:
        arrived[0] += 1
        if arrived[0] == 2:
            both.set()
        await both.wait()
        return arrived[0]

    results: list[int] = []
    other = threading.Thread(target=lambda: results.append(loop.run(rendezvous, timeout=WAIT_S)))
    other.start()
    results.append(loop.run(rendezvous, timeout=WAIT_S))
    other.join(WAIT_S)
    assert results == [2, 2]


def test_submit_result_exception_and_callback_thread(loop: LoopThread) -> None:
    assert loop.submit(add, 4, 5).result(WAIT_S) == 9

    error = KeyError("k")

    async def fail() -> None:
        raise error

    assert loop.submit(fail).exception(WAIT_S) is error

    gate = trio.Event()

    async def gated() -> str:
        await gate.wait()
        return "done"

    future = loop.submit(gated)
    seen: list[str] = []
    future.add_done_callback(lambda _f: seen.append(threading.current_thread().name))

    async def open_gate() -> None:
        gate.set()

    loop.run(open_gate)
    assert future.result(WAIT_S) == "done"
    assert seen == [loop.name]  # callbacks run in the loop thread


def test_submit_cancel_cancels_the_task(loop: LoopThread) -> None:
    started = threading.Event()
    cleaned = threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cleaned.set()

    future = loop.submit(forever)
    assert started.wait(WAIT_S)
    assert future.cancel()
    assert future.cancelled()
    assert cleaned.wait(WAIT_S)
    assert loop.run(add, 1, 1) == 2


def test_start_service_runs_until_stop() -> None:
    lt = LoopThread(name="lt-service")
    lt.start()
    stopped = threading.Event()
    served: list[int] = []
    requests: list[trio.MemorySendChannel[int]] = []

    async def service(first: int, *, task_status: trio.TaskStatus[str]) -> None:
        send, receive = trio.open_memory_channel[int](10)
        requests.append(send)
        task_status.started(f"ready-{first}")
        try:
            async for item in receive:
                served.append(item)
        finally:
            stopped.set()

    assert lt.start_service(service, 7, timeout=WAIT_S) == "ready-7"

    async def request(item: int) -> None:
        await requests[0].send(item)
        await trio.testing.wait_all_tasks_blocked()

    lt.run(request, 1)
    lt.run(request, 2)
    assert served == [1, 2]  # still serving after start_service returned
    assert not stopped.is_set()
    lt.stop(timeout=WAIT_S)
    assert stopped.is_set()
    assert not lt.running
    assert not _threads_named("lt-service")


def test_start_service_error_before_started_is_reraised(loop: LoopThread) -> None:
    error = OSError("cannot bind")

    async def broken(*, task_status: trio.TaskStatus[None]) -> None:
        await trio.lowlevel.checkpoint()
        raise error

    with pytest.raises(OSError, match="cannot bind") as info:
        loop.start_service(broken)
    assert info.value is error


def test_start_service_timeout_cancels_the_service(loop: LoopThread) -> None:
    cleaned = threading.Event()

    async def never_ready(*, task_status: trio.TaskStatus[None]) -> None:
        try:
            await trio.sleep_forever()
        finally:
            cleaned.set()

    with pytest.raises(TimeoutError):
        loop.start_service(never_ready, timeout=0.05)
    assert cleaned.is_set()


def test_service_error_after_started_is_logged_and_loop_survives(
    loop: LoopThread, caplog: pytest.LogCaptureFixture
) -> None:
    async def crashes(*, task_status: trio.TaskStatus[int]) -> None:
        task_status.started(1)
        raise ValueError("service broke")

    with caplog.at_level(logging.ERROR, logger="client.loop_thread"):
        assert loop.start_service(crashes) == 1
        assert loop.run(add, 2, 2) == 4
    [record] = [r for r in caplog.records if r.exc_info]
    assert "crashes" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)
    assert loop.running


def test_run_from_the_loop_thread_is_refused(loop: LoopThread) -> None:
    async def reenter() -> str:
        with pytest.raises(RuntimeError, match="own loop thread"):
            loop.run(noop)
        with pytest.raises(RuntimeError, match="own loop thread"):
            loop.start_service(noop)
        return "refused"

    assert loop.run(reenter) == "refused"


def test_use_after_stop_and_double_start_are_refused() -> None:
    lt = LoopThread(name="lt-closed")
    with pytest.raises(RuntimeError, match="not started"):
        lt.run(noop)
    lt.start()
    with pytest.raises(RuntimeError, match="already started"):
        lt.start()
    lt.stop()
    lt.stop()  # idempotent
    assert not lt.running
    with pytest.raises(RuntimeError, match="is closed"):
        lt.run(noop)
    with pytest.raises(RuntimeError, match="is closed"):
        lt.submit(noop)
    with pytest.raises(RuntimeError, match="is closed"):
        lt.start()
    assert not _threads_named("lt-closed")


def test_stop_waits_for_a_task_that_defers_cancellation() -> None:
    lt = LoopThread(name="lt-slow-stop")
    lt.start()
    started = threading.Event()

    async def slow_to_cancel() -> str:
        started.set()
        with trio.CancelScope(shield=True):
            await trio.sleep(0.2)
        return "finished"

    future = lt.submit(slow_to_cancel)
    assert started.wait(WAIT_S)
    lt.stop(timeout=WAIT_S)
    assert not _threads_named("lt-slow-stop")
    assert future.result(0) == "finished"
    lt.stop(timeout=WAIT_S)


def test_stop_returns_when_a_task_is_stuck(caplog: pytest.LogCaptureFixture) -> None:
    lt = LoopThread(name="lt-stuck")
    lt.start()
    stuck = threading.Event()
    release = trio.Event()
    tokens: list[trio.lowlevel.TrioToken] = []

    async def ignores_cancellation() -> None:
        tokens.append(trio.lowlevel.current_trio_token())
        stuck.set()
        with trio.CancelScope(shield=True):
            await release.wait()

    lt.submit(ignores_cancellation)
    assert stuck.wait(WAIT_S)
    with caplog.at_level(logging.WARNING, logger="client.loop_thread"):
        lt.stop(timeout=0.05)
    assert not lt.running
    [thread] = _threads_named("lt-stuck")  # abandoned, still alive
    assert thread.is_alive()
    assert any("did not stop" in r.getMessage() for r in caplog.records)
    with pytest.raises(RuntimeError, match="is closed"):
        lt.run(noop)
    # Release the task so that the thread really ends: the test leaks nothing.
    tokens[0].run_sync_soon(release.set)
    thread.join(WAIT_S)
    assert not thread.is_alive()


def _interrupt_when(started: threading.Event, interrupt: object) -> threading.Thread:
    def helper() -> None:
        if started.wait(WAIT_S):
            assert callable(interrupt)
            interrupt()

    thread = threading.Thread(target=helper, name="interrupter")
    thread.start()
    return thread


def _assert_interrupt_cancels(loop: LoopThread, interrupt: object) -> None:
    assert threading.current_thread() is threading.main_thread()
    started = threading.Event()
    cleaned = threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cleaned.set()

    helper = _interrupt_when(started, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(forever)
    finally:
        helper.join(WAIT_S)
    assert cleaned.wait(WAIT_S)
    assert loop.run(add, 1, 1) == 2


def test_keyboard_interrupt_cancels_the_task(loop: LoopThread) -> None:
    # interrupt_main() only flags the signal: run() must notice it while waiting.
    _assert_interrupt_cancels(loop, _thread.interrupt_main)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_real_sigint_cancels_the_task(loop: LoopThread) -> None:
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default KeyboardInterrupt handler here")
    main_id = threading.main_thread().ident
    assert main_id is not None
    _assert_interrupt_cancels(loop, lambda: signal.pthread_kill(main_id, signal.SIGINT))


def test_stop_fails_blocked_callers_with_closed_error() -> None:
    lt = LoopThread(name="lt-stop-callers")
    lt.start()
    started = threading.Event()
    errors: list[BaseException] = []

    async def forever() -> None:
        started.set()
        await trio.sleep_forever()

    def caller() -> None:
        try:
            lt.run(forever)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(WAIT_S)
    lt.stop(timeout=WAIT_S)
    thread.join(WAIT_S)
    assert [str(e) for e in errors] == ["lt-stop-callers is closed: task cancelled by stop()"]
    assert not _threads_named("lt-stop-callers")


def _block_the_loop(loop: LoopThread, seconds: float) -> None:
    """Make the loop thread sleep in plain code (as blocking user code in it would)."""
    started = threading.Event()

    async def hog() -> None:
        started.set()
        time.sleep(seconds)  # noqa: ASYNC251 - blocking the loop is the point

    loop.submit(hog)
    assert started.wait(WAIT_S)


def test_a_call_on_a_blocked_loop_gives_up_or_waits_as_told(
    loop: LoopThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its timeout plus the grace a call gives up (TimeoutError), so a blocked loop cannot
    hang it; with give_up=False it waits for the call's own outcome, which must not be lost
    (a poll's messages)."""
    monkeypatch.setattr(loop_thread, "STUCK_LOOP_GRACE_S", 0.2)
    monkeypatch.setattr(loop_thread, "INTERRUPT_GRACE_S", 0.2)
    _block_the_loop(loop, 2.0)
    with pytest.raises(TimeoutError, match="its loop thread is busy"):
        loop.run(add, 1, 2, timeout=0.1)
    _block_the_loop(loop, 1.0)
    assert loop.run(add, 2, 3, timeout=0.1, give_up=False) == 5
    assert loop.run(add, 3, 4, timeout=0.1) == 7  # the loop serves again


@pytest.mark.parametrize(("timeout", "error"), [(float("nan"), ValueError), ("1", TypeError)])
def test_a_bad_timeout_is_refused_in_the_caller(
    loop: LoopThread, timeout: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        loop.run(add, 1, 2, timeout=timeout)  # type: ignore[arg-type]
    assert loop.run(add, 1, 2, timeout=1.0) == 3  # the loop lives on
