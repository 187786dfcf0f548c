"""The trio-native pull consumer (RocketMQ's ``DefaultLitePullConsumer`` with explicit
assignment); the blocking one wraps it.

Task tree (``async with PullConsumer(group=..., namesrv=...) as consumer:``)::

    PullConsumer
    └─ nursery
       ├─ fetch task per assigned queue   long-polling pulls into the shared buffer
       └─ auto_commit_loop                commit positions every ``auto_commit_interval`` s

Rules:

- Each assigned queue has a *position* (the next offset :meth:`poll` hands out) and a fetch
  task that pulls ahead of it into a buffer, at most ``pull_threshold_for_queue`` messages per
  queue. A queue's start comes from :meth:`seek`, else the group's committed offset, else
  ``consume_from`` (last offset by default, first offset, or a timestamp).
- Pulls use long polling: an empty queue's pull is held by the broker up to
  ``suspend_timeout_ms`` and answered as soon as a message arrives.
- :meth:`seek` bumps the queue's generation: buffered messages of older generations are
  dropped and the fetch task restarts at the new offset.
- A failed pull (broker down, route gone) is retried after ``pull_retry_delay`` seconds; it
  never ends the consumer.
- The broker filters by tag hash code; messages whose exact tag is not subscribed are dropped
  here and only move the position.
- Group mode: :meth:`subscribe` instead of :meth:`assign` shares the topic's queues with the
  group's other members (:mod:`client.rebalance`); a queue leaving commits its position first.
- Stalls (group mode): when the consumer's event loop did not run for ``pull_max_idle_ms``
  (120 s: the process was frozen, the machine suspended or paused, or the loop blocked), the
  broker may have dropped this member and the others may own its queues and have consumed
  past it. So the first thing to run afterwards (the watchdog that ticks every second, a poll,
  a pull's answer, a commit, a rebalance round) drops every queue and every buffered message,
  writes each queue's position back only if the group's committed offset is not past it, and
  rebalances (a round the stall interrupted is abandoned); the queues it keeps start again
  from the committed offsets. Nothing pulled before the stall is handed out after it.
  (RocketMQ's lite pull consumer carries on instead.) The write-back reads the committed
  offset and then writes: a member committing in between can still be overwritten once, as
  brokers offer no compare-and-set. Closing waits for the write-back (a stall noticed while
  closing included), within the 3 s the closing commit has.
- Explicit commits in group mode (``commit(offsets)``) apply only to queues assigned now and
  at or past where that assignment began: an offset read before the queue left (or before a
  stall) and came back is skipped, as it would overwrite what another member committed.
- :meth:`commit` sends each changed position to its queue's broker. With ``auto_commit``
  the *consumed* offsets are committed every ``auto_commit_interval`` s: a queue's consumed
  offset is its position when the latest poll began, so it covers only what earlier polls
  handed out, which the application has finished with since it polled again (RocketMQ's lite
  pull consumer commits in ``poll`` for the same reason). A queue leaving in a rebalance and a
  stall's write-back commit the consumed offset too, never messages still being processed: a
  crash then brings the last poll's messages again, never loses them. Closing commits the
  positions (all handed out) when the application is done with them: an ``async with`` block
  left normally, or the blocking consumer's ``close()``; a block left by an exception commits
  the consumed offsets (:attr:`PullConsumer.close_clean` decides).
- :meth:`messages` (and ``async for msg in consumer``) hands the polled messages out one at a
  time; a batch counts as consumed once the loop asks for the message after it.
- A :meth:`poll` waiting for messages gets a batch that caught up with its queue before the
  fetch task sends the next pull: the task yields to the poller first (:func:`_hand_over`),
  so the next pull's encoding and send (tens of microseconds) are not in the way of the
  messages the application waits for. A batch with more behind it sends the next pull first,
  to keep a backlog coming.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from types import TracebackType

import trio

from client import api, rebalance
from client.allocate import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from client.config import ClientConfig, check_intervals, check_whole_numbers
from client.errors import CLIENT_ERROR, ClientClosedError, MQClientError
from client.instance import ClientInstance
from client.message import MessageQueue, ReceivedMessage
from client.offset_store import (
    check_start_position,
    default_consume_timestamp_ms,
    offset_from_where,
)
from client.running_info import consume_status_table
from client.validation import validate_group
from common.subscription import SubscriptionData, SubscriptionExpression, build_subscription
from remoting.client_bodies import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from remoting.codes import RequestCode
from remoting.command import INT32_MAX
from remoting.consumer_bodies import ConsumerRunningInfo, ProcessQueueInfo

log = logging.getLogger(__name__)

COMMIT_ON_CLOSE_TIMEOUT_S = 3.0
STALL_TICK_MS = 1000
"""Group mode: how often the stall watchdog looks at the clock (ms)."""


_STALL_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def _now_ms() -> int:
    """Milliseconds on a clock that also runs while the machine is suspended (a suspended
    member is dropped by the brokers as a frozen one is)."""
    return time.clock_gettime_ns(_STALL_CLOCK) // 1_000_000


def _check_numbers(
    *,
    pull_batch_size: int,
    pull_threshold_for_queue: int,
    max_poll_records: int,
    suspend_timeout_ms: int,
    pull_retry_delay: float,
    pull_max_idle_ms: int,
) -> None:
    """ValueError naming the first count, delay or timeout out of its range or of the wrong
    kind (a string used to fail with a bare ``TypeError``, a bool was taken as 0 or 1)."""
    check_whole_numbers(1, 1024, pull_batch_size=pull_batch_size)
    check_whole_numbers(
        1,
        INT32_MAX,
        pull_threshold_for_queue=pull_threshold_for_queue,
        max_poll_records=max_poll_records,
    )
    check_whole_numbers(0, INT32_MAX, suspend_timeout_ms=suspend_timeout_ms)
    check_whole_numbers(2 * STALL_TICK_MS, INT32_MAX, pull_max_idle_ms=pull_max_idle_ms)
    if (
        isinstance(pull_retry_delay, bool)
        or not isinstance(pull_retry_delay, int | float)
        or not pull_retry_delay >= 0
    ):
        raise ValueError(
            f"pull_retry_delay must be a number of seconds >= 0, got {pull_retry_delay!r}"
        )


@dataclass(eq=False)
class _QueueState:
    """What the consumer knows of one assigned queue."""

    mq: MessageQueue
    subscription: SubscriptionData
    position: int | None = None
    consumed: int | None = None
    """The position when the latest poll began: everything below it was handed out by an
    earlier poll, which the application has finished with (it polled again). Background
    commits (auto commit, a queue leaving, a stall) commit this, never a later position."""
    fetch_offset: int | None = None
    committed: int | None = None
    start: int | None = None
    """The position this assignment of the queue began at (group mode: explicit commits below
    it come from an earlier assignment and are skipped)."""
    generation: int = 0
    buffered: int = 0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    space: trio.Event = field(default_factory=trio.Event)


@dataclass(eq=False, slots=True)
class _Batch:
    state: _QueueState
    generation: int
    messages: list[ReceivedMessage]
    next_begin_offset: int
    taken: int = 0
    """How many of :attr:`messages` polls have handed out already."""


class PullConsumer:
    """Reads assigned queues; ``async with PullConsumer(group=..., namesrv=...) as c:``."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        max_poll_records: int = 500,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        suspend_timeout_ms: int = 15_000,
        pull_retry_delay: float = 1.0,
        allocate_strategy: AllocateMessageQueueStrategy | None = None,
        rebalance_interval: float = 20.0,
        pull_max_idle_ms: int = 120_000,
    ) -> None:
        validate_group(group)
        _check_numbers(
            pull_batch_size=pull_batch_size,
            pull_threshold_for_queue=pull_threshold_for_queue,
            max_poll_records=max_poll_records,
            suspend_timeout_ms=suspend_timeout_ms,
            pull_retry_delay=pull_retry_delay,
            pull_max_idle_ms=pull_max_idle_ms,
        )
        check_intervals(
            auto_commit_interval=auto_commit_interval, rebalance_interval=rebalance_interval
        )
        if not isinstance(auto_commit, bool):
            raise ValueError(f"auto_commit must be True or False, got {auto_commit!r}")
        check_start_position(consume_from, consume_timestamp_ms)
        self.group = group
        self.consume_from = consume_from
        self.consume_timestamp_ms = default_consume_timestamp_ms(consume_timestamp_ms)
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.max_poll_records = max_poll_records
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.suspend_timeout_ms = suspend_timeout_ms
        self.pull_retry_delay = pull_retry_delay
        self.strategy: AllocateMessageQueueStrategy = (
            allocate_strategy or AllocateMessageQueueAveragely()
        )
        self.rebalance_interval = rebalance_interval
        self.pull_max_idle_ms = pull_max_idle_ms
        self.stalls = 0
        """Group mode: how many stalls this consumer has recovered from (see the module doc)."""
        self._alive_ms = 0
        self._recovering: trio.Event | None = None
        self._unwritten: dict[MessageQueue, int] = {}
        """Positions of stalled queues still to write back."""
        self._subscriptions: dict[str, SubscriptionExpression] = {}
        self._rebalance_wakeup = trio.Event()
        self.rebalanced = trio.Event()
        """Group mode: set after every rebalance round."""
        self._own_instance = instance is None
        self._instance = instance or ClientInstance(ClientConfig.create(namesrv))
        self._states: dict[MessageQueue, _QueueState] = {}
        self._buffer: collections.deque[_Batch] = collections.deque()
        self._data = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._running = False
        self.closed = trio.Event()
        """Set once the consumer has fully closed."""
        self.close_clean: bool | None = None
        """Whether the application finished with everything polled when it closes (then
        closing commits the positions, else only the consumed offsets); ``None``: it did
        unless the ``async with`` block ends with an exception. The blocking consumer sets it."""

    @property
    def instance(self) -> ClientInstance:
        """The client instance this consumer uses."""
        return self._instance

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> PullConsumer:
        if self._own_instance:
            await self._instance.__aenter__()
        try:
            self._instance.register_consumer(
                self.group, self.consumer_data, running_info=self.running_info
            )
            self._instance.consumer_ids_changed.append(self._on_ids_changed)
            self._instance.offset_reset.append(self._on_offset_reset)
            cm = trio.open_nursery()
            self._nursery = await cm.__aenter__()
        except BaseException:
            if self._own_instance:
                await self._instance.__aexit__(None, None, None)
            raise
        self._nursery_cm = cm
        self._running = True
        if self.auto_commit:
            self._nursery.start_soon(self.auto_commit_loop)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._nursery is not None
        self._running = False
        self._data.set()  # waiting polls wake and raise ClientClosedError
        try:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(COMMIT_ON_CLOSE_TIMEOUT_S):
                    if self.auto_commit:
                        clean = exc_type is None if self.close_clean is None else self.close_clean
                        await self._commit_logged(self._changed_offsets(consumed_only=not clean))
                    self._check_stall()  # a stall noticed now still writes its positions back
                    if self._recovering is not None:
                        await self._recovering.wait()
                    await self._write_back_unwritten()
                self._instance.unregister_consumer(self.group)
                with contextlib.suppress(ValueError):
                    self._instance.consumer_ids_changed.remove(self._on_ids_changed)
                with contextlib.suppress(ValueError):
                    self._instance.offset_reset.remove(self._on_offset_reset)
                if not self._own_instance:
                    await self._instance.unregister_client(consumer_group=self.group)
            self._nursery.cancel_scope.cancel()
            assert self._nursery_cm is not None
            await self._nursery_cm.__aexit__(None, None, None)
        finally:
            try:
                if self._own_instance:
                    await self._instance.__aexit__(exc_type, exc, tb)
            finally:
                self.closed.set()

    async def run(self, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        """Enter, report a scope whose cancellation closes the consumer, and serve."""
        with trio.CancelScope() as scope:
            async with self:
                task_status.started(scope)
                await trio.sleep_forever()

    def consumer_data(self) -> ConsumerData:
        """This consumer's heartbeat entry."""
        subs = {s.subscription.topic: s.subscription for s in self._states.values()}
        subs.update({t: build_subscription(t, e) for t, e in self._subscriptions.items()})
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=self.consume_from,
            subscriptions=tuple(subs[t] for t in sorted(subs)),
        )

    def running_info(self) -> ConsumerRunningInfo:
        """What ``mqadmin consumerStatus`` shows of this consumer: its settings, subscriptions
        and one row per assigned queue (the committed offset, and how many messages are
        buffered as ``cachedMsgCount``; the other process-queue figures of a push consumer do
        not apply and stay 0), and per subscribed topic its pull figures (the consume figures
        of a push consumer's handler do not apply and stay 0; RocketMQ's lite pull consumer
        sends none at all)."""
        props = {
            "consumerGroup": self.group,
            "messageModel": MessageModel.CLUSTERING.name,
            "consumeFromWhere": self.consume_from.name,
            "pullBatchSize": str(self.pull_batch_size),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "autoCommit": str(self.auto_commit).lower(),
            "groupMode": str(bool(self._subscriptions)).lower(),
        }
        queues = tuple(self._queue_info(s) for _, s in sorted(self._states.items()))
        subscriptions = self.consumer_data().subscriptions
        status = consume_status_table(self._instance.consumer_stats, self.group, subscriptions)
        return ConsumerRunningInfo(props, subscriptions, queues, status)

    @staticmethod
    def _queue_info(state: _QueueState) -> ProcessQueueInfo:
        mq = state.mq
        return ProcessQueueInfo(
            mq.topic,
            mq.broker_name,
            mq.queue_id,
            commit_offset=-1 if state.committed is None else state.committed,
            cached_msg_count=state.buffered,
        )

    def _check_running(self) -> trio.Nursery:
        if not self._running or self._nursery is None:
            raise ClientClosedError(f"pull consumer {self.group}")
        return self._nursery

    # ------------------------------------------------------------------ assignment

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted, as the name servers know them now."""
        return await self._instance.subscribe_queues(topic)

    def assign(
        self, queues: Iterable[MessageQueue], expression: SubscriptionExpression = "*"
    ) -> None:
        """Read exactly ``queues`` from now on, filtered by ``expression`` (a TAG expression,
        or a :class:`common.subscription.MessageSelector`; ValueError if it is not valid).

        Queues already assigned keep their position; dropped queues stop at once. Not allowed
        once :meth:`subscribe` put the consumer in group mode.
        """
        if self._subscriptions:
            raise MQClientError(CLIENT_ERROR, "assign() cannot be mixed with subscribe()")
        wanted = set(queues)
        build_subscription("", expression)  # validates the expression now
        self._assign(wanted, {mq.topic: expression for mq in wanted})

    def subscribe(self, topic: str, expression: SubscriptionExpression = "*") -> None:
        """Group mode: share ``topic``'s queues with the group's other members (rebalance),
        reading the messages ``expression`` selects (a TAG expression, or a
        :class:`common.subscription.MessageSelector`; ValueError if it is not valid).

        Queues come and go as members join and leave; positions start at the group's
        committed offsets (else ``consume_from``) and are committed as usual.
        """
        nursery = self._check_running()
        if self._states and not self._subscriptions:
            raise MQClientError(CLIENT_ERROR, "subscribe() cannot be mixed with assign()")
        build_subscription(topic, expression)  # validates the expression now
        first = not self._subscriptions
        self._subscriptions[topic] = expression
        if first:
            self._alive_ms = _now_ms()
            nursery.start_soon(self._stall_watchdog)
            nursery.start_soon(
                rebalance.rebalance_loop,
                self._instance,
                lambda: list(self._subscriptions),
                self.do_rebalance,
                self._fresh_wakeup,
                self.rebalance_interval,
            )
        else:
            self._instance.heartbeat_soon()
            self._rebalance_wakeup.set()

    def _fresh_wakeup(self) -> trio.Event:
        self._rebalance_wakeup = trio.Event()
        return self._rebalance_wakeup

    def _on_ids_changed(self, group: str) -> None:
        if group == self.group and self._subscriptions:
            self._rebalance_wakeup.set()

    def _on_offset_reset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """An admin reset the group's offsets: seek the assigned queues among ``offsets``.

        The brokers committed the new offsets already: they become what this consumer last
        committed, so a commit once it has read back to its old position is still sent.
        """
        if group != self.group or not self._running:
            return
        for mq, offset in sorted(offsets.items()):
            if mq in self._states:
                self.seek(mq, offset)
                self._states[mq].committed = offset

    async def do_rebalance(self) -> None:
        """Group mode: one rebalance round; dropped queues commit their position first.

        A round a stall interrupts is abandoned (the recovery asks for a new one), and none
        starts before a recovery has written its positions back.
        """
        self._check_stall()
        if self._recovering is not None:
            await self._recovering.wait()
        stalls = self.stalls
        wanted = await rebalance.wanted_queues(
            self._instance, self.group, self.strategy, list(self._subscriptions), self._states
        )
        if self._stalled_since(stalls):
            return
        dropped = {mq: s.consumed for mq, s in self._states.items() if mq not in wanted}
        commits = {mq: p for mq, p in dropped.items() if p is not None}
        if commits and self._running:
            await self._commit_logged(commits)
            if self._stalled_since(stalls):
                return
        if self._running:
            self._assign(wanted, dict(self._subscriptions))
        self.rebalanced.set()
        self.rebalanced = trio.Event()

    def _assign(
        self, wanted: set[MessageQueue], expressions: Mapping[str, SubscriptionExpression]
    ) -> None:
        nursery = self._check_running()
        subs = {t: build_subscription(t, e) for t, e in expressions.items()}
        for mq in list(self._states):
            if mq not in wanted:
                self._states.pop(mq).scope.cancel()
        for mq in sorted(wanted):
            state = self._states.get(mq)
            if state is not None and _same_expression(state.subscription, subs[mq.topic]):
                continue
            if state is not None:
                state.scope.cancel()
            new = _QueueState(mq, subs[mq.topic])
            if state is not None:
                new.position = new.fetch_offset = state.position
                new.committed, new.start = state.committed, state.start
                new.consumed = state.consumed
            self._states[mq] = new
            nursery.start_soon(self._fetch_loop, new, new.generation)
        self._instance.heartbeat_soon()

    # ------------------------------------------------------------------ stalls (group mode)

    async def _stall_watchdog(self) -> None:
        """Look at the clock every ``STALL_TICK_MS`` so a stall is noticed even when nothing
        else runs; never returns."""
        while True:
            await trio.sleep(STALL_TICK_MS / 1000)
            self._check_stall()

    def _check_stall(self) -> bool:
        """True if the loop did not run for ``pull_max_idle_ms`` since the last look (then the
        queues are dropped and a recovery started); see the module docstring's "Stalls"."""
        now = _now_ms()
        gap, self._alive_ms = now - self._alive_ms, now
        if gap <= self.pull_max_idle_ms or not self._subscriptions:
            return False
        self.stalls += 1
        positions = {mq: s.consumed for mq, s in self._states.items() if s.consumed is not None}
        for state in self._states.values():
            state.scope.cancel()
        self._states.clear()
        self._buffer.clear()  # (``_data`` stays: a poll may wait on it; the next one resets it)
        log.warning(
            "%s: this consumer did not run for %d ms (was the process frozen?); dropping its "
            "queues and what it had pulled, and starting again from the committed offsets",
            self.group,
            gap,
        )
        self._unwritten.update(positions)
        if self._running and self._nursery is not None and self._recovering is None:
            self._recovering = trio.Event()
            self._nursery.start_soon(self._recover)
        return True

    def _stalled_since(self, stalls: int) -> bool:
        """True if a stall was noticed (now, or by another task) since :attr:`stalls` was
        ``stalls``."""
        self._check_stall()
        return self.stalls != stalls

    async def _recover(self) -> None:
        """Write back the positions no member went past, then heartbeat and rebalance."""
        try:
            await self._write_back_unwritten()
        finally:
            recovering, self._recovering = self._recovering, None
            if recovering is not None:
                recovering.set()
            self._instance.heartbeat_soon()
            self._rebalance_wakeup.set()

    async def _write_back_unwritten(self) -> None:
        """Write back the stalled positions, those of a stall noticed meanwhile too."""
        while self._unwritten:
            positions, self._unwritten = self._unwritten, {}
            async with trio.open_nursery() as nursery:
                for mq, position in positions.items():
                    nursery.start_soon(self._write_back, mq, position)

    async def _write_back(self, mq: MessageQueue, position: int) -> None:
        """Commit ``position`` of a stalled queue unless the group's offset is already past it
        (another member consumed further) or cannot be read."""
        try:
            theirs = await self.committed(mq)
            if theirs is not None and theirs >= position:
                if theirs > position:
                    log.warning(
                        "%s: another member consumed %s past this one meanwhile (%d > %d); "
                        "keeping its offset",
                        self.group,
                        mq,
                        theirs,
                        position,
                    )
                return
            addr = await self._instance.find_broker_addr(mq)
            resp = await self._instance.invoke(
                addr, api.update_offset_request(self.group, mq, position)
            )
            api.check_success(resp, addr)
        except MQClientError as exc:
            log.warning(
                "%s: position %d of stalled %s not written back: %s", self.group, position, mq, exc
            )

    def assignment(self) -> list[MessageQueue]:
        """The assigned queues, sorted."""
        return sorted(self._states)

    def _state(self, mq: MessageQueue) -> _QueueState:
        state = self._states.get(mq)
        if state is None:
            raise MQClientError(CLIENT_ERROR, f"{mq} is not assigned to this consumer")
        return state

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Make ``offset`` the next offset :meth:`poll` returns for ``mq``."""
        nursery = self._check_running()
        if offset < 0:
            raise ValueError("offset must be >= 0")
        state = self._state(mq)
        state.scope.cancel()
        new = _QueueState(
            mq,
            state.subscription,
            position=offset,
            consumed=offset,
            fetch_offset=offset,
            committed=state.committed,
            start=offset,
        )
        new.generation = state.generation + 1
        self._states[mq] = new
        nursery.start_soon(self._fetch_loop, new, new.generation)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        """Seek to the queue's min offset."""
        self.seek(mq, await self._instance.broker_offset(RequestCode.GET_MIN_OFFSET, mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Seek to the queue's max offset (only new messages)."""
        self.seek(mq, await self._instance.broker_offset(RequestCode.GET_MAX_OFFSET, mq))

    async def seek_to_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> None:
        """Seek to the first message stored at or after ``timestamp_ms``."""
        offset = await self._instance.broker_offset(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp_ms
        )
        self.seek(mq, offset)

    def position(self, mq: MessageQueue) -> int | None:
        """The next offset :meth:`poll` returns for ``mq`` (None until known)."""
        return self._state(mq).position

    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` on its broker (None if none)."""
        addr = await self._instance.find_broker_addr(mq)
        resp = await self._instance.invoke(addr, api.query_offset_request(self.group, mq))
        return api.parse_query_offset(resp, addr)

    async def _start_offset(self, mq: MessageQueue) -> int:
        committed = await self.committed(mq)
        if committed is not None:
            return committed
        return await offset_from_where(
            self._instance, mq, self.consume_from, self.consume_timestamp_ms
        )

    # ------------------------------------------------------------------ fetching

    async def _fetch_loop(self, state: _QueueState, generation: int) -> None:
        """Pull ``state.mq`` ahead of its position until cancelled (by seek/assign/close)."""
        with state.scope:
            while True:
                try:
                    await self._fetch_once(state, generation)
                except MQClientError as exc:
                    log.warning("pull from %s failed, retrying: %s", state.mq, exc)
                    await trio.sleep(self.pull_retry_delay)

    async def _fetch_once(self, state: _QueueState, generation: int) -> None:
        if state.fetch_offset is None:
            offset = await self._start_offset(state.mq)
            state.fetch_offset = offset
            if state.position is None:
                state.position = offset
            if state.start is None:
                state.start = state.position
        while state.buffered >= self.pull_threshold_for_queue:
            state.space = trio.Event()
            await state.space.wait()
        addr = await self._instance.find_broker_addr(state.mq)
        offset = state.fetch_offset
        cmd = api.pull_request(
            group=self.group,
            mq=state.mq,
            offset=offset,
            max_msgs=self.pull_batch_size,
            subscription=state.subscription,
            suspend_timeout_ms=self.suspend_timeout_ms,
        )
        timeout = self.suspend_timeout_ms / 1000 + self._instance.config.request_timeout_s
        asked = _now_ms()
        resp = await self._instance.invoke(addr, cmd, timeout)
        self._check_stall()  # an answer after a stall must not be buffered
        result = api.parse_pull(resp, state.mq, state.subscription, addr, offset)
        if generation != state.generation or self._states.get(state.mq) is not state:
            return
        if result.status is api.PullStatus.FOUND:  # as the push consumer's figures
            stats = self._instance.consumer_stats
            stats.inc_pull(self.group, state.mq.topic, _now_ms() - asked, len(result.messages))
        if result.status is api.PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "offset %d of %s is illegal (queue holds %d..%d); moving to %d",
                state.fetch_offset,
                state.mq,
                result.min_offset,
                result.max_offset,
                result.next_begin_offset,
            )
        state.fetch_offset = result.next_begin_offset
        if result.messages:
            self._buffer.append(
                _Batch(state, generation, result.messages, result.next_begin_offset)
            )
            state.buffered += len(result.messages)
            # caught up: the next pull will be held at the broker, so it loses nothing by
            # going out after the poll; behind, it goes first to keep the queue's data coming
            await _hand_over(self._data, result.next_begin_offset >= result.max_offset)
        elif state.buffered == 0:
            state.position = result.next_begin_offset

    # ------------------------------------------------------------------ polling

    def poll_nowait(self, max_records: int | None = None) -> list[ReceivedMessage]:
        """The buffered messages (at most ``max_records``, default ``max_poll_records``)."""
        self._check_running()
        if max_records is not None and max_records <= 0:
            raise ValueError(f"max_records must be > 0, got {max_records}")
        self._check_stall()
        for state in self._states.values():
            state.consumed = state.position  # the caller is done with what it polled before
        limit = self.max_poll_records if max_records is None else max_records
        out: list[ReceivedMessage] = []
        while self._buffer and len(out) < limit:
            batch = self._buffer.popleft()
            state = batch.state
            if batch.generation != state.generation or self._states.get(state.mq) is not state:
                continue
            begin = batch.taken
            take = batch.messages[begin : begin + limit - len(out)]
            batch.taken += len(take)
            out.extend(take)
            if batch.taken < len(batch.messages):
                self._buffer.appendleft(batch)
                state.position = take[-1].queue_offset + 1
            else:
                state.position = batch.next_begin_offset
            state.buffered -= len(take)
            if state.buffered < self.pull_threshold_for_queue:
                state.space.set()
        if not self._buffer and self._data.is_set():  # an unset one may have waiters: keep it
            self._data = trio.Event()
        return out

    async def poll(self, max_records: int | None = None) -> list[ReceivedMessage]:
        """Wait until messages are buffered and return them (use ``trio.move_on_after`` to
        bound the wait)."""
        while True:
            out = self.poll_nowait(max_records)
            if out:
                return out
            await self._data.wait()

    async def poll_for(
        self, seconds: float, max_records: int | None = None
    ) -> list[ReceivedMessage]:
        """:meth:`poll`, but return ``[]`` after ``seconds`` without messages (0 or less:
        what is buffered now)."""
        with trio.move_on_after(max(0.0, seconds)):
            return await self.poll(max_records)
        return []

    def messages(
        self, idle_timeout: float | None = None, max_records: int | None = None
    ) -> MessageStream:
        """The messages one at a time: ``async for msg in consumer.messages(idle_timeout=5):``.

        Each step polls (at most ``max_records``) when the last poll's messages are all handed
        out, so a batch counts as consumed once the loop asks for the message after it (see
        the module docstring on commits). The iteration ends when no message arrives within
        ``idle_timeout`` seconds (``None``: never) or when the consumer is closed.
        ``async for msg in consumer`` is ``consumer.messages()``.
        """
        if idle_timeout is not None and not idle_timeout >= 0:
            raise ValueError(f"idle_timeout must be >= 0 seconds or None, got {idle_timeout!r}")
        if max_records is not None and max_records <= 0:
            raise ValueError(f"max_records must be > 0, got {max_records}")
        return MessageStream(self, idle_timeout, max_records)

    def __aiter__(self) -> MessageStream:
        return self.messages()

    # ------------------------------------------------------------------ committing

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (default: every changed position) to the queues' brokers; in group
        mode only those of queues assigned to this member now, at or past where the
        assignment began (see the module docstring)."""
        self._check_running()
        await self._commit(offsets)

    async def _commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        self._check_stall()
        if offsets is not None and self._subscriptions:
            offsets = self._owned_offsets(offsets)
        if offsets is None:
            offsets = self._changed_offsets(consumed_only=False)
        errors: list[BaseException] = []
        async with trio.open_nursery() as nursery:
            for mq, offset in offsets.items():
                nursery.start_soon(self._commit_one, mq, offset, errors)
        if errors:
            raise errors[0]

    def _changed_offsets(self, *, consumed_only: bool) -> dict[MessageQueue, int]:
        """Each queue's position (or, ``consumed_only``, its consumed offset: what polls
        before the latest one handed out) where it differs from the committed offset."""
        out = {}
        for mq, state in self._states.items():
            offset = state.consumed if consumed_only else state.position
            if offset is not None and offset != state.committed:
                out[mq] = offset
        return out

    def _owned_offsets(self, offsets: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """Group mode: the ``offsets`` of queues assigned now, at or past where this assignment
        began (an offset below it was taken before the queue left and came back, or before a
        stall, and would overwrite the offset another member committed meanwhile)."""
        owned = {}
        for mq, offset in offsets.items():
            state = self._states.get(mq)
            if state is not None and state.start is not None and offset >= state.start:
                owned[mq] = offset
            else:
                log.warning(
                    "%s: not committing %d for %s: not assigned to this member since it was read",
                    self.group,
                    offset,
                    mq,
                )
        return owned

    async def _commit_one(self, mq: MessageQueue, offset: int, errors: list[BaseException]) -> None:
        state = self._states.get(mq)
        try:
            addr = await self._instance.find_broker_addr(mq)
            resp = await self._instance.invoke(
                addr, api.update_offset_request(self.group, mq, offset)
            )
            api.check_success(resp, addr)
        except MQClientError as exc:
            errors.append(exc)
            return
        if state is not None and self._states.get(mq) is state:
            state.committed = offset

    async def _commit_logged(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        try:
            await self._commit(offsets)
        except MQClientError as exc:
            log.warning("committing offsets of %s failed: %s", self.group, exc)

    async def auto_commit_loop(self) -> None:
        """Commit every ``auto_commit_interval`` seconds; never returns."""
        while True:
            await trio.sleep(self.auto_commit_interval)
            await self._commit_logged(self._changed_offsets(consumed_only=True))


class MessageStream:
    """An async iterator over a :class:`PullConsumer`'s messages (see
    :meth:`PullConsumer.messages`)."""

    def __init__(
        self, consumer: PullConsumer, idle_timeout: float | None, max_records: int | None
    ) -> None:
        self._consumer = consumer
        self._idle_timeout = idle_timeout
        self._max_records = max_records
        self._pending: collections.deque[ReceivedMessage] = collections.deque()

    def __aiter__(self) -> MessageStream:
        return self

    async def __anext__(self) -> ReceivedMessage:
        if not self._pending:
            self._pending.extend(await self._next_batch())
        return self._pending.popleft()

    async def _next_batch(self) -> list[ReceivedMessage]:
        consumer = self._consumer
        try:
            if self._idle_timeout is None:
                batch = await consumer.poll(self._max_records)
            else:
                batch = await consumer.poll_for(self._idle_timeout, self._max_records)
        except ClientClosedError:
            if consumer._nursery is None and not consumer.closed.is_set():
                raise  # never started: a mistake, not the end of the messages
            raise StopAsyncIteration from None
        if not batch:
            raise StopAsyncIteration
        return batch


async def _hand_over(data: trio.Event, caught_up: bool) -> None:
    """Set ``data`` and, if the pull ``caught_up`` with its queue and a poll waits on ``data``,
    let that poll run before the caller goes on.

    trio runs the tasks that became runnable together in an arbitrary order (it reverses each
    batch half of the time), so one checkpoint lets the woken poll run first only half of
    the time; after two it has run. Without a waiting poll there is no one to yield to.
    """
    waiting = caught_up and data.statistics().tasks_waiting
    data.set()
    if waiting:
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()


def _same_expression(old: SubscriptionData, new: SubscriptionData) -> bool:
    """Whether two subscriptions of a topic select the same messages (same type and text)."""
    return (old.sub_string, old.expression_type) == (new.sub_string, new.expression_type)
