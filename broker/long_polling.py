"""Parked pulls (RocketMQ's ``PullRequestHoldService``, seed 003 "长轮询").

A PULL_MESSAGE that finds nothing new, has PullSysFlag's SUSPEND bit and carries
``suspendTimeoutMillis`` > 0 waits here, inside its own request task, instead of being answered
PULL_NOT_FOUND at once.

Rules:

- :class:`PullHoldTable` maps ``(topic, queueId)`` to the pulls parked on that queue. Each
  :class:`ParkedPull` holds the offset it asked for and a ``trio.Event`` that wakes its task.
- :meth:`PullHoldTable.notify` is the store's ``arrival_listener``: it runs on the event loop
  after every dispatch round, once per touched queue, so for a queue without parked pulls it is
  one dict lookup. It wakes every pull on the queue whose offset is below ``next_offset``.
- :func:`hold` is the waiting side: park, wait for a wake-up, a :data:`CHECK_INTERVAL_S` safety
  tick (RocketMQ rescans every 5 s in case a notification was missed) or the deadline, re-run
  the read and stop as soon as ``ready(result)`` says so or the deadline passed. It always
  unparks in ``finally``: a closed connection or a shutdown cancels the request task, which
  drops the parked pull.
- :func:`short_poll` is the waiting side with ``longPollingEnable=false`` (RocketMQ's short
  polling): the pull is held for the broker's ``shortPollingTimeMills`` (default
  :data:`SHORT_POLLING_MS`) whatever the client asked, then read once. An arrival does not
  wake it (RocketMQ's store notifies arrivals only with long polling on; its hold service then
  re-checks every ``shortPollingTimeMills``). It is parked, so
  :meth:`PullHoldTable.parked_count` counts it, but :meth:`PullHoldTable.notify` skips it.

RocketMQ's ``PullRequestHoldService`` checks every held pull on one shared tick (every 5 s with
long polling, every ``shortPollingTimeMills`` without); here each held pull has its own timer
(its deadline, and with long polling a re-check :data:`CHECK_INTERVAL_S` after parking and
after each wake-up). The bounds users see are the same: a missed arrival is found within 5 s,
and a short-polled pull's message waits at most ``shortPollingTimeMills`` after it arrived
(RocketMQ answers it at the next tick, minimq at the end of that pull's hold; with pulls held
back to back both waits are spread evenly over the period). Only an empty short poll differs:
it is answered after exactly ``shortPollingTimeMills``, where RocketMQ's tick answers it after
1 to 2 periods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

import trio

CHECK_INTERVAL_S: Final = 5.0
"""Safety-net re-check period of a parked pull (RocketMQ's hold service waits 5 s)."""
MAX_SUSPEND_MS: Final = 120_000
"""Upper bound of any client's ``suspendTimeoutMillis`` (RocketMQ's client default is 15 s)."""
SHORT_POLLING_MS: Final = 1000
"""Default hold time when ``longPollingEnable=false`` (RocketMQ's ``shortPollingTimeMills``)."""

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class ParkedPull:
    """One waiting pull: its queue, the offset it asked for, its wake-up event and whether an
    arrival wakes it (False: a short poll)."""

    topic: str
    queue_id: int
    offset: int
    wakeup: trio.Event = field(default_factory=trio.Event)
    wakes_on_arrival: bool = True


class PullHoldTable:
    """``(topic, queueId)`` -> the pulls parked on that queue."""

    def __init__(self) -> None:
        self._parked: dict[tuple[str, int], set[ParkedPull]] = {}

    def park(
        self, topic: str, queue_id: int, offset: int, *, wakes_on_arrival: bool = True
    ) -> ParkedPull:
        """Register a pull waiting for a message at ``offset`` or later (one that an arrival
        does not wake with ``wakes_on_arrival=False``)."""
        pull = ParkedPull(topic, queue_id, offset, wakes_on_arrival=wakes_on_arrival)
        self._parked.setdefault((topic, queue_id), set()).add(pull)
        return pull

    def unpark(self, pull: ParkedPull) -> None:
        """Forget ``pull`` (no-op if already gone); empty queues leave the table."""
        key = (pull.topic, pull.queue_id)
        pulls = self._parked.get(key)
        if pulls is None:
            return
        pulls.discard(pull)
        if not pulls:
            del self._parked[key]

    def notify(self, topic: str, queue_id: int, next_offset: int) -> None:
        """Messages up to ``next_offset`` (exclusive) exist: wake the pulls they concern (short
        polls excepted)."""
        pulls = self._parked.get((topic, queue_id))
        if not pulls:
            return
        for pull in pulls:
            if next_offset > pull.offset and pull.wakes_on_arrival:
                pull.wakeup.set()

    def parked_count(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """How many pulls are parked: in all, on ``topic``'s queues, or on one queue."""
        if topic is not None and queue_id is not None:
            return len(self._parked.get((topic, queue_id), ()))
        return sum(len(p) for (t, _), p in self._parked.items() if topic in (None, t))


def suspend_seconds(
    suspend_ms: int, *, long_polling: bool, short_polling_ms: int = SHORT_POLLING_MS
) -> float:
    """The hold time granted to a request asking for ``suspend_ms`` (0 = do not hold): at most
    :data:`MAX_SUSPEND_MS` with long polling, else ``short_polling_ms`` whatever was asked
    (RocketMQ's ``PullMessageProcessor`` replaces the suspend time by ``shortPollingTimeMills``)."""
    if suspend_ms <= 0:
        return 0.0
    if not long_polling:
        return short_polling_ms / 1000
    return min(suspend_ms, MAX_SUSPEND_MS) / 1000


async def hold(
    table: PullHoldTable,
    topic: str,
    queue_id: int,
    offset: int,
    suspend_s: float,
    read: Callable[[], T],
    ready: Callable[[T], bool],
    check_interval_s: float = CHECK_INTERVAL_S,
) -> T:
    """Park until ``ready(read())`` or ``suspend_s`` elapsed; return the last ``read()``.

    ``read`` runs once right after parking (a message stored between the caller's read and
    the park woke nobody), then on every wake-up and every ``check_interval_s`` (the safety
    net).
    """
    deadline = trio.current_time() + suspend_s
    pull = table.park(topic, queue_id, offset)
    try:
        result = read()
        if ready(result):
            return result
        while True:
            with trio.move_on_at(min(deadline, trio.current_time() + check_interval_s)):
                await pull.wakeup.wait()
            pull.wakeup = trio.Event()
            result = read()
            if ready(result) or trio.current_time() >= deadline:
                return result
    finally:
        table.unpark(pull)


async def short_poll(
    table: PullHoldTable,
    topic: str,
    queue_id: int,
    offset: int,
    hold_s: float,
    read: Callable[[], T],
) -> T:
    """Hold a pull for ``hold_s`` (an arrival does not end it), then return ``read()``."""
    pull = table.park(topic, queue_id, offset, wakes_on_arrival=False)
    try:
        await trio.sleep(hold_s)
        return read()
    finally:
        table.unpark(pull)
