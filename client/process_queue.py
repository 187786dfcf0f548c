"""ProcessQueue: a push consumer's messages of one queue between pull and commit, pure
(RocketMQ's ``ProcessQueue``).

Rules:

- Messages are kept by queue offset. :meth:`ProcessQueue.put` ignores offsets already held;
  :meth:`ProcessQueue.remove` drops consumed messages and returns the offset that may be
  committed: the smallest offset still held (a slower message holds back the commit, so a crash
  re-delivers rather than loses), or one past the highest offset ever held when none is.
- Flow control reads :attr:`count`, :attr:`size_bytes` and :attr:`span` (highest minus lowest
  held offset).
- Orderly consumption takes messages in offset order (:meth:`take`), and either commits them
  (:meth:`commit_taken`) or puts them back for another attempt (:meth:`return_taken`).
- ``dropped`` is set when the queue is no longer ours: nothing may be committed after that.
- Time is passed in (``now_ms``); nothing here reads a clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from client.message import ReceivedMessage


class ProcessQueue:
    """The in-flight messages of one message queue."""

    def __init__(self, now_ms: int = 0) -> None:
        self._msgs: dict[int, ReceivedMessage] = {}
        self._offsets: list[int] = []  # sorted keys of _msgs
        self._taken: dict[int, ReceivedMessage] = {}
        self.size_bytes = 0
        self.max_offset = -1
        """Highest offset ever held (-1 before the first message)."""
        self.dropped = False
        self.locked = False
        self.last_lock_ms = 0
        self.last_pull_ms = now_ms
        self.last_consume_ms = now_ms

    @property
    def count(self) -> int:
        """Messages held (taken ones included)."""
        return len(self._msgs) + len(self._taken)

    @property
    def span(self) -> int:
        """Highest minus lowest held offset (0 when at most one is held)."""
        offsets = self._all_offsets()
        return offsets[-1] - offsets[0] if offsets else 0

    def _all_offsets(self) -> list[int]:
        if not self._taken:
            return self._offsets
        return sorted([*self._offsets, *self._taken])

    def put(self, msgs: Iterable[ReceivedMessage]) -> int:
        """Hold pulled messages; returns how many were new."""
        held, taken, offsets = self._msgs, self._taken, self._offsets
        added = size = 0
        top = self.max_offset
        for m in msgs:
            off = m.queue_offset
            if off in held or off in taken:
                continue
            held[off] = m
            if not offsets or off > offsets[-1]:
                offsets.append(off)  # pulls arrive in offset order: the common case
            else:
                bisect.insort(offsets, off)
            size += len(m.body)
            if off > top:
                top = off
            added += 1
        self.size_bytes += size
        self.max_offset = top
        return added

    def remove(self, msgs: Sequence[ReceivedMessage]) -> int:
        """Forget consumed messages; the offset that may now be committed (-1 if none held
        ever)."""
        held, offsets = self._msgs, self._offsets
        removed: list[int] = []
        size = 0
        for m in msgs:
            off = m.queue_offset
            msg = held.pop(off, None)
            if msg is not None:
                removed.append(off)
                size += len(msg.body)
        self.size_bytes -= size
        n = len(removed)
        if offsets[:n] == removed:  # the oldest pull's messages, in order: the common case
            del offsets[:n]  # one shift of the list instead of one per message
        else:
            for off in removed:
                del offsets[bisect.bisect_left(offsets, off)]
        return self.commit_offset()

    def commit_offset(self) -> int:
        """The smallest held offset, else one past the highest ever held (-1: nothing yet)."""
        offsets = self._all_offsets()
        if offsets:
            return offsets[0]
        return self.max_offset + 1 if self.max_offset >= 0 else -1

    def cached_offsets(self) -> tuple[int, int]:
        """The lowest and highest offsets held, taken ones included ((0, 0) when none: RocketMQ's
        ``cachedMsgMinOffset`` / ``cachedMsgMaxOffset``)."""
        offsets = self._all_offsets()
        return (offsets[0], offsets[-1]) if offsets else (0, 0)

    def take(self, n: int) -> list[ReceivedMessage]:
        """Orderly: the ``n`` lowest-offset messages, moved aside until committed/returned."""
        out: list[ReceivedMessage] = []
        while self._offsets and len(out) < n:
            off = self._offsets.pop(0)
            m = self._msgs.pop(off)
            self._taken[off] = m
            out.append(m)
        return out

    def commit_taken(self) -> int:
        """Orderly: the taken messages are consumed; the offset to commit."""
        for m in self._taken.values():
            self.size_bytes -= len(m.body)
        self._taken.clear()
        return self.commit_offset()

    def return_taken(self, msgs: Sequence[ReceivedMessage]) -> None:
        """Orderly: put taken messages back to be consumed again, first."""
        for m in msgs:
            if self._taken.pop(m.queue_offset, None) is not None:
                self._msgs[m.queue_offset] = m
                bisect.insort(self._offsets, m.queue_offset)

    def clear(self) -> None:
        """Drop everything (the queue is being released or re-created)."""
        self._msgs.clear()
        self._offsets.clear()
        self._taken.clear()
        self.size_bytes = 0

    def is_pull_expired(self, now_ms: int, max_idle_ms: int = 120_000) -> bool:
        """True when no pull pass began for ``max_idle_ms`` (the push consumer re-creates the
        queue: see its "Stalls")."""
        return now_ms - self.last_pull_ms > max_idle_ms

    def is_lock_expired(self, now_ms: int, max_live_ms: int = 30_000) -> bool:
        """Orderly: the broker lock was last confirmed more than ``max_live_ms`` ago."""
        return now_ms - self.last_lock_ms > max_live_ms
