"""Producer queue selection and latency fault tolerance, as pure state machines.

- :func:`publish_queues`: the topic's writable queues from its route (``TopicPublishInfo``):
  for each queue data sorted by broker name, with write permission and a master address,
  ``MessageQueue(topic, broker, 0..writeQueueNums-1)``.
- :class:`RoundRobinSelector`: ``TopicPublishInfo#selectOneMessageQueue``: a counter (starting
  at a random int, masked to 31 bits) picks ``counter % size``; given the last failed broker it
  tries up to ``size`` queues for one on another broker, else takes the plain next queue.
- :func:`select_by_key`: ``SelectMessageQueueByHash``: ``abs(key.hashCode() % size)`` with Java's
  ``String.hashCode`` (:func:`common.hashing.java_string_hash`), so a key always maps to the
  same queue while the queue list is unchanged, in every process and in Java clients too.
- :class:`LatencyFaultTolerance` / :class:`MQFaultStrategy`: RocketMQ 5's ``MQFaultStrategy``
  tables (``latencyMax``/``notAvailableDuration``); 4.x tables are provided as ``*_V4``. An
  isolation is only ever lengthened: a later send with a shorter (or no) isolation, a fast
  success included, leaves it running (``FaultItem.updateNotAvailableDuration``). Time is
  always passed in as ``now_ms``; nothing here reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from client.message import MessageQueue
from common.hashing import java_string_hash
from common.route import MASTER_ID, PermName, TopicRouteData

LATENCY_MAX: Final = (50, 100, 550, 1800, 3000, 5000, 15000)
NOT_AVAILABLE_DURATION: Final = (0, 0, 2000, 5000, 6000, 10000, 30000)
LATENCY_MAX_V4: Final = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_V4: Final = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY: Final = 10000
"""Latency charged for a send that failed with a remoting or broker error (5.x; 4.9.8: 30000)."""

_MASK31: Final = 0x7FFFFFFF


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The queues a producer may send ``topic`` to, in RocketMQ's order."""
    masters = {
        b.broker_name for b in route.broker_datas if b.broker_addrs.get(MASTER_ID) is not None
    }
    out: list[MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if PermName.is_writeable(qd.perm) and qd.broker_name in masters:
            out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return out


class RoundRobinSelector:
    """Round-robin over a queue list (RocketMQ's ``ThreadLocalIndex`` + ``selectOneMessageQueue``).

    ``start`` is the counter's first value (random by default, as in RocketMQ).
    """

    def __init__(self, start: int | None = None) -> None:
        self._index = (random.randrange(2**31) if start is None else start) & _MASK31

    def next_index(self) -> int:
        """Advance the counter and return it (always non-negative)."""
        self._index = (self._index + 1) & _MASK31
        return self._index

    def reset(self) -> None:
        """Restart at a random position (``resetIndex``, used before latency-aware retries)."""
        self._index = random.randrange(2**31)

    def select_one(
        self,
        queues: Sequence[MessageQueue],
        last_broker_name: str | None = None,
        accept: Callable[[MessageQueue], bool] | None = None,
    ) -> MessageQueue:
        """Pick the next queue, avoiding ``last_broker_name`` when another broker has a queue.

        With ``accept``, only a queue passing it (and not on the last broker) is taken within
        one round; use :meth:`select_filtered` to learn whether any did.
        """
        if not queues:
            raise ValueError("no queue to select from")
        if last_broker_name is not None or accept is not None:
            mq = self.select_filtered(queues, last_broker_name, accept)
            if mq is not None:
                return mq
        return queues[self.next_index() % len(queues)]

    def select_filtered(
        self,
        queues: Sequence[MessageQueue],
        last_broker_name: str | None = None,
        accept: Callable[[MessageQueue], bool] | None = None,
    ) -> MessageQueue | None:
        """Up to ``len(queues)`` round-robin steps for a queue passing both filters, else None."""
        size = len(queues)
        for _ in range(size):
            mq = queues[self.next_index() % size]
            if mq.broker_name == last_broker_name:
                continue
            if accept is None or accept(mq):
                return mq
        return None


def select_by_key(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """The queue for ``key``: ``abs(key.hashCode() % size)`` (``SelectMessageQueueByHash``)."""
    if not queues:
        raise ValueError("no queue to select from")
    # Java's % truncates toward zero, so abs(h % n) == abs(h) % n.
    return queues[abs(java_string_hash(key)) % len(queues)]


def compute_not_available_duration(
    latency: int,
    latency_max: Sequence[int] = LATENCY_MAX,
    not_available_duration: Sequence[int] = NOT_AVAILABLE_DURATION,
) -> int:
    """Duration at the largest ``i`` with ``latency >= latency_max[i]``; 0 below the first step."""
    for i in range(len(latency_max) - 1, -1, -1):
        if latency >= latency_max[i]:
            return not_available_duration[i]
    return 0


@dataclass(slots=True)
class FaultItem:
    """Fault state of one broker: available again once ``now_ms >= start_timestamp``."""

    name: str
    current_latency: int
    start_timestamp: int
    reachable: bool = True

    def is_available(self, now_ms: int) -> bool:
        """True when the broker's isolation has ended."""
        return now_ms >= self.start_timestamp

    def update_not_available_duration(self, not_available_duration: int, now_ms: int) -> None:
        """Isolate until ``now_ms + not_available_duration`` if that is later than now: an
        isolation is only ever lengthened, never cut short (RocketMQ 5's
        ``FaultItem.updateNotAvailableDuration``), so a fast send that was in flight when the
        broker was isolated does not end its isolation."""
        until = now_ms + not_available_duration
        if not_available_duration > 0 and until > self.start_timestamp:
            self.start_timestamp = until


class LatencyFaultTolerance:
    """Per-broker fault items (RocketMQ's ``LatencyFaultToleranceImpl``)."""

    def __init__(self) -> None:
        self._items: dict[str, FaultItem] = {}

    def update_fault_item(
        self,
        name: str,
        current_latency: int,
        not_available_duration: int,
        now_ms: int,
        reachable: bool = True,
    ) -> None:
        """Record a send's latency and reachability; the broker is unavailable for at least
        ``not_available_duration`` ms from ``now_ms`` (an isolation that ends later is kept)."""
        item = self._items.get(name)
        if item is None:
            item = self._items[name] = FaultItem(name, current_latency, 0, reachable)
        item.current_latency = current_latency
        item.update_not_available_duration(not_available_duration, now_ms)
        item.reachable = reachable

    def is_available(self, name: str, now_ms: int) -> bool:
        """True for an unknown broker or one whose isolation has ended."""
        item = self._items.get(name)
        return item is None or item.is_available(now_ms)

    def is_reachable(self, name: str) -> bool:
        """False only for a broker last reported unreachable."""
        item = self._items.get(name)
        return item is None or item.reachable

    def remove(self, name: str) -> None:
        """Forget a broker."""
        self._items.pop(name, None)

    def item(self, name: str) -> FaultItem | None:
        """The broker's fault item, if any."""
        return self._items.get(name)

    def pick_one_at_least(self, now_ms: int) -> str | None:
        """4.x ``pickOneAtLeast``: the best broker by (available, latency, start timestamp)."""
        if not self._items:
            return None
        ranked = sorted(
            self._items.values(),
            key=lambda it: (not it.is_available(now_ms), it.current_latency, it.start_timestamp),
        )
        return ranked[0].name


class MQFaultStrategy:
    """Latency-aware queue selection (RocketMQ 5's ``MQFaultStrategy``); off by default."""

    def __init__(
        self,
        enabled: bool = False,
        latency_max: Sequence[int] = LATENCY_MAX,
        not_available_duration: Sequence[int] = NOT_AVAILABLE_DURATION,
    ) -> None:
        if len(latency_max) != len(not_available_duration):
            raise ValueError("latency_max and not_available_duration differ in length")
        self.enabled = enabled
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)
        self.tolerance = LatencyFaultTolerance()

    def update_fault_item(
        self,
        broker_name: str,
        current_latency: int,
        isolation: bool,
        now_ms: int,
        reachable: bool = True,
    ) -> None:
        """Record the outcome of one send attempt (no-op when disabled). RocketMQ 5 without
        its detector: a success or a client-side failure ``(isolation=False,
        reachable=True)``, a remoting failure ``(True, True)``, a broker's refusal ``(True,
        False)``: when every broker is isolated, one that refused is the last choice."""
        if not self.enabled:
            return
        duration = compute_not_available_duration(
            ISOLATION_LATENCY if isolation else current_latency,
            self.latency_max,
            self.not_available_duration,
        )
        self.tolerance.update_fault_item(broker_name, current_latency, duration, now_ms, reachable)

    def select_one(
        self,
        selector: RoundRobinSelector,
        queues: Sequence[MessageQueue],
        last_broker_name: str | None,
        now_ms: int,
        *,
        reset_index: bool = False,
    ) -> MessageQueue:
        """Pick a queue: an available broker other than the last, else a reachable one other
        than the last, else any (``selectOneMessageQueue``). ``reset_index`` (a retry): the
        round robin restarts at a random position first, when enabled (``resetIndex``)."""
        if not self.enabled:
            return selector.select_one(queues, last_broker_name)
        if reset_index:
            selector.reset()
        tol = self.tolerance
        mq = selector.select_filtered(
            queues, last_broker_name, lambda q: tol.is_available(q.broker_name, now_ms)
        )
        if mq is None:
            mq = selector.select_filtered(
                queues, last_broker_name, lambda q: tol.is_reachable(q.broker_name)
            )
        return mq if mq is not None else selector.select_one(queues)
