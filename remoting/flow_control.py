"""Bounds on the requests a server holds unanswered, so no client can exhaust its memory.

A request whose handler must wait (a long-polling pull, a ``SYNC_FLUSH`` send, ...) costs the
server a task and the request's state until it is answered: about 5.6 KB for a parked pull.
Without a bound, one client pipelining pulls could park millions of them. So the server keeps
count, per connection and in all, and once either count is at its limit a new request on that
connection is answered ``SYSTEM_BUSY`` at once, before its handler runs (nothing is stored or
changed), with RocketMQ's ``[REJECTREQUEST]system busy`` remark. Clients treat it as RocketMQ's
do: a send is retried on another broker, a pull again after a pause.

The defaults leave room for any well-behaved client (one parked pull per queue it consumes,
plus its in-flight ``SYNC_FLUSH`` sends): the total is RocketMQ's
``pullThreadPoolQueueCapacity``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Final

DEFAULT_MAX_PENDING: Final = 100_000
"""Requests waiting for their answer, over every connection of one server."""
DEFAULT_MAX_PENDING_PER_CONNECTION: Final = 10_000
"""Requests waiting for their answer on one connection."""
BUSY_REMARK: Final = "[REJECTREQUEST]system busy, start flow control for a while"
REJECTION_LOG_INTERVAL_S: Final = 10.0


@dataclass(slots=True)
class PendingLimit:
    """The server-wide count of pending requests and both limits (pure: no I/O)."""

    total: int = DEFAULT_MAX_PENDING
    per_connection: int = DEFAULT_MAX_PENDING_PER_CONNECTION
    pending: int = 0
    """Requests waiting for their answer right now, over every connection."""
    rejected: int = 0
    """Requests answered SYSTEM_BUSY so far."""
    _logged_at: float = field(default=-math.inf, repr=False)

    def __post_init__(self) -> None:
        if self.total <= 0 or self.per_connection <= 0:
            raise ValueError("pending request limits must be > 0")

    def admits(self, connection_pending: int) -> bool:
        """True when a connection with ``connection_pending`` waiting requests may add one."""
        return connection_pending < self.per_connection and self.pending < self.total

    def reject(self) -> bool:
        """Count one rejection; True when it should be logged (at most every
        :data:`REJECTION_LOG_INTERVAL_S`)."""
        self.rejected += 1
        now = time.monotonic()
        if now - self._logged_at < REJECTION_LOG_INTERVAL_S:
            return False
        self._logged_at = now
        return True
