"""Warnings about a peer's bad input, at most one per kind per interval.

A server logs a warning for each protocol error, unknown request code and malformed request it
meets. A peer sending garbage in a loop would otherwise fill the log (and the disk under it)
with one line per frame or connection. :class:`WarningLimiter` lets the first warning of a kind
through, drops the same kind for ``interval_s`` after it, and the next one let through says how
many were dropped.

Rules:

- A *kind* is a small fixed label chosen by the caller (``"protocol error"``, ``"unsupported
  code"``), never a value taken from the peer, so the table of kinds stays bounded whatever
  peers send.
- :meth:`WarningLimiter.allow` returns ``None`` when this warning is dropped, else the number of
  warnings of that kind dropped since the last one let through (0 the first time).
- One limiter per server (or client), shared by all its connections: a flood spread over many
  connections is limited as one.
- Pure: time comes from the clock given to the constructor (``time.monotonic`` by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

WARNING_INTERVAL_S = 10.0
"""Default interval between two warnings of one kind."""


@dataclass
class _KindState:
    last_at: float
    dropped: int = 0


class WarningLimiter:
    """At most one warning per kind per ``interval_s`` (see the module rules)."""

    def __init__(
        self,
        interval_s: float = WARNING_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._kinds: dict[str, _KindState] = {}

    def allow(self, kind: str) -> int | None:
        """``None`` to drop this warning; else how many of ``kind`` were dropped before it."""
        now = self._clock()
        state = self._kinds.get(kind)
        if state is None:
            self._kinds[kind] = _KindState(now)
            return 0
        if now - state.last_at < self.interval_s:
            state.dropped += 1
            return None
        dropped, state.dropped, state.last_at = state.dropped, 0, now
        return dropped


def suppressed_note(dropped: int) -> str:
    """The suffix a let-through warning carries: empty, or how many like it were dropped."""
    if dropped == 0:
        return ""
    return f" ({dropped} more like it not logged)"
