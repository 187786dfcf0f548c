"""RocketMQ's ``StatsItem``: running totals of one stats key and their sample rings, from
which ``StatsSnapshot`` figures (sum, tps, avgpt) over a minute, an hour and a day are read.
Shared by the broker's :mod:`broker.broker_stats` and the client's
:mod:`client.consumer_stats`.

Rules:

- An item keeps two running totals, ``value`` (messages, bytes or milliseconds) and ``times``
  (requests or calls), plus three rings of samples ``(at_s, times, value)``: every 10 s (7
  kept: a minute), every 10 min (7 kept: an hour) and every hour (25 kept: a day), RocketMQ's
  ``samplingInSeconds`` / ``samplingInMinutes`` / ``samplingInHour``. A ring's first sample is
  preceded by a made-up ``(at - interval, 0, 0)``, so every window is at least one interval
  long.
- A snapshot runs from the oldest sample of the ring to *now* and the running totals (RocketMQ
  ends it at the newest sample, up to one interval old): ``sum`` = value gained, ``tps`` =
  sum / seconds, ``times`` = requests, ``avgpt`` = sum / times (0 without requests). An item
  not sampled yet counts from ``now - interval``. So figures are exact at once, and a window
  spans between one and one-plus-an-interval of its length (60-70 s, 60-70 min, 24-25 h).
- Pure: times come in as arguments (seconds of any monotonic clock); the owner samples and
  reads in one thread (a trio loop), so nothing needs a lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple


@dataclass(frozen=True)
class Window:
    """One of the three rings: a sample every ``interval_s``, the last ``keep`` kept."""

    name: str
    interval_s: float
    keep: int


MINUTE: Final = Window("minute", 10.0, 7)
HOUR: Final = Window("hour", 600.0, 7)
DAY: Final = Window("day", 3600.0, 25)
WINDOWS: Final = (MINUTE, HOUR, DAY)


@dataclass(frozen=True)
class StatsSnapshot:
    """A window's figures (RocketMQ's ``StatsSnapshot``)."""

    sum: int
    tps: float
    avgpt: float
    times: int

    def to_wire(self) -> dict[str, int | float]:
        """RocketMQ's ``BrokerStatsItem``: ``{"sum", "tps", "avgpt"}``."""
        return {"sum": self.sum, "tps": self.tps, "avgpt": self.avgpt}


class _Sample(NamedTuple):
    at_s: float
    times: int
    value: int


class StatsItem:
    """Running totals of one key and their sample rings (module rules)."""

    __slots__ = ("_rings", "times", "value")

    def __init__(self) -> None:
        self.value = 0
        self.times = 0
        self._rings: tuple[deque[_Sample], ...] = tuple(deque(maxlen=w.keep) for w in WINDOWS)

    def add(self, value: int, times: int = 1) -> None:
        """Count ``times`` requests that moved ``value`` messages (or bytes)."""
        self.value += value
        self.times += times

    def sample(self, window: Window, now_s: float) -> None:
        """Record the totals in ``window``'s ring (preceded by a zero sample the first time)."""
        ring = self._rings[WINDOWS.index(window)]
        if not ring:
            ring.append(_Sample(now_s - window.interval_s, 0, 0))
        ring.append(_Sample(now_s, self.times, self.value))

    def snapshot(self, window: Window, now_s: float) -> StatsSnapshot:
        """The figures from the ring's oldest sample to ``now_s`` (module rules)."""
        ring = self._rings[WINDOWS.index(window)]
        first = ring[0] if ring else _Sample(now_s - window.interval_s, 0, 0)
        total = self.value - first.value
        times = self.times - first.times
        span = now_s - first.at_s
        return StatsSnapshot(
            total,
            total / span if span > 0 else 0.0,
            total / times if times > 0 else 0.0,
            times,
        )


def stats_key(topic: str, group: str) -> str:
    """``topic@group``, the key of a group's items (RocketMQ's ``buildStatsKey``)."""
    return f"{topic}@{group}"


class StatsTables:
    """One table of :class:`StatsItem` per stats name, keyed by topic, group or
    :func:`stats_key` (RocketMQ's ``StatsItemSet`` per name), sampled together by
    :meth:`tick`. Subclasses add the named counting and reading methods."""

    def __init__(self, names: Iterable[str]) -> None:
        self.tables: dict[str, dict[str, StatsItem]] = {name: {} for name in names}
        self._due: dict[str, float] = {}

    def _add(self, name: str, key: str, value: int, times: int = 1) -> None:
        table = self.tables[name]
        item = table.get(key)
        if item is None:
            item = table[key] = StatsItem()
        item.add(value, times)

    def tick(self, now_s: float) -> None:
        """Sample every item in each window whose interval has passed since its last sampling
        (all three at the first call)."""
        for window in WINDOWS:
            due = self._due.get(window.name)
            if due is not None and now_s < due:
                continue
            self._due[window.name] = now_s + window.interval_s
            for table in self.tables.values():
                for item in table.values():
                    item.sample(window, now_s)

    def item(self, name: str, key: str) -> StatsItem | None:
        """The item of ``name`` and ``key``; None when either is unknown."""
        table = self.tables.get(name)
        return None if table is None else table.get(key)
