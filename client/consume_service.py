"""Running a push consumer's handler over pulled messages (RocketMQ's
``ConsumeMessageConcurrentlyService`` and ``ConsumeMessageOrderlyService``).

Concurrent rules:

- Pulled messages are cut into batches of ``consume_message_batch_max_size`` and queued to a
  fixed pool of ``consume_thread_max`` worker tasks. A sync handler runs in a worker thread
  (it may block); an ``async def`` handler runs in the loop.
- ``SUCCESS`` acknowledges the whole batch (ackIndex = last); ``RECONSUME_LATER`` or an
  exception acknowledges nothing (ackIndex = -1). In ``CLUSTERING`` each unacknowledged
  message is sent back to the broker (``CONSUMER_SEND_MSG_BACK``: the group's retry topic at
  delay level ``3 + reconsume times``, or the dead-letter queue after ``max_reconsume_times``;
  when its broker fails, the message goes to the retry topic on another broker:
  :mod:`client.send_back`); one that neither stored is consumed again here after
  ``RETRY_LOCALLY_AFTER_S``. In
  ``BROADCASTING`` failures are only logged, as in RocketMQ.
- Then the messages leave the process queue and the queue's commit offset (the smallest offset
  still in flight) is recorded.
- ``consume_timeout`` (RocketMQ's ``cleanExpireMsg``): a handler call that began longer ago
  has its messages sent back at delay level 3 (:meth:`ConcurrentService.clean_expired`); they
  leave the process queue once the broker took them, the rest of their pull goes to another
  worker, and the late call's outcome is ignored. A drop or a close while that take-over
  sends messages back still counts the pull's batches that succeeded (the late one too, if it
  returned SUCCESS meanwhile) before the offset is persisted.

Orderly rules:

- One task per queue consumes its messages one batch at a time in offset order, and only while
  the queue is locked to this client at the broker.
- ``SUCCESS`` commits the batch. A failure puts the batch back and retries it after
  ``suspend_current_queue_ms`` (clamped to 10 ms .. 30 s, as RocketMQ); a message that fails
  again after ``max_reconsume_times`` retries (``1 + max`` tries; ``-1``, the default, retries
  for ever, as in RocketMQ) goes to the dead-letter queue with its count of tries, and the
  queue moves on. Each message of a batch is judged on its own: the others stay and retry.
- Before a message reaches the handler, a message from the retry topic gets back its original
  topic (``RETRY_TOPIC`` property).

Figures (RocketMQ's ``incConsumeRT`` / ``incConsumeOKTPS`` / ``incConsumeFailedTPS``, under the
queue's topic): each pull's handler calls add their time and count once they returned, and,
unless the queue was dropped meanwhile, its acknowledged and failed messages; an orderly batch
counts the same way. The time is taken around each call by whoever runs it (a worker thread
or the loop) into the pull's :class:`HandlerTime`, read in the loop after they all returned.
- A handler call in progress is never cancelled with its queue (a rebalance, an offset reset or
  a stall that drops the queue lets it return, and the broker lock is kept until then), an
  ``async def`` handler's as a thread's; only a close that gives up on it
  (:meth:`Consumption.abandon_threads`) cancels an ``async def`` one.
"""

from __future__ import annotations

import enum
import functools
import inspect
import itertools
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import trio

from client.consumer_stats import ConsumerStatsManager
from client.message import MessageQueue, ReceivedMessage
from common.message import MessageConst
from common.topic import RETRY_GROUP_TOPIC_PREFIX

if TYPE_CHECKING:
    from client.process_queue import ProcessQueue

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_LOCALLY_AFTER_S = 5.0
"""A message whose send-back (and its fallback) failed is consumed again here after this long."""
EXPIRED_DELAY_LEVEL = 3
"""The delay level a message consumed for longer than ``consume_timeout`` is sent back at
(RocketMQ's ``cleanExpiredMsg``: 10 s with the default levels)."""


def is_async_handler(handler: Handler) -> bool:
    """True for an ``async def`` handler (it runs in the loop, not in a worker thread): a
    coroutine function, or an object whose ``__call__`` is one. Cached, except for an
    unhashable handler (a dataclass instance)."""
    try:
        return _is_async_cached(handler)
    except TypeError:  # unhashable: not cached
        return _is_coroutine_callable(handler)


@functools.lru_cache(maxsize=256)
def _is_async_cached(handler: Handler) -> bool:
    return _is_coroutine_callable(handler)


def _is_coroutine_callable(handler: Handler) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        type(handler).__call__
    )


def _result_in_thread(result: object) -> object:
    """In a handler thread: a plain function's result; an awaitable one (it returned a
    coroutine) is awaited in the loop, as :meth:`Consumption._call_one` does."""
    if inspect.isawaitable(result):
        return trio.from_thread.run(_awaited, result)
    return result


def _now_ms() -> int:
    """The push consumer's clock (trio's, in ms), as its process queues' times are kept."""
    return int(trio.current_time() * 1000)


class ConsumeResult(enum.Enum):
    """What a handler returns (RocketMQ's ``ConsumeConcurrentlyStatus``; for orderly
    consumption ``RECONSUME_LATER`` means ``SUSPEND_CURRENT_QUEUE_A_MOMENT``)."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Handler: TypeAlias = Callable[
    [list[ReceivedMessage]], "ConsumeResult | Awaitable[ConsumeResult] | None"
]
"""``handler(msgs) -> ConsumeResult`` (sync or ``async def``); None counts as SUCCESS. An
object whose ``__call__`` is ``async def`` runs in the loop like an ``async def`` function; an
awaitable that a plain function returns is awaited in the loop."""


@dataclass(eq=False)
class HandlerTime:
    """How long the handler calls of one pull (or orderly batch) took: added to by the thread
    or task that runs them, one call after another, and read once they all returned."""

    seconds: float = 0.0
    calls: int = 0

    def add(self, began: float) -> None:
        """One call that began at ``began`` (``time.monotonic()``) returned now."""
        self.seconds += time.monotonic() - began
        self.calls += 1

    @property
    def ms(self) -> int:
        """The calls' time in whole milliseconds."""
        return round(self.seconds * 1000)


@dataclass(eq=False)
class QueueSlot:
    """What the consume side needs of one assigned queue."""

    mq: MessageQueue
    pq: ProcessQueue
    wakeup: trio.Event
    consuming: trio.Lock


def restore_retry_topic(msgs: Iterable[ReceivedMessage], group: str) -> None:
    """Give messages from ``%RETRY%<group>`` their original topic back (``resetRetryTopic``)."""
    retry = RETRY_GROUP_TOPIC_PREFIX + group
    for m in msgs:
        if m.topic == retry:  # the topic first: it spares other messages decoding properties
            original = m.properties.get(MessageConst.RETRY_TOPIC)
            if original:
                m.topic = original


class Consumption:
    """Calls the handler and settles the outcome; shared by both services."""

    def __init__(
        self,
        handler_of: Callable[[str], Handler | None],
        send_back: Callable[[ReceivedMessage, int], Awaitable[bool]],
        record_offset: Callable[[QueueSlot, int], None],
        *,
        group: str,
        consume_thread_max: int,
        clustering: bool,
        max_reconsume_times: int,
        stats: ConsumerStatsManager | None = None,
    ) -> None:
        self.handler_of = handler_of
        self.stats = stats
        self.send_back = send_back
        self.record_offset = record_offset
        self.group = group
        self.clustering = clustering
        self.max_reconsume_times = max_reconsume_times
        self.limiter = trio.CapacityLimiter(consume_thread_max)
        self._thread_calls: dict[trio.CancelScope, int | None] = {}
        """Each handler call running in a worker thread, or an orderly ``async def`` one: its
        scope (:meth:`abandon_threads`) and its thread's ident (None until the thread runs;
        always None in the loop)."""
        self._threads_returned = trio.Event()

    async def wait_threads_returned(self) -> None:
        """Wait until no handler call runs in a worker thread (nor an orderly ``async def``
        one)."""
        while self._thread_calls:
            self._threads_returned = trio.Event()
            await self._threads_returned.wait()

    def abandon_threads(self, thread_id: int | None = None) -> int:
        """Closing: stop waiting for the handler calls running in worker threads (only the one
        in thread ``thread_id``, if given: a handler that closes its own consumer). Each
        thread runs on alone and its outcome is dropped: its messages are not acknowledged
        (they are consumed again later). An orderly ``async def`` call (no thread) is
        cancelled, with the same outcome. Returns how many were abandoned."""
        abandoned = 0
        for scope, ident in list(self._thread_calls.items()):
            if thread_id is None or ident == thread_id:
                scope.cancel()
                abandoned += 1
        return abandoned

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread (at most ``consume_thread_max`` at once).

        A cancellation waits for it to return (its outcome is settled first, as before); only
        :meth:`abandon_threads` stops the wait, and then :class:`HandlerAbandoned` is raised."""
        with self._abandonable() as scope, trio.CancelScope(shield=True), scope:
            return await trio.to_thread.run_sync(
                self._tracked, scope, fn, *args, limiter=self.limiter, abandon_on_cancel=True
            )
        raise HandlerAbandoned

    @contextmanager
    def _abandonable(self) -> Iterator[trio.CancelScope]:
        """A scope for one handler call, listed for :meth:`abandon_threads` until it ends."""
        scope = trio.CancelScope()
        self._thread_calls[scope] = None
        try:
            yield scope
        finally:
            del self._thread_calls[scope]
            if not self._thread_calls:
                self._threads_returned.set()

    async def _await_async(
        self, handler: Handler, msgs: list[ReceivedMessage], shielded: bool
    ) -> object:
        """``handler(msgs)``, awaited, in the loop. ``shielded`` (orderly): not cancelled with
        the caller (a dropped queue's call returns, as a thread's); only :meth:`abandon_threads`
        cancels it, and then :class:`HandlerAbandoned` is raised."""
        if not shielded:
            return await _awaited(handler(msgs))
        with self._abandonable() as scope, trio.CancelScope(shield=True), scope:
            return await _awaited(handler(msgs))
        raise HandlerAbandoned

    def _tracked(self, scope: trio.CancelScope, fn: Callable[..., T], *args: Any) -> T:
        """In the worker thread: note the thread's ident for ``scope``'s call, then call."""
        self._thread_calls[scope] = threading.get_ident()  # an existing key: no resize
        return fn(*args)

    def _plan(
        self, msgs: list[ReceivedMessage]
    ) -> list[tuple[Handler | None, list[ReceivedMessage]]]:
        """``msgs`` split by topic, each with its handler (a retried message goes to its
        original topic's handler; None: the topic is no longer subscribed)."""
        topic = msgs[0].topic
        if all(m.topic == topic for m in msgs):  # the usual case: one topic, one handler
            return [(self.handler_of(topic), msgs)]
        by_topic: dict[str, list[ReceivedMessage]] = {}
        for m in msgs:
            by_topic.setdefault(m.topic, []).append(m)
        return [(self.handler_of(t), group) for t, group in by_topic.items()]

    def count(
        self,
        slot: QueueSlot,
        timing: HandlerTime,
        batches: Sequence[Sequence[ReceivedMessage]],
        results: Sequence[ConsumeResult],
    ) -> None:
        """Add the handler calls' time and count, and (unless the queue was dropped) how many
        of the batches' messages were acknowledged or not, to the figures (module rules)."""
        if self.stats is None:
            return
        ok = failed = 0
        if not slot.pq.dropped:
            for msgs, result in zip(batches, results, strict=False):
                if result is ConsumeResult.SUCCESS:
                    ok += len(msgs)
                else:
                    failed += len(msgs)
        self.stats.inc_consume(self.group, slot.mq.topic, timing.ms, timing.calls, ok, failed)

    async def call(self, slot: QueueSlot, msgs: list[ReceivedMessage]) -> ConsumeResult:
        """Orderly: run the handlers for ``msgs``; SUCCESS only if every call succeeded.
        :class:`HandlerAbandoned` when none ran (the queue was dropped while ``msgs`` waited
        for a worker thread) or a close abandoned the call. A cancellation does not stop a
        call that began: it returns first (``async def`` handlers included)."""
        timing = HandlerTime()
        results = await self.call_batches(slot, [msgs], shield_async=True, timing=timing)
        if not results:
            raise HandlerAbandoned
        self.count(slot, timing, [msgs], results)
        return results[0]

    async def call_batches(
        self,
        slot: QueueSlot,
        batches: list[list[ReceivedMessage]],
        starting: Callable[[int], bool] | None = None,
        results: list[ConsumeResult] | None = None,
        *,
        shield_async: bool = False,
        timing: HandlerTime | None = None,
    ) -> list[ConsumeResult]:
        """Run the handlers for each batch in turn; one result per batch that ran (appended
        to ``results`` as each batch ends, when given: a closing consumer counts the batches
        that ended while a later one still runs). ``shield_async``: an ``async def``
        handler's call is not cancelled with the caller (see :meth:`_await_async`). Each
        batch's time is added to ``timing``, when given.

        ``starting(i)`` is asked just before batch ``i`` starts (in the thread that runs the
        handlers, so after any wait for one); False stops there, so fewer results than batches
        means the rest did not run (none at all: the queue was dropped while the pull waited
        for a worker thread, as RocketMQ's ``ConsumeRequest`` returns at once for a dropped
        process queue). By default a batch starts only while the queue is not dropped (a
        rebalance, an offset reset or a close took it: RocketMQ checks before each batch).
        When every handler involved is a plain function, all batches run in ONE worker-thread
        hop (the hop costs more than a small handler); ``async def`` handlers run in the loop.
        """
        restore_retry_topic(itertools.chain.from_iterable(batches), self.group)
        results = [] if results is None else results
        timing = HandlerTime() if timing is None else timing
        pq = slot.pq
        go: Callable[[int], bool] = (lambda i: not pq.dropped) if starting is None else starting
        topic = batches[0][0].topic if batches and batches[0] else None
        if topic is not None and all(m.topic == topic for b in batches for m in b):
            # the usual case: one topic, so one handler for every batch of the pull
            handler = self.handler_of(topic)
            if handler is not None and is_async_handler(handler):
                return await self._call_async(
                    slot, handler, batches, go, results, timing, shield_async
                )
            plans = [[(handler, b)] for b in batches]
        else:
            plans = [self._plan(b) for b in batches]
        handlers = [h for plan in plans for h, _ in plan if h is not None]
        if handlers and not any(is_async_handler(h) for h in handlers):
            return await self._in_thread(self._run_plans_sync, slot, plans, go, results, timing)
        for i, plan in enumerate(plans):
            if not go(i):
                break
            began = time.monotonic()
            results.append(await self._run_plan(slot, plan, shield_async))
            timing.add(began)
        return results

    async def _run_plan(
        self,
        slot: QueueSlot,
        plan: list[tuple[Handler | None, list[ReceivedMessage]]],
        shield_async: bool,
    ) -> ConsumeResult:
        outcome = ConsumeResult.SUCCESS
        for handler, msgs in plan:
            if handler is None:
                log.error("no handler for topic %s any more: reconsuming later", msgs[0].topic)
                outcome = ConsumeResult.RECONSUME_LATER
            elif (
                await self._call_one(slot, handler, msgs, shield_async) is not ConsumeResult.SUCCESS
            ):
                outcome = ConsumeResult.RECONSUME_LATER
        return outcome

    def _run_plans_sync(
        self,
        slot: QueueSlot,
        plans: list[list[tuple[Handler | None, list[ReceivedMessage]]]],
        starting: Callable[[int], bool],
        results: list[ConsumeResult],
        timing: HandlerTime,
    ) -> list[ConsumeResult]:
        """In a worker thread: every batch's plain-function handlers, in order, while
        ``starting(i)`` (it must not need the loop); each outcome is appended to ``results``
        as its batch ends, and its time added to ``timing``."""
        for i, plan in enumerate(plans):
            if not starting(i):
                break
            began = time.monotonic()
            outcome = ConsumeResult.SUCCESS
            for handler, msgs in plan:
                if handler is None:
                    log.error("no handler for topic %s any more: reconsuming later", msgs[0].topic)
                    outcome = ConsumeResult.RECONSUME_LATER
                    continue
                try:
                    result = _checked(_result_in_thread(handler(msgs)))
                except Exception:
                    log.exception("handler failed on %d message(s) of %s", len(msgs), slot.mq)
                    result = ConsumeResult.RECONSUME_LATER
                if result is not ConsumeResult.SUCCESS:
                    outcome = ConsumeResult.RECONSUME_LATER
            timing.add(began)
            results.append(outcome)
        return results

    async def _call_one(
        self, slot: QueueSlot, handler: Handler, msgs: list[ReceivedMessage], shield_async: bool
    ) -> ConsumeResult:
        """Run one handler; an exception or a bad return value means RECONSUME_LATER."""
        if is_async_handler(handler):
            (outcome,) = await self._call_async(
                slot, handler, [msgs], lambda i: True, [], HandlerTime(), shield_async
            )
            return outcome
        result: ConsumeResult | Awaitable[ConsumeResult] | None
        try:
            result = await self._in_thread(handler, msgs)
            if inspect.isawaitable(result):
                result = await result
        except HandlerAbandoned:
            raise
        except Exception:
            log.exception("handler failed on %d message(s) of %s", len(msgs), slot.mq)
            return ConsumeResult.RECONSUME_LATER
        return _checked(result)

    async def _call_async(
        self,
        slot: QueueSlot,
        handler: Handler,
        batches: list[list[ReceivedMessage]],
        starting: Callable[[int], bool],
        results: list[ConsumeResult],
        timing: HandlerTime,
        shielded: bool = False,
    ) -> list[ConsumeResult]:
        """Run an ``async def`` handler in the loop on each batch in turn (one result per
        batch, appended to ``results``, while ``starting(i)``; its time added to
        ``timing``); an exception or a bad return value means RECONSUME_LATER.
        ``shielded``: see :meth:`_await_async`."""
        for i, msgs in enumerate(batches):
            if not starting(i):
                break
            began = time.monotonic()
            try:
                result = await self._await_async(handler, msgs, shielded)
            except HandlerAbandoned:
                raise
            except Exception:
                log.exception("handler failed on %d message(s) of %s", len(msgs), slot.mq)
                results.append(ConsumeResult.RECONSUME_LATER)
                continue
            finally:
                timing.add(began)
            results.append(_checked(result))
        return results


class HandlerAbandoned(Exception):
    """A handler call the closing consumer stopped waiting for, or one never made (its queue
    dropped while it waited for a worker thread): its messages stay unsettled."""


async def _awaited(result: object) -> object:
    """A handler's return value, awaited when it is awaitable."""
    if inspect.isawaitable(result):
        return await result
    return result


def _checked(result: object) -> ConsumeResult:
    """A handler's return value as a ConsumeResult (None: SUCCESS; anything else odd:
    RECONSUME_LATER, logged)."""
    if result is None:
        return ConsumeResult.SUCCESS
    if not isinstance(result, ConsumeResult):
        log.error("handler returned %r, not a ConsumeResult: reconsuming later", result)
        return ConsumeResult.RECONSUME_LATER
    return result


@dataclass(eq=False)
class _PullInFlight:
    """One pull's messages being consumed: its batches, the results of those that ended, and
    when the running one began (``consume_timeout``)."""

    slot: QueueSlot
    batches: list[list[ReceivedMessage]]
    results: list[ConsumeResult]
    clock: trio.abc.Clock
    """The loop's clock (read from the handlers' thread too)."""
    began: int = -1
    """The batch that began last."""
    began_at: float = 0.0
    """When it began (RocketMQ's ``CONSUME_START_TIME``), on :attr:`clock`."""
    timed_out: bool = False
    """The running batch outlived ``consume_timeout``: the pull was settled without it (see
    :meth:`ConcurrentService.clean_expired`); its worker settles nothing more."""
    stuck: list[ReceivedMessage] = field(default_factory=list)
    """Timed out: the running batch's messages not yet sent back."""
    gate: threading.Lock = field(default_factory=threading.Lock)
    """Orders a batch's start against its time-out (they run in different threads)."""

    def starting(self, i: int, halt: bool) -> bool:
        """Just before batch ``i`` starts: False stops the pull there (``halt``, or a time-out
        of an earlier batch), else note when it began."""
        with self.gate:
            if halt or self.timed_out:
                return False
            self.began, self.began_at = i, self.clock.current_time()
            return True

    def time_out(self, began_before: float) -> int | None:
        """Mark the pull timed out if its running batch began before ``began_before``; that
        batch's index (None: no batch runs, or it began later)."""
        with self.gate:
            running = self.began
            if self.timed_out or running < 0 or len(self.results) > running:
                return None
            if self.began_at >= began_before:
                return None
            self.timed_out = True
            return running


class ConcurrentService:
    """Worker pool consuming batches of any queue, in any order."""

    def __init__(self, consumption: Consumption, batch_max: int, workers: int) -> None:
        self.c = consumption
        self.batch_max = batch_max
        self.workers = workers
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self._in_flight = 0
        self._pulls: set[_PullInFlight] = set()
        self._timed_out: set[_PullInFlight] = set()
        """Timed-out pulls being taken over: from :meth:`_take_over` until their late batch is
        all sent back (the late call may have returned and left :attr:`_pulls` meanwhile)."""
        self._quiet = trio.Event()
        self._send, self._receive = trio.open_memory_channel[
            tuple[QueueSlot, list[ReceivedMessage]]
        ](math.inf)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The worker pool; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for _ in range(self.workers):
                nursery.start_soon(self._worker)
            task_status.started()

    def submit(self, slot: QueueSlot, msgs: Sequence[ReceivedMessage]) -> None:
        """Queue freshly pulled messages for consumption.

        One pull's messages (at most ``pull_batch_size``) go to one worker, which hands them to
        the handler ``batch_max`` at a time: workers still spread over queues and pulls, and
        the hand-off costs once per pull instead of once per message.
        """
        if msgs:
            self._send.send_nowait((slot, list(msgs)))

    async def drain(self) -> None:
        """Closing: start no more pulled messages (they stay in their process queues, so
        their offsets do not advance) and wait until the ones being consumed have settled."""
        self._stopping = True
        while self._in_flight:
            self._quiet = trio.Event()
            await self._quiet.wait()

    def count_finished_batches(self, slot: QueueSlot | None = None) -> None:
        """Closing, or dropping ``slot``'s queue, before the offsets are persisted: the
        batches of the pulls still being consumed or settled (of ``slot`` only, if given),
        timed-out ones being taken over included, whose handler already succeeded leave their
        process queues and count (the batch still running, and any that failed, hold the
        offset back)."""
        for pull in self._pulls | self._timed_out:
            if slot is None or pull.slot is slot:
                self._count_finished(pull)

    def _count_finished(self, pull: _PullInFlight) -> None:
        """The pull's batches whose handler succeeded leave the process queue; its offset is
        recorded."""
        done = [
            m
            for msgs, result in zip(pull.batches, list(pull.results), strict=False)
            if result is ConsumeResult.SUCCESS
            for m in msgs
        ]
        offset = pull.slot.pq.remove(done) if done else -1
        if offset >= 0 and not pull.slot.pq.dropped:
            self.c.record_offset(pull.slot, offset)

    async def _worker(self) -> None:
        async for slot, pulled in self._receive:
            if slot.pq.dropped or self._stopping:
                continue
            self._in_flight += 1
            try:
                await self._consume(slot, pulled)
            except HandlerAbandoned:
                pass  # closing: the messages stay in the process queue, not acknowledged
            finally:
                self._in_flight -= 1
                if not self._in_flight:
                    self._quiet.set()

    async def _consume(self, slot: QueueSlot, pulled: list[ReceivedMessage]) -> None:
        """Consume one pull's messages and record the queue's offset."""
        batches = [pulled[i : i + self.batch_max] for i in range(0, len(pulled), self.batch_max)]
        pq = slot.pq
        pull = _PullInFlight(slot, batches, [], trio.lowlevel.current_clock())
        self._pulls.add(pull)
        timing = HandlerTime()
        try:
            # closing stops a pull between batches too: what ran counts, the rest is not done
            results = await self.c.call_batches(
                slot,
                batches,
                lambda i: pull.starting(i, pq.dropped or self._stopping),
                pull.results,
                timing=timing,
            )
            self.c.count(slot, timing, batches, results)
            if not pull.timed_out:  # else clean_expired settled it, without the late batch
                await self._settle(slot, batches, results)
        except HandlerAbandoned:
            self._count_finished(pull)  # the batches before the abandoned call count
            raise
        finally:
            # only now: a drop or a close while failed batches are sent back still counts
            # the pull's successful ones (a timed-out pull is counted through _timed_out
            # until its take-over ends)
            self._pulls.discard(pull)

    async def _settle(
        self,
        slot: QueueSlot,
        batches: list[list[ReceivedMessage]],
        results: list[ConsumeResult],
    ) -> None:
        """The batches that ran leave the process queue (a failed one once sent back) and the
        queue's offset is recorded; the batches after a drop or a close did not run (no
        result): they are not done."""
        done: list[ReceivedMessage] = []
        for msgs, result in zip(batches, results, strict=False):
            if result is ConsumeResult.SUCCESS:
                done.extend(msgs)
            else:
                done.extend(await self._settle_failed(slot, msgs))
        self._remove(slot, done)

    def _remove(self, slot: QueueSlot, done: list[ReceivedMessage]) -> None:
        """``done`` leaves the process queue (one removal and one offset update per call)."""
        offset = slot.pq.remove(done)
        slot.pq.last_consume_ms = _now_ms()  # RocketMQ's lastConsumeTimestamp (removeMessage)
        if offset >= 0 and not slot.pq.dropped:
            self.c.record_offset(slot, offset)

    async def clean_expired(self, consume_timeout_s: float) -> None:
        """Send back the messages whose handler call began more than ``consume_timeout_s``
        ago (RocketMQ's ``cleanExpireMsg``), so the queue's offset moves past them.

        Such a pull is settled without its late batch: the batches before it as usual, the
        ones after it go to another worker, and the late batch's messages go back to the
        broker at delay level ``EXPIRED_DELAY_LEVEL`` (retried through the group's retry
        topic) and leave the process queue once the broker took them; one whose send-back
        fails stays and is tried again next time. The late call's outcome is dropped when it
        returns (its messages were sent back, or are still to be)."""
        began_before = trio.current_time() - consume_timeout_s
        for pull in list(self._pulls):
            if self._stopping or pull.slot.pq.dropped:
                continue
            late = pull.time_out(began_before)
            if late is not None:
                await self._take_over(pull, late)
        for pull in list(self._timed_out):
            await self._send_stuck_back(pull)

    async def _take_over(self, pull: _PullInFlight, late: int) -> None:
        """Settle a timed-out pull without its batch ``late`` (still running), which
        :meth:`_send_stuck_back` sends back."""
        slot, batches = pull.slot, pull.batches
        log.warning(
            "%d message(s) of %s consumed for longer than the consume timeout: sending back",
            len(batches[late]),
            slot.mq,
        )
        pull.stuck = list(batches[late])
        self._timed_out.add(pull)
        self.submit(slot, [m for msgs in batches[late + 1 :] for m in msgs])
        await self._settle(slot, batches[:late], pull.results[:late])

    async def _send_stuck_back(self, pull: _PullInFlight) -> None:
        """Send back a timed-out batch's messages (broadcasting: drop them, as failures); the
        ones the broker took leave the process queue. Ones the late call consumed after all
        simply leave."""
        slot = pull.slot
        late = pull.began
        sent: list[ReceivedMessage] = []
        if slot.pq.dropped:
            pull.stuck.clear()
        elif len(pull.results) > late and pull.results[late] is ConsumeResult.SUCCESS:
            sent = pull.stuck  # it returned meanwhile, having consumed them
        elif not self.c.clustering:
            log.warning(
                "broadcasting: %d timed-out message(s) of %s dropped", len(pull.stuck), slot.mq
            )
            sent = pull.stuck
        else:
            for m in pull.stuck:
                if slot.pq.dropped or not await self.c.send_back(m, EXPIRED_DELAY_LEVEL):
                    break
                sent.append(m)
        pull.stuck = pull.stuck[len(sent) :]
        if not pull.stuck:
            self._timed_out.discard(pull)
        if sent:
            self._remove(slot, sent)

    async def _settle_failed(
        self, slot: QueueSlot, msgs: list[ReceivedMessage]
    ) -> list[ReceivedMessage]:
        """A batch the handler did not acknowledge (ackIndex -1): send each message back (or,
        broadcasting, drop it); the ones now settled are returned, the ones whose send-back
        failed are consumed here again later."""
        if not self.c.clustering:
            log.warning("broadcasting: %d message(s) of %s failed, dropped", len(msgs), slot.mq)
            return msgs
        settled: list[ReceivedMessage] = []
        retry_here: list[ReceivedMessage] = []
        for m in msgs:
            if slot.pq.dropped:
                break
            if await self.c.send_back(m, 0):
                settled.append(m)
            else:
                m.reconsume_times += 1
                retry_here.append(m)
        if retry_here and self._nursery is not None:
            self._nursery.start_soon(self._resubmit_later, slot, retry_here)
        return settled

    async def _resubmit_later(self, slot: QueueSlot, msgs: list[ReceivedMessage]) -> None:
        """A failed send-back: consume the messages here again after a pause (not a worker's)."""
        await trio.sleep(RETRY_LOCALLY_AFTER_S)
        if not slot.pq.dropped:
            self.submit(slot, msgs)


SUSPEND_MIN_MS = 10
SUSPEND_MAX_MS = 30_000
"""RocketMQ's bounds of an orderly queue's pause after a failure (``submitConsumeRequestLater``):
0 would retry a failing message in a tight loop."""


def suspend_pause_s(suspend_current_queue_ms: int) -> float:
    """The pause after a failed orderly batch, in seconds: ``suspend_current_queue_ms``
    clamped to [``SUSPEND_MIN_MS``, ``SUSPEND_MAX_MS``]."""
    return min(max(suspend_current_queue_ms, SUSPEND_MIN_MS), SUSPEND_MAX_MS) / 1000


def orderly_max_reconsume_times(configured: int) -> int:
    """Retries of an orderly consumer before the dead-letter queue: ``-1`` (any negative) means
    no limit (RocketMQ's ``Integer.MAX_VALUE``)."""
    return configured if configured >= 0 else 2**31 - 1


class OrderlyService:
    """Per-queue, in-order consumption under the broker's queue lock."""

    def __init__(self, consumption: Consumption, batch_max: int, suspend_s: float) -> None:
        self.c = consumption
        self.batch_max = batch_max
        self.suspend_s = suspend_s
        self._stopping = False

    async def run_queue(self, slot: QueueSlot, is_locked: Callable[[], bool]) -> None:
        """Consume ``slot``'s queue whenever woken, until cancelled; after a failed batch,
        pause ``suspend_s`` (not holding ``slot.consuming``: the queue is idle meanwhile)."""
        while True:
            await slot.wakeup.wait()
            slot.wakeup = trio.Event()
            if await self._consume_available(slot, is_locked):
                await trio.sleep(self.suspend_s)
                slot.wakeup.set()

    async def drain(self, slots: Iterable[QueueSlot]) -> None:
        """Closing: consume no further batches, and wait until each queue's batch in flight
        has settled."""
        self._stopping = True
        for slot in slots:
            async with slot.consuming:
                pass

    async def _consume_available(self, slot: QueueSlot, is_locked: Callable[[], bool]) -> bool:
        """Consume batches while there are any; True when one failed (pause, then retry)."""
        async with slot.consuming:
            while not slot.pq.dropped and not self._stopping and is_locked():
                msgs = slot.pq.take(self.batch_max)
                slot.pq.last_consume_ms = _now_ms()  # RocketMQ's lastConsumeTimestamp (take)
                if not msgs:
                    return False
                try:
                    if not await self._consume(slot, msgs):
                        return True
                except HandlerAbandoned:  # closing: the batch stays taken, not committed
                    return False
        return False

    async def _consume(self, slot: QueueSlot, msgs: list[ReceivedMessage]) -> bool:
        """One batch; False when some of it failed and went back to be retried."""
        result = await self.c.call(slot, msgs)
        if result is ConsumeResult.SUCCESS:
            self._commit(slot)
            return True
        moved = await self._move_spent_to_dlq(slot, msgs)
        rest = msgs[moved:]
        for m in rest:
            m.reconsume_times += 1
        slot.pq.return_taken(rest)
        if moved:
            self._commit(slot)  # only the moved ones are still taken
        return not rest

    async def _move_spent_to_dlq(self, slot: QueueSlot, msgs: list[ReceivedMessage]) -> int:
        """Send the batch's leading messages that used up their retries to the dead-letter
        queue; how many went. Each message is judged on its own (RocketMQ's
        ``checkReconsumeTimes``), before this try counts: a message was tried at most as
        often as any before it in the queue, so the spent ones lead the batch."""
        limit = orderly_max_reconsume_times(self.c.max_reconsume_times)
        moved = 0
        for m in msgs:
            if m.reconsume_times < limit:
                break
            if not await self.c.send_back(m, -1):  # -1: straight to the DLQ
                log.error("could not move %s of %s to the DLQ; retrying it", m.msg_id, slot.mq)
                break
            moved += 1
        return moved

    def _commit(self, slot: QueueSlot) -> None:
        offset = slot.pq.commit_taken()
        if offset >= 0 and not slot.pq.dropped:
            self.c.record_offset(slot, offset)


__all__ = [
    "ConcurrentService",
    "ConsumeResult",
    "Consumption",
    "Handler",
    "HandlerAbandoned",
    "OrderlyService",
    "QueueSlot",
    "orderly_max_reconsume_times",
    "suspend_pause_s",
]
