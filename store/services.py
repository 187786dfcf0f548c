"""The store's trio shell: background loops and the awaitable put with group commit.

``StoreServices.run`` is a task tree (RocketMQ's ReputMessageService, FlushRealTimeService /
GroupCommitService, FlushConsumeQueueService and CleanCommitLogService)::

    run
    ├─ reput_loop          dispatch appended records to consume queues + index, on wakeup
    │                      (at once below 5k msgs/s, batched every 1 ms above it, which is
    │                      RocketMQ's ReputMessageService period); wakes warm_loop when due
    ├─ reput_safety_tick   wakes reput_loop every REPUT_SAFETY_S whatever happens
    ├─ flush_commitlog_loop  ASYNC_FLUSH: every flushIntervalCommitLog; SYNC_FLUSH: runs the
    │                      group-commit thread (store.group_commit), which flushes as soon as
    │                      a put waits and hands each flushed offset back to the loop
    ├─ expire_flush_waiters  SYNC_FLUSH: answers puts still unflushed after syncFlushTimeout
    ├─ flush_logics_loop   consume queues + index + checkpoint, every flushIntervalConsumeQueue
    ├─ clean_loop          retention, every cleanResourceInterval (a failed pass is logged;
    │                      stopping ends its pauses between deletions)
    └─ warm_loop           prefault the commitlog ahead of the writer (ASYNC_FLUSH), when
                           reput_loop finds the writer near the prefaulted end

Every disk wait runs in a worker thread (``trio.to_thread.run_sync``), never on the event loop.
On cancellation the loops drain what they can under a shielded, bounded scope; ``store.close()``
(synchronous) does the final flush and checkpoint.

A ``SYNC_FLUSH`` put waits for the flush that covers it in one of two ways: awaited
(:meth:`StoreServices.put_messages`, :meth:`StoreServices.wait_flushed`), or as a
:class:`~common.deferred.Deferred` (:meth:`StoreServices.put_messages_deferred`), which the
group commit's hand-back resolves on the event loop with no task per put: the broker's send
path, where a task, an event and a timeout per request were most of what ``SYNC_FLUSH``
added. Both kinds are flush waiters in one list, answered when a flush covers them, when
``syncFlushTimeout`` passes (not flushed: ``FLUSH_DISK_TIMEOUT``), when flushing fails, and
when the services stop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence

import trio

from common.deferred import Deferred
from common.record import MessageRecord
from store.config import FlushDiskType
from store.errors import MappedFileCreateError
from store.group_commit import GroupCommitWorker
from store.message_store import MessageStore
from store.status import PutResult, PutStatus

log = logging.getLogger(__name__)

DISK_FULL_RETRY_S = 1.0
SHUTDOWN_DRAIN_S = 5.0
DISPATCH_BATCH = 8192
DISPATCH_COALESCE_RATE = 5_000.0
"""Messages per second above which dispatch runs at most every 1 ms instead of after each put.

Dispatching one put at a time costs 10-20 times more per message than a 1 ms batch, so it
also caps how fast puts can go. The rate is measured from the puts dispatched, so under a
closed loop (each put waiting for the last) a threshold above that cap would keep dispatch
per put for good: a machine running slowly at 20,000 msgs/s did just that. At 5,000 msgs/s
the cap is several times higher, and the 2,000 msgs/s end-to-end latency workload still
gets each message dispatched at once."""
DISPATCH_RATE_TAU_S = 0.005
"""Time constant of :attr:`StoreServices.put_rate`: short, so coalescing follows the load
(a stream at 8,000 msgs/s counts as fast within 40 puts), long enough that a pair of puts
is not a stream."""
REPUT_SAFETY_S = 1.0
"""The reput loop looks for undispatched records at least this often (besides every put)."""
WARM_SAFETY_S = 1.0
"""The warm loop checks at least this often (besides when the reput loop finds the writer
within half a window of the prefaulted end)."""


class _Wakeup:
    """A level-triggered wakeup: ``set`` from the trio thread or any other thread."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self._owner_thread = threading.get_ident()

    def set(self) -> None:
        if threading.get_ident() == self._owner_thread:
            self._event.set()
        else:
            self._token.run_sync_soon(self._event.set)

    async def wait(self, seconds: float = math.inf) -> None:
        """Return once set (resetting it) or after ``seconds`` (default: no timer at all)."""
        event = self._event
        if event.is_set():  # set while the caller worked: no timer to arm
            await trio.lowlevel.checkpoint()
        elif seconds == math.inf:
            await event.wait()
        else:
            with trio.CancelScope(deadline=trio.current_time() + seconds):
                await event.wait()
        self._event = trio.Event()


@dataclasses.dataclass(slots=True)
class _FlushWaiter:
    """A put waiting for the commitlog to be durable up to ``offset``."""

    offset: int
    deadline: float
    """trio time after which it is answered as not flushed (syncFlushTimeout)."""
    done: Callable[[bool], None]
    """Called once, on the event loop, with whether the flush covered it; must not raise."""


class StoreServices:
    """Runs a :class:`MessageStore`'s background loops and offers awaitable puts."""

    def __init__(
        self,
        store: MessageStore,
        *,
        dispatch_coalesce_s: float = 0.001,
        dispatch_coalesce_rate: float = DISPATCH_COALESCE_RATE,
    ) -> None:
        self.store = store
        self.dispatch_coalesce_s = dispatch_coalesce_s
        self.dispatch_coalesce_rate = dispatch_coalesce_rate
        self.put_rate = 0.0
        """Dispatched messages per second over the last few ms (see :meth:`_observe_rate`);
        decides dispatch coalescing. Operators see :mod:`broker.stats` instead."""
        self._flushes = 0
        self._flush_seconds = 0.0
        self.config = store.config
        self._sync_flush = store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._flush_waiters: list[_FlushWaiter] = []  # deadlines in order: appended as made
        self._reput_wakeup: _Wakeup | None = None
        self._flush_wakeup: _Wakeup | None = None
        self._group_commit: GroupCommitWorker | None = None  # SYNC_FLUSH, while running
        self._warm_wakeup: _Wakeup | None = None  # set while the warm loop runs
        self.started = False

    # -- the awaitable put -----------------------------------------------------------------
    async def put_messages(self, msgs: Sequence[MessageRecord]) -> PutResult:
        """Store ``msgs``; with SYNC_FLUSH, return only once a flush covers them.

        Many concurrent puts share one flush (group commit). A flush that takes longer than
        ``syncFlushTimeout`` turns PUT_OK into FLUSH_DISK_TIMEOUT (the message is stored).
        Always a schedule point, so a task putting in a loop with ASYNC_FLUSH lets dispatch,
        flushing and everything else run; not a cancellation point once the messages are
        stored, so a stored put's result is never lost to a cancellation.
        """
        put = self.put_messages_now(msgs)
        if isinstance(put, PutResult):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return put
        return await put

    def put_messages_now(self, msgs: Sequence[MessageRecord]) -> PutResult | Awaitable[PutResult]:
        """:meth:`put_messages`, as its result at once when there is nothing to wait for
        (ASYNC_FLUSH, or a put that failed), else as an awaitable of it (SYNC_FLUSH)."""
        result = self.store.put_messages(msgs)
        if not self._sync_flush or result.status is not PutStatus.PUT_OK:
            return result
        return self._when_flushed(result)

    def put_messages_deferred(
        self, msgs: Sequence[MessageRecord]
    ) -> PutResult | Deferred[PutResult]:
        """:meth:`put_messages_now`, but a put that must wait for its flush (SYNC_FLUSH) comes
        as a :class:`~common.deferred.Deferred` of its result, resolved on the event loop when
        a flush covers it (or FLUSH_DISK_TIMEOUT after syncFlushTimeout): no task per put."""
        result = self.store.put_messages(msgs)
        if not self._sync_flush or result.status is not PutStatus.PUT_OK:
            return result
        if self.store.flushed_offset >= result.end_offset:
            return result
        if not self.started:  # nothing would flush it, nor time it out
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
            return result
        pending: Deferred[PutResult] = Deferred()

        def flushed(ok: bool) -> None:
            if not ok:
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
            pending.resolve(result)

        self._await_flush(result.end_offset, flushed)
        return pending

    async def _when_flushed(self, result: PutResult) -> PutResult:
        # shielded (wait_flushed is bounded by syncFlushTimeout): the messages are stored, so
        # a broker that begins to stop still answers the put once the flush covers it
        with trio.CancelScope(shield=True):
            flushed = await self.wait_flushed(result.end_offset)
        if not flushed:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
        return result

    async def put_message(self, msg: MessageRecord) -> PutResult:
        """Store one message; see :meth:`put_messages`."""
        return await self.put_messages((msg,))

    async def wait_flushed(self, offset: int) -> bool:
        """Wait until the commitlog is durable up to ``offset``; False on syncFlushTimeout."""
        if self.store.flushed_offset >= offset:
            return True
        event = trio.Event()
        self._await_flush(offset, lambda _: event.set())
        with trio.move_on_after(self.config.sync_flush_timeout / 1000):
            await event.wait()  # set once flushed, or when flushing failed
        return self.store.flushed_offset >= offset

    def _await_flush(self, offset: int, done: Callable[[bool], None]) -> None:
        """Add a flush waiter for ``offset`` and ask for the flush."""
        deadline = trio.current_time() + self.config.sync_flush_timeout / 1000
        self._flush_waiters.append(_FlushWaiter(offset, deadline, done))
        if self._group_commit is not None:
            self._group_commit.request(offset)
        elif self._flush_wakeup is not None:
            self._flush_wakeup.set()

    @property
    def commitlog_flushes(self) -> int:
        """Commitlog flushes that made something durable (with SYNC_FLUSH, group commits)."""
        worker = self._group_commit
        return self._flushes + (worker.flushes if worker is not None else 0)

    @property
    def commitlog_flush_seconds(self) -> float:
        """Their total time (with ASYNC_FLUSH, handing each to a worker thread and back)."""
        worker = self._group_commit
        return self._flush_seconds + (worker.flush_seconds if worker is not None else 0.0)

    # -- the task tree ---------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run every loop until cancelled."""
        self._reput_wakeup = _Wakeup()
        self._flush_wakeup = _Wakeup()
        self.store.put_listener = self._reput_wakeup.set
        self.store.retention_stop.clear()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reput_loop)
                nursery.start_soon(self._reput_safety_tick)
                nursery.start_soon(self._flush_commitlog_loop)
                if self._sync_flush:
                    nursery.start_soon(self._expire_flush_waiters)
                nursery.start_soon(self._flush_logics_loop)
                nursery.start_soon(self._clean_loop)
                nursery.start_soon(_set_when_cancelled, self.store.retention_stop)
                nursery.start_soon(self._warm_loop)
                self.started = True
                task_status.started()
        finally:
            self.store.put_listener = None
            self.started = False
            self._release_waiters()

    async def _reput_loop(self) -> None:
        assert self._reput_wakeup is not None
        last_round = trio.current_time()
        try:
            while True:
                dispatched = 0
                try:
                    # a full batch means a backlog: keep going; otherwise what arrives during
                    # the checkpoint waits for the next round (and gathers with its peers)
                    while (n := self.store.dispatch_pending(DISPATCH_BATCH)) >= DISPATCH_BATCH:
                        dispatched += n
                        await trio.lowlevel.checkpoint()
                    dispatched += n
                except MappedFileCreateError as exc:
                    log.error("dispatch stalled, retrying in %.0fs: %s", DISK_FULL_RETRY_S, exc)
                    await trio.sleep(DISK_FULL_RETRY_S)
                    continue
                now = trio.current_time()
                self._observe_rate(dispatched, now - last_round)
                last_round = now
                self._wake_warming()
                await self._reput_wakeup.wait()  # every put sets it, and the safety tick
                await self._coalesce(last_round)
        finally:
            with trio.move_on_after(SHUTDOWN_DRAIN_S, shield=True):
                try:
                    while self.store.dispatch_pending():
                        await trio.lowlevel.checkpoint()
                except MappedFileCreateError:
                    log.error("shutdown with undispatched records; recovery will redo them")

    async def _reput_safety_tick(self) -> None:
        """Wake the reput loop every ``REPUT_SAFETY_S`` whatever happens (one timer for the
        loop's life instead of one per dispatch round)."""
        assert self._reput_wakeup is not None
        while True:
            await trio.sleep(REPUT_SAFETY_S)
            self._reput_wakeup.set()

    def _wake_warming(self) -> None:
        """Wake the warm loop if the writer came within half a window of the warmed end."""
        warm = self._warm_wakeup
        window = self.config.warm_ahead_size_commit_log
        if warm is not None and self.store.commitlog.needs_warming(window):
            warm.set()

    def _observe_rate(self, messages: int, seconds: float) -> None:
        """Fold one dispatch round (``messages`` after ``seconds``) into :attr:`put_rate`.

        An exponentially decaying count (time constant ``DISPATCH_RATE_TAU_S``): it decays
        with time, not per round, so two puts a few microseconds apart on an idle store count
        as a few hundred a second, not as tens of thousands, while a real stream reaches its
        rate within a few time constants."""
        self.put_rate = (
            self.put_rate * math.exp(-max(seconds, 0.0) / DISPATCH_RATE_TAU_S)
            + messages / DISPATCH_RATE_TAU_S
        )

    async def _coalesce(self, last_round: float) -> None:
        """Above ``dispatch_coalesce_rate`` messages/s, let puts gather before dispatching.

        Below that rate each put is dispatched at once (a consumer sees it at once). Above it,
        dispatch runs at most every ``dispatch_coalesce_s``, so a stream is indexed in
        batches, which costs far less per message. (A timer under 1 ms becomes 1 ms in epoll
        when nothing else runs, hence the rate test rather than a short sleep every time.)
        """
        if self.put_rate < self.dispatch_coalesce_rate:
            return
        wait = self.dispatch_coalesce_s - (trio.current_time() - last_round)
        if wait > 0:
            await trio.sleep(wait)

    async def _flush_commitlog_loop(self) -> None:
        """ASYNC_FLUSH: flush every flushIntervalCommitLog (or when woken) in a worker thread.
        SYNC_FLUSH: run the group-commit thread instead."""
        assert self._flush_wakeup is not None
        interval = self.config.flush_interval_commit_log / 1000
        if self._sync_flush:
            await self._group_commit_loop(interval)
            return
        while True:
            await self._flush_wakeup.wait(interval)
            started = time.perf_counter()
            before = self.store.flushed_offset
            try:
                flushed = await trio.to_thread.run_sync(self.store.flush_commitlog)
            except OSError as exc:
                self._flush_failed(exc)
                return
            if flushed > before:
                self._flush_seconds += time.perf_counter() - started
                self._flushes += 1
            self._wake_waiters(flushed)

    async def _group_commit_loop(self, interval: float) -> None:
        """Run a :class:`GroupCommitWorker` in a worker thread until cancelled.

        Flush rounds follow each other inside that thread; each hands its offset back to the
        event loop (``run_sync_soon``), where the covered waiters are woken. Cancellation
        stops the worker after the flush under way.
        """
        token = trio.lowlevel.current_trio_token()

        def on_flushed(offset: int) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._wake_waiters, offset)

        worker = GroupCommitWorker(
            self.store.flush_commitlog,
            on_flushed,
            flushed=self.store.flushed_offset,
            interval_s=interval,
        )
        self._group_commit = worker
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_stop_when_cancelled, worker)
                await trio.to_thread.run_sync(worker.run)
                nursery.cancel_scope.cancel()
        finally:
            self._group_commit = None
            self._flushes += worker.flushes
            self._flush_seconds += worker.flush_seconds
        if worker.error is not None:
            self._flush_failed(worker.error)

    def _flush_failed(self, exc: OSError) -> None:
        """A commitlog flush failed: refuse puts from now on and answer every waiter (not
        flushed: FLUSH_DISK_TIMEOUT). Reads go on; a restart recovers and verifies the log."""
        log.error("commitlog flush failed, refusing writes until restarted: %s", exc)
        self.store.flush_error = str(exc)
        self._release_waiters()

    def _wake_waiters(self, flushed: int) -> None:
        """Answer the waiters that the flush up to ``flushed`` covers (on the event loop)."""
        waiters = self._flush_waiters
        if not waiters:
            return
        still: list[_FlushWaiter] = []
        for waiter in waiters:
            if waiter.offset <= flushed:
                _answer(waiter, True)
            else:
                still.append(waiter)
        self._flush_waiters = still

    async def _expire_flush_waiters(self) -> None:
        """Answer the waiters whose syncFlushTimeout passed (SYNC_FLUSH), checking a few times
        per timeout: one timer for the loop's life instead of one per put."""
        timeout = self.config.sync_flush_timeout / 1000
        tick = max(timeout / 4, 0.001)
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            waiters = self._flush_waiters
            expired = 0
            while expired < len(waiters) and waiters[expired].deadline <= now:
                expired += 1
            if expired:
                self._flush_waiters = waiters[expired:]
                flushed = self.store.flushed_offset
                for waiter in waiters[:expired]:
                    _answer(waiter, waiter.offset <= flushed)

    def _release_waiters(self) -> None:
        """Answer every waiter now: flushed or not (stopping, or flushing failed)."""
        waiters, self._flush_waiters = self._flush_waiters, []
        flushed = self.store.flushed_offset
        for waiter in waiters:
            _answer(waiter, waiter.offset <= flushed)

    async def _flush_logics_loop(self) -> None:
        """Flush consume queues, index and checkpoint every period. A failure (EIO, no
        descriptor left) is logged and tried again next period: what they hold is rebuilt
        from the commitlog by recovery, so it does not stop the broker or its writes."""
        interval = self.config.flush_interval_consume_queue / 1000
        while True:
            await trio.sleep(interval)
            try:
                await trio.to_thread.run_sync(self.store.flush_logics)
            except OSError as exc:
                log.error("flushing consume queues, index and checkpoint failed: %s", exc)

    async def _warm_loop(self) -> None:
        """Keep the commitlog prefaulted ahead of the writer (ASYNC_FLUSH; see store.prefault).

        Checked when the reput loop finds the writer within half a window of the warmed end
        (so not on a timer while puts come) and every ``WARM_SAFETY_S``; the prefault itself
        runs in a worker thread. Not with SYNC_FLUSH: every flush there would write the
        prefaulted zero pages once more.
        """
        window = self.config.warm_ahead_size_commit_log
        if window <= 0 or self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            return
        log_ = self.store.commitlog
        wakeup = self._warm_wakeup = _Wakeup()
        try:
            while True:
                if log_.needs_warming(window) and not await trio.to_thread.run_sync(
                    log_.warm_ahead, window
                ):
                    log.info("prefaulting the commitlog is not supported here; not warming it")
                    return
                await wakeup.wait(WARM_SAFETY_S)
        finally:
            self._warm_wakeup = None

    async def _clean_loop(self) -> None:
        """Run a retention pass every ``cleanResourceInterval``. A pass that fails (a file
        that cannot be unlinked: a read-only or immutable file system, EIO) is logged and
        tried again next period, as RocketMQ's CleanCommitLogService does: the broker goes on
        serving, and what the pass did before the failure stands."""
        interval = self.config.clean_resource_interval / 1000
        while True:
            await trio.sleep(interval)
            try:
                deleted = await trio.to_thread.run_sync(self.store.clean_expired_files)
            except OSError as exc:
                log.error("retention pass failed, trying again next period: %s", exc)
                continue
            if deleted:
                log.info("retention removed %d file(s)", deleted)


def _answer(waiter: _FlushWaiter, flushed: bool) -> None:
    """Call a waiter's ``done``; an exception there is logged, never raised to the caller
    (often the group commit's hand-back on the event loop, where it would be fatal)."""
    try:
        waiter.done(flushed)
    except Exception:
        log.exception("answering a put waiting for its flush failed")


async def _stop_when_cancelled(worker: GroupCommitWorker) -> None:
    """Sleep until cancelled, then stop ``worker`` (its thread ignores trio's cancellation)."""
    try:
        await trio.sleep_forever()
    finally:
        worker.stop()


async def _set_when_cancelled(event: threading.Event) -> None:
    """Sleep until cancelled, then set ``event`` (a worker thread's pause that trio's
    cancellation cannot reach: the retention pass between two deletions)."""
    try:
        await trio.sleep_forever()
    finally:
        event.set()
