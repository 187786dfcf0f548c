"""Message rates for operators (RocketMQ's ``StoreStatsService``): ``putTps`` and
``getTransferedTps`` of GET_BROKER_RUNTIME_INFO, shown by ``mqadmin brokerStatus`` and, first
figure only, by ``clusterList`` as ``#InTPS`` / ``#OutTPS``.

Rules:

- The store's running totals (messages stored, messages handed to pulls) are sampled about
  once a second; up to ``MAX_SAMPLES`` samples are kept (ten minutes).
- A rate over a window of W seconds is (total now - the total at the newest sample at least W
  seconds old) / the time between them; while the broker is younger than W, the oldest sample
  stands in, as in RocketMQ. Each figure is three rates, over 10 s, 60 s and 600 s, separated
  by spaces (``"12.50 3.20 0.41"``), RocketMQ's format.
- Pure: times and totals come in as arguments; the broker's sampling task owns the clock.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

WINDOWS_S = (10, 60, 600)
MAX_SAMPLES = 601


@dataclass(frozen=True)
class Totals:
    """Running totals at one moment."""

    at_s: float
    put: int
    get_transferred: int


_Field = Callable[["Totals"], int]


class StoreStats:
    """Samples of the store's totals and the rates over :data:`WINDOWS_S` (module rules)."""

    def __init__(self) -> None:
        self._samples: deque[Totals] = deque(maxlen=MAX_SAMPLES)

    def sample(self, totals: Totals) -> None:
        """Record ``totals`` (taken about once a second, times increasing)."""
        self._samples.append(totals)

    def runtime_fields(self, now: Totals) -> dict[str, str]:
        """``putTps`` and ``getTransferedTps`` for GET_BROKER_RUNTIME_INFO at ``now``."""
        return {
            "putTps": self._rates(now, lambda t: t.put),
            "getTransferedTps": self._rates(now, lambda t: t.get_transferred),
        }

    def _rates(self, now: Totals, field: _Field) -> str:
        return " ".join(f"{self.rate(now, field, w):.2f}" for w in WINDOWS_S)

    def rate(self, now: Totals, field: _Field, window_s: float) -> float:
        """Messages a second of ``field`` over the last ``window_s`` seconds (module rules)."""
        base = self._base(now.at_s - window_s)
        if base is None or now.at_s <= base.at_s:
            return 0.0
        return max(0, field(now) - field(base)) / (now.at_s - base.at_s)

    def _base(self, since_s: float) -> Totals | None:
        """The newest sample taken at or before ``since_s``, else the oldest one."""
        samples = self._samples
        if not samples:
            return None
        times = [s.at_s for s in samples]
        index = bisect.bisect_right(times, since_s) - 1
        return samples[max(index, 0)]
