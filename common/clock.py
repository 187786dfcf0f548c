"""Clocks: wall-clock time for what is stored or shown, monotonic time for how long ago.

A timeout or an expiry measured on the wall clock fires early or never when the host's clock
is stepped (NTP, a VM resumed, an operator): a step forward of a minute would drop every
client and free every orderly queue lock at once. Durations use :func:`monotonic_ms`.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on a clock that only moves forward (only differences mean anything)."""
    return time.monotonic_ns() // 1_000_000
