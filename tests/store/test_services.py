"""Tests for StoreServices (store/services.py): the trio loops and the awaitable put.

The loops run disk work in worker threads, so these tests use the real clock and wait for
conditions under generous ``trio.fail_after`` deadlines; only the test that involves no thread
uses the autojump clock.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from common.deferred import Deferred
from store import FlushDiskType, MessageStore, PutResult, PutStatus, StoreConfig
from store.services import StoreServices
from tests.conftest import make_msg
from tests.store.faults import (
    break_commitlog_flush,
    break_consume_queue_flush,
    stall_commitlog_flushes,
)

DEADLINE_S = 30
TOPIC = "TopicTest"


async def wait_until(predicate: Callable[[], bool], limit_s: float = DEADLINE_S) -> None:
    """Poll ``predicate`` until it is true; fail after ``limit_s`` seconds."""
    with trio.fail_after(limit_s):
        while True:
            if predicate():
                return
            await trio.sleep(0.005)


def open_store(config: StoreConfig) -> MessageStore:
    """An open store whose disk always looks nearly empty."""
    return MessageStore(config, disk_usage=lambda path: 0.1).open()


async def test_reput_loop_dispatches_without_help(
    small_config: Callable[..., StoreConfig],
) -> None:
    store = open_store(small_config())
    arrived: dict[tuple[str, int], int] = {}
    event = trio.Event()

    def on_arrival(topic: str, queue_id: int, next_offset: int) -> None:
        arrived[(topic, queue_id)] = next_offset
        if next_offset >= 5:
            event.set()

    store.arrival_listener = on_arrival
    store.put_message(make_msg(body=b"before start"))  # appended before the loops run
    services = StoreServices(store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            assert services.started
            for i in range(4):
                r = await services.put_message(make_msg(body=b"%d" % i))
                assert r.status is PutStatus.PUT_OK
            with trio.fail_after(DEADLINE_S):
                await event.wait()
            assert store.get_max_offset_in_queue(TOPIC, 0) == 5
            assert store.get_messages(TOPIC, 0, 0, 32).message_count == 5
            store.put_message(make_msg("Other", b"sync put", 2))  # the plain put wakes it too
            await wait_until(lambda: arrived.get(("Other", 2)) == 1)
            nursery.cancel_scope.cancel()
        assert not services.started
        assert store.put_listener is None
    finally:
        store.close()


async def test_sync_flush_put_returns_after_flush(
    small_config: Callable[..., StoreConfig],
) -> None:
    store = open_store(small_config(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    services = StoreServices(store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            for i in range(5):
                r = await services.put_messages([make_msg(body=b"x" * 100 * i)] * 3)
                assert r.status is PutStatus.PUT_OK
                assert store.flushed_offset >= r.end_offset
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_group_commit_many_concurrent_sync_puts(
    small_config: Callable[..., StoreConfig],
) -> None:
    store = open_store(small_config(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    services = StoreServices(store)
    results = []

    async def producer(n: int) -> None:
        for j in range(5):
            r = await services.put_message(make_msg(body=b"%d-%d" % (n, j), queue_id=n % 4))
            assert store.flushed_offset >= r.end_offset
            results.append(r)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            with trio.fail_after(DEADLINE_S):
                async with trio.open_nursery() as producers:
                    for n in range(40):
                        producers.start_soon(producer, n)
            nursery.cancel_scope.cancel()
        assert len(results) == 200
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert 1 <= services.commitlog_flushes < 200  # puts shared flushes
        assert services._group_commit is None  # the flush thread stopped with the loops
        assert len({r.phys_offsets[0] for r in results}) == 200
        assert store.flushed_offset == store.commitlog.max_offset
        assert sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(4)) == 200
    finally:
        store.close()


@pytest.mark.parametrize("flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
async def test_a_failed_flush_acknowledges_nothing_more_and_refuses_writes(
    small_config: Callable[..., StoreConfig], flush: FlushDiskType
) -> None:
    store = open_store(small_config(flush_disk_type=flush, flush_interval_commit_log=10))
    services = StoreServices(store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            first = await services.put_message(make_msg(body=b"durable"))
            assert first.status is PutStatus.PUT_OK
            await wait_until(lambda: store.flushed_offset >= first.end_offset)
            break_commitlog_flush(store)
            second = await services.put_message(make_msg(body=b"never flushed"))
            if flush is FlushDiskType.SYNC_FLUSH:  # not acknowledged as durable
                assert second.status is PutStatus.FLUSH_DISK_TIMEOUT
            await wait_until(lambda: store.flush_error is not None)
            assert "Invalid argument" in store.flush_error
            third = await services.put_message(make_msg(body=b"refused"))
            assert third.status is PutStatus.SERVICE_NOT_AVAILABLE
            assert "could not be flushed" in third.remark
            await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 2)
            got = store.get_messages(TOPIC, 0, 0, 32)  # reads go on
            assert got.message_count == 2
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert store.config.abort_path.exists()  # the next open recovers and verifies the log


async def test_a_failed_queue_flush_is_logged_and_tried_again_not_fatal(
    small_config: Callable[..., StoreConfig], caplog: pytest.LogCaptureFixture
) -> None:
    """Consume queues, index and checkpoint are rebuilt from the commitlog by recovery: a
    failed flush of them (here a real EINVAL) must not end the services (and the broker with
    them), nor stop writes; it is logged every period, and close keeps the abort file."""
    store = open_store(small_config(flush_interval_consume_queue=10))
    services = StoreServices(store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            first = await services.put_message(make_msg(body=b"one"))
            await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 1)
            break_consume_queue_flush(store, TOPIC, 0)
            await wait_until(lambda: caplog.text.count("flushing consume queues") >= 2)
            second = await services.put_message(make_msg(body=b"two"))
            assert (first.status, second.status) == (PutStatus.PUT_OK, PutStatus.PUT_OK)
            await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 2)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert store.config.abort_path.exists()  # the next open recovers the queues


async def test_a_stored_sync_flush_put_is_answered_when_cancelled_meanwhile(
    small_config: Callable[..., StoreConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker that begins to stop cancels the send handlers waiting for their flush; the
    messages are stored (and flushed at close), so their puts still come back PUT_OK once the
    flush covers them, to be answered: a producer told nothing would send them again."""
    store = open_store(small_config(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    services = StoreServices(store)
    results: list[PutResult] = []

    async def put(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            results.append(await services.put_message(make_msg(body=b"stored")))

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            release = stall_commitlog_flushes(store, monkeypatch.setattr)
            scope = await nursery.start(put)
            await wait_until(lambda: store.commitlog.max_offset > 0)
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            release.set()
            await wait_until(lambda: bool(results), limit_s=10)
            assert results[0].status is PutStatus.PUT_OK
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_async_flush_put_does_not_wait(small_config: Callable[..., StoreConfig]) -> None:
    cfg = small_config(flush_interval_commit_log=600_000)
    store = open_store(cfg)
    services = StoreServices(store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            r = await services.put_message(make_msg())
            assert r.status is PutStatus.PUT_OK
            assert store.flushed_offset < r.end_offset  # acknowledged from the page cache
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert store.flushed_offset == r.end_offset  # close() flushes


async def test_async_flush_puts_in_a_loop_let_other_tasks_run(
    small_config: Callable[..., StoreConfig],
) -> None:
    """Each put is a schedule point: a tight put loop does not starve dispatch."""
    store = open_store(small_config())
    services = StoreServices(store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            for i in range(50):
                assert (await services.put_message(make_msg(body=b"%d" % i))).status.ok
            assert store.get_max_offset_in_queue("TopicTest", 0) > 0  # reput ran meanwhile
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_async_flush_loops_run_on_interval(
    small_config: Callable[..., StoreConfig],
) -> None:
    cfg = small_config(flush_interval_commit_log=20, flush_interval_consume_queue=20)
    store = open_store(cfg)
    services = StoreServices(store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            ends = []
            for _ in range(3):
                r = await services.put_message(make_msg(keys="k"))
                ends.append(r.end_offset)
                await wait_until(lambda e=r.end_offset: store.flushed_offset >= e)
            await wait_until(lambda: store.checkpoint.dispatched_phy_offset >= ends[-1])
            assert store.checkpoint.master_flushed_offset >= ends[-1]
            assert store.checkpoint.physic_msg_timestamp > 0
            assert store.checkpoint.logics_msg_timestamp > 0
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_sync_flush_times_out_without_a_flush_loop(
    small_config: Callable[..., StoreConfig], autojump_clock: trio.testing.MockClock
) -> None:
    cfg = small_config(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=5000)
    store = open_store(cfg)
    services = StoreServices(store)  # run() never started: nothing flushes
    try:
        start = trio.current_time()
        r = await services.put_message(make_msg())
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert r.status.ok  # stored all the same
        assert trio.current_time() - start == pytest.approx(5.0)
        assert store.commitlog.max_offset == r.end_offset
    finally:
        store.close()


async def test_refused_put_is_returned_as_is(small_config: Callable[..., StoreConfig]) -> None:
    store = open_store(small_config(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    services = StoreServices(store)
    try:
        r = await services.put_message(make_msg("bad topic"))
        assert r.status is PutStatus.MESSAGE_ILLEGAL
    finally:
        store.close()


async def test_cancellation_stops_loops_and_close_is_clean(
    small_config: Callable[..., StoreConfig],
) -> None:
    cfg = small_config()
    store = open_store(cfg)
    services = StoreServices(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        for i in range(20):
            await services.put_message(make_msg(body=b"%d" % i))
        nursery.cancel_scope.cancel()
    assert not services.started
    assert store.put_listener is None
    assert store.dispatch_behind == 0  # the reput loop drained on its way out
    assert store.get_max_offset_in_queue(TOPIC, 0) == 20
    assert cfg.abort_path.exists()
    store.close()
    assert not cfg.abort_path.exists()
    reopened = open_store(cfg)
    try:
        assert reopened.last_exit_ok
        assert reopened.get_max_offset_in_queue(TOPIC, 0) == 20
    finally:
        reopened.close()


def _quiet_config(small_config: Callable[..., StoreConfig]) -> StoreConfig:
    """No flush or retention pass within a test: only the reput loop runs (no worker threads)."""
    hour = 3_600_000
    return small_config(
        flush_interval_commit_log=hour,
        flush_interval_consume_queue=hour,
        clean_resource_interval=hour,
    )


async def _arrival_delays(
    store: MessageStore, services: StoreServices, count: int, spacing_s: float
) -> tuple[list[float], int]:
    """Put ``count`` messages ``spacing_s`` apart into one queue.

    Returns each message's put-to-dispatch delay and the number of dispatch rounds.
    """
    put_at: dict[int, float] = {}
    delays: list[float] = []
    rounds = 0

    def on_arrival(topic: str, queue_id: int, next_offset: int) -> None:
        nonlocal rounds
        rounds += 1
        now = trio.current_time()
        delays.extend(now - put_at[o] for o in sorted(put_at) if o < next_offset)
        for o in [o for o in put_at if o < next_offset]:
            del put_at[o]

    store.arrival_listener = on_arrival
    for _ in range(count):
        result = services.put_messages_now([make_msg(TOPIC, b"x", 0)])  # as the broker puts
        assert isinstance(result, PutResult)
        put_at[result.queue_offsets[0]] = trio.current_time()
        await trio.sleep(spacing_s)
    await wait_until(lambda: not put_at)
    return delays, rounds


async def test_light_load_is_dispatched_at_once(
    small_config: Callable[..., StoreConfig], autojump_clock: trio.testing.MockClock
) -> None:
    store = open_store(_quiet_config(small_config))
    services = StoreServices(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        delays, _ = await _arrival_delays(store, services, 50, 0.0005)  # 2,000 msgs/s
        nursery.cancel_scope.cancel()
    store.close()
    assert services.put_rate < services.dispatch_coalesce_rate
    assert delays == [0.0] * 50  # no virtual time passed between put and dispatch


async def test_a_stream_at_a_per_put_dispatch_pace_is_batched(
    small_config: Callable[..., StoreConfig], autojump_clock: trio.testing.MockClock
) -> None:
    """8,000 msgs/s is what a slow machine reached with every put dispatched alone: the rate
    must count as fast, or per-put dispatch keeps puts at that pace for good."""
    store = open_store(_quiet_config(small_config))
    services = StoreServices(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        delays, rounds = await _arrival_delays(store, services, 400, 0.000125)
        nursery.cancel_scope.cancel()
    store.close()
    assert rounds < 400 / 4  # about one round per ms, not one per put
    assert max(delays) <= services.dispatch_coalesce_s + 1e-9


async def test_a_fast_stream_is_dispatched_in_batches(
    small_config: Callable[..., StoreConfig], autojump_clock: trio.testing.MockClock
) -> None:
    store = open_store(_quiet_config(small_config))
    services = StoreServices(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        delays, rounds = await _arrival_delays(store, services, 400, 0.00001)  # 100k msgs/s
        nursery.cancel_scope.cancel()
    store.close()
    assert services.put_rate > services.dispatch_coalesce_rate
    assert rounds < 400 / 10  # batched: far fewer dispatch rounds than messages
    assert max(delays) <= services.dispatch_coalesce_s + 1e-9


async def test_a_few_puts_close_together_are_not_a_stream(
    small_config: Callable[..., StoreConfig], autojump_clock: trio.testing.MockClock
) -> None:
    """Three puts 100 µs apart on an idle store: a rate estimated per round (1 / 100 µs) took
    them for 10,000 msgs/s and switched dispatch to batching; the rate decays with time."""
    store = open_store(_quiet_config(small_config))
    services = StoreServices(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        await trio.sleep(2)  # idle: safety ticks only
        for _ in range(3):
            services.put_messages_now([make_msg(TOPIC, b"x", 0)])
            await trio.sleep(0.0001)
        await wait_until(lambda: store.reput_offset == store.commitlog.max_offset)
        nursery.cancel_scope.cancel()
    store.close()
    assert services.put_rate < services.dispatch_coalesce_rate / 5


# ------------------------------------------------------------------ deferred SYNC_FLUSH puts


def resolved_into(d: Deferred[PutResult], results: list[PutResult]) -> None:
    d.on_resolved(results.append)


async def test_a_deferred_sync_flush_put_is_resolved_once_flushed(
    small_config: Callable[..., StoreConfig],
) -> None:
    """The broker's send path: the put comes back as a deferred that the group commit's
    hand-back resolves on the event loop, with no task waiting for it."""
    store = open_store(small_config(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    services = StoreServices(store)
    results: list[PutResult] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            put = services.put_messages_deferred([make_msg(body=b"durable")])
            assert isinstance(put, Deferred)
            resolved_into(put, results)
            await wait_until(lambda: bool(results))
            assert results[0].status is PutStatus.PUT_OK
            assert store.flushed_offset >= results[0].end_offset
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_deferred_puts_time_out_while_the_disk_stalls_and_are_answered_at_stop(
    small_config: Callable[..., StoreConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalled disk: a deferred put is answered FLUSH_DISK_TIMEOUT once syncFlushTimeout
    passes (stored all the same), and one still owed when the services stop is answered
    then, flushed or not, so no connection waits for it for ever."""
    config = small_config(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
    store = open_store(config)
    services = StoreServices(store)
    timed_out: list[PutResult] = []
    at_stop: list[PutResult] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            first = await services.put_message(make_msg(body=b"before"))  # the file exists
            await wait_until(lambda: store.flushed_offset >= first.end_offset)
            release = stall_commitlog_flushes(store, monkeypatch.setattr)
            put = services.put_messages_deferred([make_msg(body=b"stalled")])
            assert isinstance(put, Deferred)
            resolved_into(put, timed_out)
            await wait_until(lambda: bool(timed_out))
            assert timed_out[0].status is PutStatus.FLUSH_DISK_TIMEOUT
            owed = services.put_messages_deferred([make_msg(body=b"owed at stop")])
            assert isinstance(owed, Deferred)
            resolved_into(owed, at_stop)
            nursery.cancel_scope.cancel()
            release.set()  # the stop waits for the flush under way, then answers the rest
        assert len(at_stop) == 1
        assert at_stop[0].status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)
        assert store.commitlog.max_offset == at_stop[0].end_offset
    finally:
        store.close()
