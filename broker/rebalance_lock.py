"""RebalanceLockManager: broker-side queue locks for orderly consumption (RocketMQ's
``RebalanceLockManager``).

A pure table ``group -> {queue: (client id, last update ms)}`` over an injected clock.

Rules (as RocketMQ's):

- A lock is held by one client of a group and expires :data:`REBALANCE_LOCK_MAX_LIVE_TIME_MS`
  (60 s, ``rocketmq.broker.rebalance.lockMaxLiveTime``) after its last lock or renewal: a lock
  is live while ``now - last_update <= max_live``.
- :meth:`RebalanceLockManager.try_lock_batch` locks every queue that is free, expired or already
  the caller's (renewing it) and answers that set; a queue live-locked by another client is
  left out (the caller simply does not get it).
- :meth:`RebalanceLockManager.unlock_batch` releases only the caller's own locks.
- Queues are any hashable values (the processor uses ``remoting.client_bodies.LockedQueue``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from common.clock import monotonic_ms

log = logging.getLogger(__name__)

REBALANCE_LOCK_MAX_LIVE_TIME_MS: Final = 60_000
"""RocketMQ's ``REBALANCE_LOCK_MAX_LIVE_TIME``."""

Q = TypeVar("Q", bound=Hashable)


@dataclass(slots=True)
class LockEntry:
    """Who holds a queue's lock and when it was last taken or renewed."""

    client_id: str
    last_update_ms: int


class RebalanceLockManager(Generic[Q]):
    """Per group queue locks; see the module rules."""

    def __init__(
        self,
        *,
        max_live_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.max_live_ms = max_live_ms
        self.clock_ms = clock_ms
        self._table: dict[str, dict[Q, LockEntry]] = {}

    def _live(self, entry: LockEntry, now: int) -> bool:
        return now - entry.last_update_ms <= self.max_live_ms

    def is_locked(self, group: str, mq: Q, client_id: str) -> bool:
        """True when ``client_id`` holds a live lock on ``mq`` (does not renew)."""
        entry = self._table.get(group, {}).get(mq)
        return (
            entry is not None
            and entry.client_id == client_id
            and self._live(entry, self.clock_ms())
        )

    def holder(self, group: str, mq: Q) -> str | None:
        """The client holding a live lock on ``mq``, or None."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or not self._live(entry, self.clock_ms()):
            return None
        return entry.client_id

    def try_lock_batch(self, group: str, mqs: Iterable[Q], client_id: str) -> set[Q]:
        """Lock (or renew) what can be locked for ``client_id``; the queues it now holds."""
        now = self.clock_ms()
        queues = self._table.setdefault(group, {})
        locked: set[Q] = set()
        for mq in mqs:
            entry = queues.get(mq)
            if entry is None:
                queues[mq] = LockEntry(client_id, now)
                log.info("lock %s for %s in group %s", mq, client_id, group)
            elif entry.client_id == client_id or not self._live(entry, now):
                if entry.client_id != client_id:
                    log.warning(
                        "lock %s in group %s expired (was %s); now %s",
                        mq,
                        group,
                        entry.client_id,
                        client_id,
                    )
                entry.client_id = client_id
                entry.last_update_ms = now
            else:
                log.debug("%s of group %s is locked by %s", mq, group, entry.client_id)
                continue
            locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[Q], client_id: str) -> set[Q]:
        """Release ``client_id``'s locks on ``mqs``; the queues actually released."""
        queues = self._table.get(group)
        released: set[Q] = set()
        if queues is None:
            return released
        for mq in mqs:
            entry = queues.get(mq)
            if entry is None:
                continue
            if entry.client_id == client_id:
                del queues[mq]
                released.add(mq)
            else:
                log.warning(
                    "unlock %s in group %s by %s refused: held by %s",
                    mq,
                    group,
                    client_id,
                    entry.client_id,
                )
        if not queues:
            del self._table[group]
        return released
