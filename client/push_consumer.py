"""The trio-native push consumer (RocketMQ's ``DefaultMQPushConsumer``); the blocking one
wraps it.

Task tree (``async with PushConsumer(group=..., namesrv=...) as consumer:``)::

    PushConsumer
    └─ nursery
       ├─ rebalance_loop        every rebalance_interval (20 s), at start, on subscribe and when
       │                        a broker says the group's members changed
       ├─ persist_loop          offsets to the brokers (or the local file) every 5 s
       ├─ lock_loop             orderly only: renew the broker-side queue locks every 20 s
       ├─ consume service       concurrent: a pool of consume_thread_max workers
       └─ per assigned queue    a pull task (long polling, flow control, ``pull_interval_ms``
                                after a pull that brought messages, none while suspended);
                                orderly: a consume task

Rebalance (seed 000): for each subscribed topic, the readable queues (from the cached route)
and the group's client ids (asked of a broker) are sorted and given to the allocation strategy
(``AllocateMessageQueueAveragely`` by default; in ``BROADCASTING`` every member takes every
queue). Queues no longer ours are dropped (pulling stops, the offset is persisted, counting the
batches a pull in flight has finished, an orderly lock is released); new queues start at the
stored offset, or at ``consume_from`` when the group has none. In ``CLUSTERING`` the group's
retry topic ``%RETRY%<group>`` is subscribed automatically.

Stalls: a queue whose pull loop did not run for ``pull_max_idle_ms`` (120 s, RocketMQ's
``pullMaxIdleTime``), or whose pull was answered only after that long, belonged to a process
that was frozen or starved (SIGSTOP, a VM pause, a blocked event loop). Past the broker's
``channelExpiredTimeout`` (also 120 s) the broker dropped this member and the others took its
queues. So such a queue stops pulling, takes no answer that came that late, and its offset is
no longer persisted; the next rebalance (at once) re-creates it from the broker's committed
offset, and its own offset is written back first only if no other member went past it. A
RocketMQ consumer carries on from where it froze instead: it consumes again everything the
others consumed meanwhile, and writes its older offset over theirs.

Broadcasting offsets live in ``<offset_dir>/<ip>@<instance_name>/<group>/offsets.json``
(``~/.minimq_offsets``; the instance name is the consumer's ``instance_name``, else the client
config's, else ``DEFAULT``), so a restarted member resumes. The file is loaded at start (a file
that cannot be read fails the start) and its directory is held with a lock while the consumer
runs: two live members of one group on one host need different instance names. Orderly
broadcasting consumes every queue in order with no broker locks (each member reads all).

Closing: pulling stops, the handlers in flight may finish (``CLOSE_DRAIN_S``) and count, every
offset is persisted at once, then the queues are dropped and the orderly locks released. A
handler still running ``await_termination_ms`` (10 s) after the close began is abandoned
(RocketMQ's ``awaitTerminationMillisWhenShutdown``): its thread runs on alone (an orderly
``async def`` call is cancelled then; a rebalance never cancels one), its messages
count as not consumed (the persisted offsets stop before them, so they are delivered again),
its orderly queue is unlocked, and a WARNING names the group and how many were abandoned.

Consume timeout (concurrent only; RocketMQ's ``consumeTimeout``): every
``consume_timeout_min`` (15) minutes, a handler call that began more than that long ago gives
up its messages: they are sent back to the broker at delay level 3 (consumed again through
``%RETRY%<group>``, like a failure; broadcasting drops them) and leave the process queue once
the broker took them (one whose send-back fails stays and is tried next time), so the queue's
offset moves past them and a handler stuck for ever does not stop the queue. The rest of its
pull goes to another worker; the late call's outcome is ignored when it returns. RocketMQ looks
at the 16 oldest messages of each queue; here every call in flight is checked. An orderly
consumer is not affected.

Suspend (RocketMQ's ``suspend()``/``resume()``, its ``pause`` flag): while suspended, no queue
sends a new pull; a pull the broker already holds may still bring messages, which are consumed,
as in RocketMQ (its answer is handled; only the next pull waits). The messages already buffered
are consumed, heartbeats, rebalance rounds, orderly lock renewals and offset persistence go on:
the member stays in its group, keeps its share of the queues and takes the queues a rebalance
gives it (without pulling them). Each waiting pull loop is woken by :meth:`PushConsumer.resume`
at once, and otherwise every ``PULL_TIME_DELAY_S_WHEN_SUSPEND`` (1 s, RocketMQ's re-check) only
to mark its queue as alive, so a long suspension is not taken for a frozen process ("Stalls").
RocketMQ skips the suspended member's own rebalance rounds (``doRebalance`` returns while
paused): it then keeps queues a new member was given, writes their old offsets over the new
owner's and, orderly, renews their locks; minimq rebalances as usual. ``resume()`` runs a
rebalance round at once, as RocketMQ's.

Offsets: each queue records the smallest offset still being consumed (one past the last when
none), kept locally and persisted every ``persist_interval``, when a queue is dropped and when
the consumer closes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import trio

from client import api, rebalance
from client.allocate import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from client.config import ClientConfig, check_intervals
from client.consume_service import (
    ConcurrentService,
    Consumption,
    Handler,
    OrderlyService,
    QueueSlot,
    restore_retry_topic,
    suspend_pause_s,
)
from client.errors import CLIENT_ERROR, ClientClosedError, MQClientError
from client.instance import UNREGISTER_TIMEOUT_S, ClientInstance
from client.message import MessageQueue, ReceivedMessage
from client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteOffsetStore,
    check_start_position,
    default_consume_timestamp_ms,
    offset_from_where,
)
from client.process_queue import ProcessQueue
from client.running_info import (
    consume_directly,
    consume_status_table,
    epoch_offset_ms,
    process_queue_info,
)
from client.send_back import send_to_retry_topic
from client.validation import validate_group
from common.subscription import SubscriptionData, SubscriptionExpression, build_subscription
from common.topic import RETRY_GROUP_TOPIC_PREFIX, retry_topic
from remoting.client_bodies import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from remoting.codes import RequestCode
from remoting.consumer_bodies import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_THREADPOOL_CORE_SIZE,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
)

log = logging.getLogger(__name__)

PULL_RETRY_DELAY_S = 1.0
"""Pause after a failed pull (``pullTimeDelayMillsWhenException`` is 3 s in RocketMQ)."""
PULL_TIME_DELAY_S_WHEN_SUSPEND = 1.0
"""While suspended, how often a queue's pull loop wakes (RocketMQ's
``PULL_TIME_DELAY_MILLS_WHEN_SUSPEND``): only to mark the queue as alive (``last_pull_ms``);
:meth:`PushConsumer.resume` wakes it at once."""
FLOW_CONTROL_PAUSE_S = 0.05
"""Pause of a queue's pulls while it is over a flow-control limit."""
LOCK_RENEW_INTERVAL_S = 20.0
"""Orderly: broker-side locks are renewed this often (they expire after 60 s there)."""
LOCK_RETRY_S = 0.5
"""Orderly: a queue the broker would not lock to us is tried again this often."""
CLOSE_TIMEOUT_S = 5.0
"""Upper bound of persisting offsets and releasing locks when the consumer closes."""
CLOSE_DRAIN_S = 3.0
"""Closing: how long the handlers in flight may run on before the offsets are persisted
(what they finish by then counts; the rest is consumed again by the next owner)."""
AWAIT_TERMINATION_MS = 10_000
"""Default ``await_termination_ms``: how long a close waits for the handlers in flight before
abandoning them (the blocking ``close()`` gave up after as long)."""
CONSUME_TIMEOUT_MIN = 15
"""Default ``consume_timeout_min`` (RocketMQ's ``consumeTimeout``, in minutes)."""
MAX_CONSUME_TIMEOUT_MIN = 2**63 - 1
"""The largest ``consume_timeout_min`` (RocketMQ's ``consumeTimeout`` is a Java long)."""
DROP_WAIT_S = 1.0
"""Orderly: how long a dropped queue waits for its in-flight batch before persisting its offset
(its broker lock is kept until the batch ends)."""


FLOW_CONTROL_RANGES: dict[str, tuple[int, int]] = {
    "consume_message_batch_max_size": (1, 1024),
    "pull_batch_size": (1, 1024),
    "pull_interval_ms": (0, 65535),
    "pull_threshold_for_queue": (1, 65535),
    "pull_threshold_size_for_queue_mib": (1, 1024),
    "pull_threshold_for_topic": (1, 6553500),
    "pull_threshold_size_for_topic_mib": (1, 102400),
    "consume_concurrently_max_span": (1, 65535),
}
"""RocketMQ's ranges of the pull options (``checkConfig``); the topic thresholds may also be
-1 (no topic limit). Out of range, a consumer would never pull, or be refused each pull."""


def check_flow_control(**options: int) -> None:
    """ValueError naming the first option out of :data:`FLOW_CONTROL_RANGES`."""
    for name, value in options.items():
        low, high = FLOW_CONTROL_RANGES[name]
        if name.endswith("_topic") or name.endswith("_topic_mib"):
            if value == -1:
                continue
            allowed = f"-1 or [{low}, {high}]"
        else:
            allowed = f"[{low}, {high}]"
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be in {allowed}, got {value!r}")


def check_consume_options(
    *,
    consume_from: object,
    consume_timestamp_ms: object,
    message_model: object,
    orderly: object,
) -> None:
    """ValueError for a ``message_model`` that is not a :class:`MessageModel`, an ``orderly``
    that is not a bool, or a start position :func:`check_start_position` refuses.

    A name given as a string (``"CLUSTERING"``) used to be taken: it meant broadcasting, and
    the first heartbeat crashed the consumer."""
    check_start_position(consume_from, consume_timestamp_ms)
    if not isinstance(message_model, MessageModel):
        names = ", ".join(f"MessageModel.{m.name}" for m in MessageModel)
        raise ValueError(f"message_model must be one of {names}, got {message_model!r}")
    if not isinstance(orderly, bool):
        raise ValueError(f"orderly must be True or False, got {orderly!r}")


@dataclass(eq=False)
class _Queue:
    """One assigned queue: its process queue, pull position and tasks."""

    slot: QueueSlot
    subscription: SubscriptionData
    next_offset: int
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    lock_changed: trio.Event = field(default_factory=trio.Event)
    pull_scope: trio.CancelScope | None = None
    """The pull in flight (cancelled when the topic's subscription changes)."""
    pulling: trio.CancelScope = field(default_factory=trio.CancelScope)
    """The pull loop (cancelled first when the consumer closes)."""
    owned: bool = False
    """Orderly: this member has held the queue's broker lock since it was added; only then is
    its offset its own to record and write back."""
    stalled: bool = False
    """Its pulls stalled past ``pull_max_idle_ms``: pulling stopped, offset not persisted,
    re-created by the next rebalance (see the module docstring)."""


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


class PushConsumer:
    """Consumes subscribed topics in the background; see the module docstring."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        orderly: bool = False,
        allocate_strategy: AllocateMessageQueueStrategy | None = None,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_interval_ms: int = 0,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        pull_threshold_for_topic: int = -1,
        pull_threshold_size_for_topic_mib: int = -1,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        suspend_timeout_ms: int = 15_000,
        suspend_current_queue_ms: int = 1000,
        pull_max_idle_ms: int = 120_000,
        persist_interval: float = 5.0,
        rebalance_interval: float = 20.0,
        offset_dir: Path | None = None,
        instance_name: str | None = None,
        await_termination_ms: int = AWAIT_TERMINATION_MS,
        consume_timeout_min: int = CONSUME_TIMEOUT_MIN,
    ) -> None:
        validate_group(group)
        validate_consume_timeout(consume_timeout_min)
        if not await_termination_ms >= 0:
            raise ValueError(f"await_termination_ms must be >= 0, got {await_termination_ms}")
        if isinstance(consume_thread_max, bool) or not isinstance(consume_thread_max, int):
            raise ValueError(
                f"consume_thread_max must be a whole number, got {consume_thread_max!r}"
            )
        if consume_thread_max <= 0:
            raise ValueError(f"consume_thread_max must be > 0, got {consume_thread_max}")
        check_flow_control(
            consume_message_batch_max_size=consume_message_batch_max_size,
            pull_batch_size=pull_batch_size,
            pull_interval_ms=pull_interval_ms,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue_mib=pull_threshold_size_for_queue_mib,
            pull_threshold_for_topic=pull_threshold_for_topic,
            pull_threshold_size_for_topic_mib=pull_threshold_size_for_topic_mib,
            consume_concurrently_max_span=consume_concurrently_max_span,
        )
        if suspend_current_queue_ms < 0:
            raise ValueError(
                f"suspend_current_queue_ms must be >= 0, got {suspend_current_queue_ms}"
            )
        check_consume_options(
            consume_from=consume_from,
            consume_timestamp_ms=consume_timestamp_ms,
            message_model=message_model,
            orderly=orderly,
        )
        check_intervals(persist_interval=persist_interval, rebalance_interval=rebalance_interval)
        self.group = group
        self.consume_from = consume_from
        self.consume_timestamp_ms = default_consume_timestamp_ms(consume_timestamp_ms)
        self.message_model = message_model
        self.orderly = orderly
        self.strategy: AllocateMessageQueueStrategy = (
            allocate_strategy or AllocateMessageQueueAveragely()
        )
        self.consume_thread_max = consume_thread_max
        self.batch_max = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_interval_s = pull_interval_ms / 1000
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size = pull_threshold_size_for_queue_mib * 1024 * 1024
        self.pull_threshold_for_topic = pull_threshold_for_topic
        self.pull_threshold_size_for_topic = (
            pull_threshold_size_for_topic_mib * 1024 * 1024
            if pull_threshold_size_for_topic_mib > 0
            else -1
        )
        self.max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.suspend_timeout_ms = suspend_timeout_ms
        self.suspend_current_queue_s = suspend_pause_s(suspend_current_queue_ms)
        self.pull_max_idle_ms = pull_max_idle_ms
        self.persist_interval = persist_interval
        self.rebalance_interval = rebalance_interval
        self.offset_dir = offset_dir
        self.instance_name = instance_name
        self.await_termination_s = await_termination_ms / 1000
        self.consume_timeout_s = consume_timeout_min * 60.0
        self._own_instance = instance is None
        self._instance = instance or ClientInstance(ClientConfig.create(namesrv))
        pause_s = max(PULL_RETRY_DELAY_S, self.pull_interval_s)
        longest_pass_ms = (
            suspend_timeout_ms + (self._instance.config.request_timeout_s + pause_s) * 1000
        )
        if pull_max_idle_ms < 2 * longest_pass_ms:
            raise ValueError(
                f"pull_max_idle_ms ({pull_max_idle_ms}) must be at least twice the longest pull "
                f"and pause: suspend_timeout_ms + the request timeout + the longer of "
                f"{PULL_RETRY_DELAY_S} s and pull_interval_ms ({longest_pass_ms:.0f} ms)"
            )
        self._subs: dict[str, tuple[SubscriptionData, Handler | None]] = {}
        self._queues: dict[MessageQueue, _Queue] = {}
        self._busy_dropped: dict[MessageQueue, _Queue] = {}
        """Orderly: queues dropped while a handler still runs on them; their broker locks are
        renewed until it returns, and a queue assigned again waits for it."""
        self._dropping: dict[MessageQueue, _Queue] = {}
        """Queues being released (:meth:`_remove_queue`): closing finishes the ones a cancelled
        round left half-way (persists their offsets, unlocks the idle ones)."""
        self._unclaimed_locks: set[MessageQueue] = set()
        """Orderly: queues locked at the broker by a round that has not added them yet."""
        self._renewing = trio.Lock()
        """Orderly: held by a renewal (:meth:`lock_all`) from its list of our queues to its
        last answer, and by every unlock: a queue released meanwhile is unlocked after the
        renewal that still counted it reached its broker, never before (the renewal would
        lock it again, for 60 s, to a member that no longer consumes it)."""
        self._round = trio.CancelScope()
        """The running rebalance round; closing cancels it."""
        self._rebalance_wakeup = trio.Event()
        self._rebalance_lock = trio.Lock()
        self._offsets: OffsetStore
        self._consumption: Consumption | None = None
        self._concurrent: ConcurrentService | None = None
        self._orderly: OrderlyService | None = None
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._file_offsets: LocalFileOffsetStore | None = None
        self._running = False
        self._started_at_ms = 0
        self._resumed = trio.Event()
        """Set unless suspended: the pull loops wait on it (:meth:`suspend`)."""
        self._resumed.set()
        self.rebalanced = trio.Event()
        """Set after every rebalance round (tests and tools wait on it)."""
        self.closed = trio.Event()
        """Set once the consumer has fully closed."""

    @property
    def instance(self) -> ClientInstance:
        """The client instance this consumer uses."""
        return self._instance

    @property
    def close_bound_s(self) -> float:
        """The longest a close takes: releasing the queues (``CLOSE_TIMEOUT_S``) or the
        handlers' ``await_termination_ms``, whichever is longer, then unlocking the busy
        orderly queues and leaving the group."""
        return (
            max(CLOSE_TIMEOUT_S, self.await_termination_s) + CLOSE_TIMEOUT_S + UNREGISTER_TIMEOUT_S
        )

    @property
    def clustering(self) -> bool:
        """True in ``CLUSTERING`` (the default), False in ``BROADCASTING``."""
        return self.message_model is MessageModel.CLUSTERING

    @property
    def uses_locks(self) -> bool:
        """Orderly clustering: a queue is consumed only while the broker locks it to us.
        Orderly broadcasting needs no locks (every member reads every queue), as RocketMQ."""
        return self.orderly and self.clustering

    # ------------------------------------------------------------------ subscriptions

    def subscribe(
        self,
        topic: str,
        expression: SubscriptionExpression = "*",
        handler: Handler | None = None,
    ) -> None:
        """Consume ``topic``'s messages matching ``expression`` with ``handler``.

        ``expression`` is a TAG expression, or a :class:`common.subscription.MessageSelector`
        (``MessageSelector.by_sql(...)`` needs brokers with ``enablePropertyFilter=true``);
        ValueError if it is not valid. The group's retry topic is always read whole (``"*"``).

        Allowed before or after the consumer starts; the next rebalance (at once if running)
        assigns the topic's queues.
        """
        if handler is None and topic != retry_topic(self.group):
            raise MQClientError(CLIENT_ERROR, f"subscribe({topic!r}) needs a handler")
        self._subs[topic] = (build_subscription(topic, expression, _now_ms_safe()), handler)
        if self._running:
            for mq, q in self._queues.items():  # pulls in flight filter with the old expression
                if mq.topic == topic and q.pull_scope is not None:
                    q.pull_scope.cancel()
            self._instance.heartbeat_soon()
            self.rebalance_soon()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are dropped at the next rebalance)."""
        self._subs.pop(topic, None)
        if self._running:
            self.rebalance_soon()

    def _handler_of(self, topic: str) -> Handler | None:
        """The handler subscribed for ``topic`` (None if it is no longer subscribed)."""
        entry = self._subs.get(topic)
        return None if entry is None else entry[1]

    def consumer_data(self) -> ConsumerData:
        """This consumer's heartbeat entry."""
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.message_model,
            consume_from_where=self.consume_from,
            subscriptions=tuple(sub for _, (sub, _) in sorted(self._subs.items())),
        )

    def assignment(self) -> list[MessageQueue]:
        """The queues this member consumes now, sorted."""
        return sorted(self._queues)

    # ------------------------------------------------------------------ admin requests

    def running_info(self) -> ConsumerRunningInfo:
        """What ``mqadmin consumerStatus`` shows of this member (RocketMQ's
        ``DefaultMQPushConsumerImpl.consumerRunningInfo``): its settings, subscriptions and
        one row per assigned queue, and per subscribed topic its pull and consume figures (see
        :mod:`client.running_info`)."""
        epoch = epoch_offset_ms()
        queues = tuple(
            process_queue_info(
                mq, q.slot.pq, self._offsets.table.get(mq), epoch, uses_locks=self.uses_locks
            )
            for mq, q in sorted(self._queues.items())
        )
        subscriptions = self.consumer_data().subscriptions
        status = consume_status_table(self._instance.consumer_stats, self.group, subscriptions)
        return ConsumerRunningInfo(self._properties(), subscriptions, queues, status)

    def _properties(self) -> dict[str, str]:
        """The settings, under RocketMQ's names, and its ``PROP_*`` properties."""
        props = {
            "consumerGroup": self.group,
            "messageModel": self.message_model.name,
            "consumeFromWhere": self.consume_from.name,
            "consumeTimestamp": str(self.consume_timestamp_ms),
            "allocateMessageQueueStrategy": type(self.strategy).__name__,
            "consumeThreadMax": str(self.consume_thread_max),
            "consumeMessageBatchMaxSize": str(self.batch_max),
            "pullBatchSize": str(self.pull_batch_size),
            "pullInterval": str(round(self.pull_interval_s * 1000)),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "pullThresholdForTopic": str(self.pull_threshold_for_topic),
            "consumeConcurrentlyMaxSpan": str(self.max_span),
            "maxReconsumeTimes": str(self.max_reconsume_times),
            "consumeTimeout": str(round(self.consume_timeout_s / 60)),
            "suspended": str(self.suspended).lower(),
            PROP_CONSUME_ORDERLY: str(self.orderly).lower(),
            PROP_THREADPOOL_CORE_SIZE: str(self.consume_thread_max),
            PROP_CONSUMER_START_TIMESTAMP: str(self._started_at_ms),
        }
        return props

    async def consume_message_directly(self, msg: ReceivedMessage) -> ConsumeMessageDirectlyResult:
        """Run the handler of the message's topic on ``msg`` once and say how it ended,
        committing nothing and sending nothing back (``mqadmin queryMsgById -d``; see
        :mod:`client.running_info`). MQClientError when no handler takes the topic."""
        restore_retry_topic([msg], self.group)
        handler = self._handler_of(msg.topic)
        if handler is None:
            raise MQClientError(
                CLIENT_ERROR, f"the consumer group {self.group} does not subscribe to {msg.topic}"
            )
        return await consume_directly(handler, msg, order=self.orderly)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> PushConsumer:
        if self._own_instance:
            await self._instance.__aenter__()
        try:
            await self._start()
        except BaseException:
            self._close_file_offsets()
            if self._own_instance:
                await self._instance.__aexit__(None, None, None)
            raise
        return self

    def _close_file_offsets(self) -> None:
        if self._file_offsets is not None:
            self._file_offsets.close()

    async def _start(self) -> None:
        instance = self._instance
        if self.clustering:
            self._offsets = RemoteOffsetStore(instance, self.group)
            self._subs.setdefault(
                retry_topic(self.group), (build_subscription(retry_topic(self.group), "*"), None)
            )
        else:
            # keyed by ip@instance_name, stable across restarts (RocketMQ keeps "DEFAULT" too)
            name = self.instance_name or instance.config.instance_name or "DEFAULT"
            store = LocalFileOffsetStore(
                f"{instance.config.client_ip}@{name}", self.group, self.offset_dir
            )
            await trio.to_thread.run_sync(store.open)  # RocketMQ's offsetStore.load() at start
            self._file_offsets = store
            self._offsets = store
        self._consumption = Consumption(
            self._handler_of,
            self._send_back,
            self._record_offset,
            group=self.group,
            consume_thread_max=self.consume_thread_max,
            clustering=self.clustering,
            max_reconsume_times=self.max_reconsume_times,
            stats=instance.consumer_stats,
        )
        self._started_at_ms = int(time.time() * 1000)
        instance.register_consumer(
            self.group,
            self.consumer_data,
            running_info=self.running_info,
            consume_directly=self.consume_message_directly,
        )
        instance.consumer_ids_changed.append(self._on_ids_changed)
        instance.offset_reset.append(self._on_offset_reset)
        # from here on no checkpoint: a cancellation (Ctrl+C in the blocking start) landing
        # after the nursery is entered by hand would leave it open (trio's cancel stack
        # corrupted) and the group registered
        cm = trio.open_nursery()
        self._nursery = await cm.__aenter__()
        self._nursery_cm = cm
        self._running = True
        if self.orderly:
            self._orderly = OrderlyService(
                self._consumption, self.batch_max, self.suspend_current_queue_s
            )
            if self.uses_locks:
                self._nursery.start_soon(self.lock_loop)
        else:
            self._concurrent = ConcurrentService(
                self._consumption, self.batch_max, self.consume_thread_max
            )
            self._nursery.start_soon(self._concurrent.run)  # submit() queues until it runs
            self._nursery.start_soon(self.clean_expired_loop, self._concurrent)
        self._nursery.start_soon(self.rebalance_loop)
        self._nursery.start_soon(self.persist_loop)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._nursery is not None:
                give_up_at = trio.current_time() + self.await_termination_s
                try:
                    # a round in progress stops where it is (a queue half released is finished
                    # by _release_all): it must not spend the close's time dropping queues
                    self._running = False
                    self._round.cancel()
                    with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
                        async with self._rebalance_lock:
                            await self._release_all()
                finally:  # the nursery entered by hand is always left, or trio's stack breaks
                    self._nursery.cancel_scope.cancel()
                    await self._end_handlers(give_up_at)
                    assert self._nursery_cm is not None
                    # raises the children's Cancelled when a scope around the block was
                    # cancelled (always, closed by the blocking facade): the group leaves in
                    # ``finally``
                    await self._nursery_cm.__aexit__(None, None, None)
        finally:
            try:
                await self._leave_group()
            finally:
                try:
                    self._close_file_offsets()
                    if self._own_instance:
                        await self._instance.__aexit__(exc_type, exc, tb)
                finally:
                    self.closed.set()

    async def _leave_group(self) -> None:
        """Stop listening to the instance and take the group out of its heartbeats (and, on a
        shared instance, out of the brokers' member lists at once)."""
        self._running = False
        with contextlib.suppress(ValueError):
            self._instance.consumer_ids_changed.remove(self._on_ids_changed)
        with contextlib.suppress(ValueError):
            self._instance.offset_reset.remove(self._on_offset_reset)
        self._instance.unregister_consumer(self.group)
        if not self._own_instance:
            with trio.CancelScope(shield=True):
                await self._instance.unregister_client(consumer_group=self.group)

    def abandon_handler_in(self, thread_id: int) -> bool:
        """Closing from inside a handler (the blocking ``close()`` called by one): the close
        does not wait for the handler call running in thread ``thread_id`` (it waits for the
        close); its messages are not acknowledged. False when no call runs there."""
        return self._consumption is not None and bool(self._consumption.abandon_threads(thread_id))

    @property
    def suspended(self) -> bool:
        """True between :meth:`suspend` and :meth:`resume` (RocketMQ's ``isPause()``)."""
        return not self._resumed.is_set()

    def suspend(self) -> None:
        """Stop pulling until :meth:`resume` (RocketMQ's ``suspend()``); see the module
        docstring's "Suspend". The messages already buffered, and those a pull the broker
        holds now brings, are still consumed. Idempotent; ClientClosedError unless running
        (before the consumer started, once its close began)."""
        self._check_running()
        if not self.suspended:
            self._resumed = trio.Event()
            log.info("%s: suspended: no new pull until resume()", self.group)

    def resume(self) -> None:
        """Pull again at once after :meth:`suspend`, and run a rebalance round (RocketMQ's
        ``resume()``). Idempotent (a consumer not suspended is left as it is);
        ClientClosedError unless running."""
        self._check_running()
        if self.suspended:
            self._resumed.set()
            log.info("%s: resumed", self.group)
            self.rebalance_soon()

    async def run(self, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        """Enter, report a scope whose cancellation closes the consumer, and serve."""
        with trio.CancelScope() as scope:
            async with self:
                task_status.started(scope)
                await trio.sleep_forever()

    def _check_running(self) -> trio.Nursery:
        if not self._running or self._nursery is None:
            raise ClientClosedError(f"push consumer {self.group}")
        return self._nursery

    async def _release_all(self) -> None:
        """Closing: stop pulling, let the handlers in flight finish for up to
        ``CLOSE_DRAIN_S`` (what they finish counts), persist every offset at once, then drop
        every queue and release the orderly locks of the idle ones.

        The queues a cancelled round was releasing, or had locked but not added, are
        finished here too."""
        queues = dict(self._queues)
        queues.update((mq, q) for mq, q in self._dropping.items() if mq not in queues)
        self._dropping.clear()
        for q in queues.values():
            q.pulling.cancel()
        with trio.move_on_after(min(CLOSE_DRAIN_S, self.await_termination_s)):
            if self._concurrent is not None:
                await self._concurrent.drain()
            if self._orderly is not None:
                await self._orderly.drain([q.slot for q in queues.values()])
        if self._concurrent is not None:
            self._concurrent.count_finished_batches()
        now = _now_ms()
        async with trio.open_nursery() as nursery:
            for mq, q in queues.items():
                if q.owned:  # else orderly, never locked here: the owner's offset
                    nursery.start_soon(self._write_back, mq, self._is_stalled(q, now))
        idle = sorted(self._unclaimed_locks - set(queues))
        self._unclaimed_locks.clear()
        for mq, q in queues.items():
            self._queues.pop(mq, None)
            q.slot.pq.dropped = True
            q.scope.cancel()
            self._offsets.remove(mq)
            if q.slot.consuming.locked():
                self._busy_dropped[mq] = q  # unlocked once its handler returns or is abandoned
            else:
                idle.append(mq)
        if self.uses_locks:
            await self._unlock(idle)

    async def _end_handlers(self, give_up_at: float) -> None:
        """Closing, after the offsets are persisted: wait until ``give_up_at`` for the handler
        calls still running in worker threads (and orderly ``async def`` ones), abandon the
        rest (logged; an ``async def`` one is cancelled), then unlock the orderly queues that
        were busy (RocketMQ's ``unlockAll`` after ``awaitTerminationMillisWhenShutdown``)."""
        consumption = self._consumption
        if consumption is None:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_at(give_up_at):
                await consumption.wait_threads_returned()
            abandoned = consumption.abandon_threads()
            if abandoned:
                log.warning(
                    "%s: %d message handler(s) still running %.3g s after the close began were "
                    "abandoned; their messages were not acknowledged and will be consumed again",
                    self.group,
                    abandoned,
                    self.await_termination_s,
                )
            busy = sorted(self._busy_dropped)
            self._busy_dropped.clear()
            if busy and self.uses_locks:
                with trio.move_on_after(CLOSE_TIMEOUT_S):
                    await self._unlock(busy)

    # ------------------------------------------------------------------ rebalance

    def _on_ids_changed(self, group: str) -> None:
        if group == self.group:
            self.rebalance_soon()

    def _on_offset_reset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        if group == self.group and self._running and self._nursery is not None:
            self._nursery.start_soon(self.reset_offsets, offsets)

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        """Move assigned queues to new offsets (an admin reset): each queue in ``offsets`` that
        is ours drops what it buffered, stores the offset and pulls again from there.

        Every new offset is taken locally first, and the old position's work stops counting
        at once: a close meanwhile persists the new offsets, not the old ones (the broker
        already holds the new ones)."""
        async with self._rebalance_lock:
            ours = {mq: offset for mq, offset in sorted(offsets.items()) if mq in self._queues}
            for mq, offset in ours.items():
                self._queues[mq].slot.pq.dropped = True
                self._offsets.update(mq, offset, increase_only=False)
            for mq, offset in ours.items():
                if mq not in self._queues or not self._running:
                    continue  # closing: the close persists the new offset
                await self._remove_queue(mq)  # persists the new offset
                await self._add_queue(mq, locked=False)
                log.info("%s: %s reset to offset %d", self.group, mq, offset)

    def rebalance_soon(self) -> None:
        """Run a rebalance round now instead of at the next period."""
        self._rebalance_wakeup.set()

    async def rebalance_loop(self) -> None:
        """Rebalance at start, every ``rebalance_interval`` and when woken; never returns."""
        await rebalance.rebalance_loop(
            self._instance,
            lambda: list(self._subs),
            self.do_rebalance,
            self._fresh_wakeup,
            self.rebalance_interval,
        )

    def _fresh_wakeup(self) -> trio.Event:
        self._rebalance_wakeup = trio.Event()
        return self._rebalance_wakeup

    async def do_rebalance(self) -> None:
        """One rebalance round over every subscribed topic."""
        async with self._rebalance_lock:
            if not self._running:
                return
            with trio.CancelScope() as self._round:
                wanted = await rebalance.wanted_queues(
                    self._instance,
                    self.group,
                    self.strategy,
                    list(self._subs),
                    self._queues,
                    clustering=self.clustering,
                )
                await self._apply(wanted)
            self.rebalanced.set()
            self.rebalanced = trio.Event()

    def _is_stalled(self, q: _Queue, now_ms: int) -> bool:
        """See the module docstring's "Stalls"."""
        return q.stalled or q.slot.pq.is_pull_expired(now_ms, self.pull_max_idle_ms)

    def _stall(self, q: _Queue, why: str) -> None:
        q.stalled = True
        log.warning(
            "%s: %s %s (was this process frozen?); re-creating it from the broker's offset",
            self.group,
            q.slot.mq,
            why,
        )
        self.rebalance_soon()

    async def _apply(self, wanted: set[MessageQueue]) -> None:
        now = _now_ms()
        for mq, q in list(self._queues.items()):
            if mq not in wanted or self._is_stalled(q, now):
                await self._remove_queue(mq)
        added = sorted(wanted - set(self._queues))
        if not added:
            return
        if self.uses_locks:
            self._unclaimed_locks.update(added)  # maybe locked once asked: a cancelled round
            locked = await self._lock(added)  # leaves them to the close to unlock
            self._unclaimed_locks.difference_update(set(added) - locked)
        else:
            locked = set()
        for mq in added:
            await self._add_queue(mq, mq in locked)
            self._unclaimed_locks.discard(mq)

    async def _add_queue(self, mq: MessageQueue, locked: bool) -> None:
        try:
            offset = await self._start_offset(mq)
        except MQClientError as exc:
            log.warning("cannot start %s yet (next rebalance retries): %s", mq, exc)
            return
        if not self._running or self._nursery is None or mq.topic not in self._subs:
            return
        nursery = self._nursery
        sub, _ = self._subs[mq.topic]
        pq = ProcessQueue(_now_ms())
        locked = locked or not self.uses_locks
        pq.locked, pq.last_lock_ms = locked, _now_ms()
        busy = self._busy_dropped.get(mq)  # its old handler still runs: share its lock
        consuming = busy.slot.consuming if busy is not None else trio.Lock()
        slot = QueueSlot(mq, pq, trio.Event(), consuming)
        q = _Queue(slot, sub, offset, owned=locked)
        self._queues[mq] = q
        if q.owned:  # an orderly queue not locked yet: the owner's offset, not ours
            self._offsets.update(mq, offset, increase_only=False)
        nursery.start_soon(self._queue_tasks, q)
        log.info("%s: consuming %s from offset %d", self.group, mq, offset)

    async def _start_offset(self, mq: MessageQueue) -> int:
        """The stored offset, else where ``consume_from`` says (``computePullFromWhere``): a
        retry topic (``%RETRY%...``) from its start, except under ``CONSUME_FROM_TIMESTAMP``,
        which takes it from its end, as RocketMQ's ``RebalancePushImpl`` does."""
        stored = await self._offsets.read(mq)
        if stored is not None:
            return stored
        if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            if self.consume_from is not ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
                return 0
            return await offset_from_where(
                self._instance, mq, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
            )
        return await offset_from_where(
            self._instance, mq, self.consume_from, self.consume_timestamp_ms
        )

    async def _remove_queue(self, mq: MessageQueue) -> None:
        q = self._queues.pop(mq, None)
        if q is None:
            return
        self._dropping[mq] = q  # until released: closing finishes it if this is cancelled
        stalled = self._is_stalled(q, _now_ms())
        if self._concurrent is not None:  # while not dropped yet: what finished is recorded
            self._concurrent.count_finished_batches(q.slot)
        q.slot.pq.dropped = True
        q.scope.cancel()
        idle = True
        if self.orderly:
            idle = False
            self._busy_dropped[mq] = q  # its lock is renewed while we wait for the handler
            with trio.move_on_after(DROP_WAIT_S):
                async with q.slot.consuming:
                    idle = True
            if idle:
                del self._busy_dropped[mq]
        if q.owned:  # else orderly, never locked here: the offset is the owner's to write
            await self._write_back(mq, stalled)
        self._offsets.remove(mq)
        if self._dropping.get(mq) is q:
            del self._dropping[mq]
        if idle and self.uses_locks:
            await self._unlock([mq])
        elif not idle and self._nursery is not None:
            # a handler is still on this queue: keep (and renew) the broker lock until it
            # returns, as RocketMQ does, or the new owner would consume the queue meanwhile
            self._nursery.start_soon(self._unlock_when_idle, q)
        log.info("%s: released %s", self.group, mq)

    async def _write_back(self, mq: MessageQueue, stalled: bool) -> None:
        """Persist a released queue's offset, unless it stalled and another member has
        consumed past it meanwhile."""
        if stalled and await self._offsets.overtaken(mq):
            log.warning(
                "%s: another member consumed %s past this one meanwhile; keeping its offset",
                self.group,
                mq,
            )
        else:
            await self._offsets.persist([mq])

    async def _unlock_when_idle(self, q: _Queue) -> None:
        """Orderly: unlock a dropped queue once its in-flight handler has returned."""
        async with q.slot.consuming:
            pass
        mq = q.slot.mq
        if self._busy_dropped.get(mq) is q:
            del self._busy_dropped[mq]
        if mq not in self._queues and self.uses_locks:  # not assigned to us again meanwhile
            await self._unlock([mq])

    # ------------------------------------------------------------------ pulling

    async def _queue_tasks(self, q: _Queue) -> None:
        with q.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pull_task, q)
                if self._orderly is not None:
                    nursery.start_soon(self._orderly.run_queue, q.slot, lambda: self._locked(q))

    async def _pull_task(self, q: _Queue) -> None:
        with q.pulling:
            await self._pull_loop(q)

    def _locked(self, q: _Queue) -> bool:
        if not self.uses_locks:
            return True
        pq = q.slot.pq
        return pq.locked and not pq.is_lock_expired(_now_ms())

    async def _pull_loop(self, q: _Queue) -> None:
        while not q.stalled:
            try:
                await self._pull_once(q)
            except MQClientError as exc:
                pq, now = q.slot.pq, _now_ms()
                if pq.is_pull_expired(now, self.pull_max_idle_ms):  # it failed across a freeze
                    self._stall(q, f"failed after {now - pq.last_pull_ms} ms")
                    return
                log.warning("pull from %s failed, retrying: %s", q.slot.mq, exc)
                pq.last_pull_ms = now  # the pause below is not a stall
                await trio.sleep(PULL_RETRY_DELAY_S)

    async def _wait_resumed(self) -> None:
        """Suspended: wait for :meth:`resume`, at most ``PULL_TIME_DELAY_S_WHEN_SUSPEND`` (the
        caller's next pass marks the queue alive and waits again)."""
        with trio.move_on_after(PULL_TIME_DELAY_S_WHEN_SUSPEND):
            await self._resumed.wait()

    def _queue_limits(self, topic: str) -> tuple[int, int]:
        """Per-queue (count, bytes) limits; topic-level limits, when set, are shared out
        among the topic's assigned queues (``messageQueueChanged``)."""
        count, size = self.pull_threshold_for_queue, self.pull_threshold_size
        if self.pull_threshold_for_topic > 0 or self.pull_threshold_size_for_topic > 0:
            n = max(1, sum(1 for mq in self._queues if mq.topic == topic))
            if self.pull_threshold_for_topic > 0:
                count = max(1, self.pull_threshold_for_topic // n)
            if self.pull_threshold_size_for_topic > 0:
                size = max(1, self.pull_threshold_size_for_topic // n)
        return count, size

    def _over_limits(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        count, size = self._queue_limits(mq.topic)
        if pq.count > count or pq.size_bytes > size:
            return True
        return not self.orderly and pq.span > self.max_span

    async def _pull_once(self, q: _Queue) -> None:
        slot = q.slot
        pq = slot.pq
        issued = _now_ms()
        if pq.is_pull_expired(issued, self.pull_max_idle_ms):
            self._stall(q, f"was not pulled for {issued - pq.last_pull_ms} ms")
            return
        pq.last_pull_ms = issued  # RocketMQ's lastPullTimestamp: each pass, even a paused one
        if self.suspended:
            await self._wait_resumed()
            return
        if self._over_limits(slot.mq, pq):
            await trio.sleep(FLOW_CONTROL_PAUSE_S)
            return
        if self.orderly and not self._locked(q):
            await self._try_lock(q)
            return
        entry = self._subs.get(slot.mq.topic)
        if entry is not None:
            q.subscription = entry[0]  # the current expression: subscribe() may change it
        addr = await self._instance.find_broker_addr(slot.mq)
        offset = q.next_offset
        cmd = api.pull_request(
            group=self.group,
            mq=slot.mq,
            offset=offset,
            max_msgs=self.pull_batch_size,
            subscription=q.subscription,
            suspend_timeout_ms=self.suspend_timeout_ms,
        )
        timeout = self.suspend_timeout_ms / 1000 + self._instance.config.request_timeout_s
        with trio.CancelScope() as scope:
            q.pull_scope = scope
            resp = await self._instance.invoke(addr, cmd, timeout)
        q.pull_scope = None
        if scope.cancelled_caught:
            return  # the subscription changed: pull again from the same offset
        answered = _now_ms()
        if answered - issued > self.pull_max_idle_ms:  # longer than any pull can: maybe stale
            self._stall(q, f"was answered after {answered - issued} ms")
            return
        pq.last_pull_ms = answered
        result = api.parse_pull(resp, slot.mq, q.subscription, addr, offset)
        if pq.dropped:
            return
        if result.status is api.PullStatus.FOUND:  # RocketMQ's incPullRT / incPullTPS
            stats = self._instance.consumer_stats
            stats.inc_pull(self.group, slot.mq.topic, answered - issued, len(result.messages))
        if result.status is api.PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "offset %d of %s is illegal; moving to %d",
                q.next_offset,
                slot.mq,
                result.next_begin_offset,
            )
            self._offsets.update(slot.mq, result.next_begin_offset, increase_only=False)
        q.next_offset = result.next_begin_offset
        if result.messages:
            pq.put(result.messages)
            if self._concurrent is not None:
                self._concurrent.submit(slot, result.messages)
            else:
                slot.wakeup.set()
            if self.pull_interval_s > 0:  # RocketMQ's pullInterval: only after messages came
                await trio.sleep(self.pull_interval_s)
        elif pq.count == 0:
            self._offsets.update(slot.mq, result.next_begin_offset)

    # ------------------------------------------------------------------ offsets and send-back

    def _record_offset(self, slot: QueueSlot, offset: int) -> None:
        self._offsets.update(slot.mq, offset)

    async def clean_expired_loop(self, service: ConcurrentService) -> None:
        """Concurrent: every ``consume_timeout_min``, send back the messages whose handler
        has run longer than that (RocketMQ's ``cleanExpireMsg``); never returns."""
        while True:
            await trio.sleep(self.consume_timeout_s)
            await service.clean_expired(self.consume_timeout_s)

    async def persist_loop(self) -> None:
        """Persist every assigned queue's offset every ``persist_interval`` (not a stalled
        queue's); never returns."""
        while True:
            await trio.sleep(self.persist_interval)
            now = _now_ms()
            await self._offsets.persist(
                [mq for mq, q in self._queues.items() if not self._is_stalled(q, now)]
            )

    async def _send_back(self, msg: ReceivedMessage, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to the message's broker, else the message sent to the
        retry topic on another broker (:mod:`client.send_back`); True when it was stored."""
        try:
            addr = await self._instance.find_broker_addr(msg.queue)
            cmd = api.send_back_request(self.group, msg, delay_level, self.max_reconsume_times)
            api.check_success(await self._instance.invoke(addr, cmd), addr)
        except MQClientError as exc:
            log.warning(
                "sending %s back to the broker failed: %s; sending it to the retry topic",
                msg.msg_id,
                exc,
            )
            return await send_to_retry_topic(
                self._instance, msg, self.group, self.max_reconsume_times
            )
        return True

    # ------------------------------------------------------------------ orderly locks

    async def _lock(self, mqs: Sequence[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ at each queue's broker; the queues now locked to us."""
        return (await self._lock_answered(mqs))[0]

    async def _lock_answered(
        self, mqs: Sequence[MessageQueue]
    ) -> tuple[set[MessageQueue], set[MessageQueue]]:
        """:meth:`_lock`, and the queues whose broker answered (a request that failed says
        nothing about a lock: RocketMQ leaves such queues' lock state as it was)."""
        locked: set[MessageQueue] = set()
        answered: set[MessageQueue] = set()
        for broker, group in _by_broker(mqs).items():
            addr = self._instance.broker_addr(broker)
            if addr is None:
                continue
            cmd = api.lock_batch_request(
                RequestCode.LOCK_BATCH_MQ, self.group, self._instance.client_id, group
            )
            try:
                locked |= api.parse_lock_batch(await self._instance.invoke(addr, cmd), addr)
            except MQClientError as exc:
                log.warning("locking queues on %s failed: %s", broker, exc)
                continue
            answered.update(group)
        return locked, answered

    async def _unlock(self, mqs: Sequence[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ at each queue's broker, once no renewal is on its way
        (:attr:`_renewing`); failures are logged (the broker's lock then expires)."""
        async with self._renewing:
            await self._unlock_now(mqs)

    async def _unlock_now(self, mqs: Sequence[MessageQueue]) -> None:
        for broker, group in _by_broker(mqs).items():
            addr = self._instance.broker_addr(broker)
            if addr is None:
                continue
            cmd = api.lock_batch_request(
                RequestCode.UNLOCK_BATCH_MQ, self.group, self._instance.client_id, group
            )
            try:
                api.check_success(await self._instance.invoke(addr, cmd), addr)
            except MQClientError as exc:
                log.warning("unlocking queues on %s failed: %s", broker, exc)

    async def _try_lock(self, q: _Queue) -> None:
        """Orderly: lock one queue now (a previous owner may still hold it); pause if refused."""
        if q.slot.mq in await self._lock([q.slot.mq]):
            if not q.owned:
                await self._take_over(q)
            q.slot.pq.locked, q.slot.pq.last_lock_ms = True, _now_ms()
            q.slot.wakeup.set()
            return
        with trio.move_on_after(LOCK_RETRY_S):
            await q.lock_changed.wait()

    async def _take_over(self, q: _Queue) -> None:
        """Orderly: the queue's first lock here. The previous owner may have committed more
        since the offset was read: start from the stored one (RocketMQ's
        ``previouslyLocked``); later re-locks keep the position consumed here."""
        q.next_offset = await self._start_offset(q.slot.mq)
        self._offsets.update(q.slot.mq, q.next_offset, increase_only=False)
        q.owned = True

    async def lock_loop(self) -> None:
        """Orderly: renew the locks of every assigned queue every 20 s; never returns."""
        while True:
            await trio.sleep(LOCK_RENEW_INTERVAL_S)
            await self.lock_all()

    async def lock_all(self) -> None:
        """Lock (or renew) every assigned queue, and the dropped ones a handler still runs on;
        queues refused are paused. A broker that did not answer changes nothing. A queue
        released meanwhile is unlocked only after this (:attr:`_renewing`)."""
        async with self._renewing:
            queues = dict(self._queues)
            busy = [mq for mq in self._busy_dropped if mq not in queues]
            locked, answered = await self._lock_answered([*queues, *busy])
        now = _now_ms()
        for mq, q in queues.items():
            if mq not in answered:
                continue
            pq = q.slot.pq
            was = self._locked(q)
            if mq in locked and not q.owned:
                try:
                    await self._take_over(q)
                except MQClientError as exc:  # its pull loop takes it over when it can
                    log.warning("cannot read the offset of %s yet: %s", mq, exc)
                    continue
            pq.locked = mq in locked
            if pq.locked:
                pq.last_lock_ms = now
            if self._locked(q) != was:
                q.lock_changed.set()
                q.lock_changed = trio.Event()
                q.slot.wakeup.set()


def validate_consume_timeout(consume_timeout_min: int) -> None:
    """``consume_timeout_min`` must be a whole number of minutes in
    [1, ``MAX_CONSUME_TIMEOUT_MIN``] (ValueError naming the range and the value)."""
    if (
        isinstance(consume_timeout_min, bool)
        or not isinstance(consume_timeout_min, int)
        or not 1 <= consume_timeout_min <= MAX_CONSUME_TIMEOUT_MIN
    ):
        shown = repr(consume_timeout_min)
        if len(shown) > 40:  # a huge int: its digits say nothing
            shown = f"{shown[:20]}... ({len(shown)} characters)"
        raise ValueError(
            f"consume_timeout_min must be a whole number of minutes in "
            f"[1, {MAX_CONSUME_TIMEOUT_MIN}], got {shown}"
        )


def _by_broker(mqs: Sequence[MessageQueue]) -> dict[str, list[MessageQueue]]:
    out: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        out.setdefault(mq.broker_name, []).append(mq)
    return out


def _now_ms_safe() -> int:
    """The trio clock in ms inside a run, else 0 (subscriptions made before the loop runs)."""
    try:
        return _now_ms()
    except RuntimeError:
        return 0
