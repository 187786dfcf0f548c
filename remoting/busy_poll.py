"""Busy polling: keep the event loop polling for a moment after traffic instead of sleeping.

A request/response exchange on one connection is a relay: each side sleeps in ``epoll_wait``
until the other's bytes arrive. Waking a sleeping process costs far more than the work it wakes
up for, above all in a virtual machine (an inter-processor interrupt and a halted vCPU to bring
back). Linux's answer for network devices is ``net.core.busy_poll``: spin for a few tens of
microseconds before sleeping. This is the same idea one level up, for a trio loop (Seastar and
DPDK poll for the same reason).

:class:`BusyPoll` is one task per process (``run`` in the nursery of the server or client that
owns it). :meth:`BusyPoll.touch` marks traffic. A server's channels touch it on every frame
sent or received (a server expects the next request); a client's only when they send a request
that expects an answer (a client polls while it waits for its response, and never because of
traffic it did not ask for). For ``window_s`` after the last touch the task keeps itself
runnable, so trio asks the kernel for events with a zero timeout on every pass of its loop
instead of blocking, and a frame that arrives then is read within microseconds. Once
``window_s`` passes without traffic the task parks until the next touch, so an idle process
does not spin.

Rules:

- Spinning is bounded: at most ``window_s`` of polling after each frame, so the CPU spent on
  it is at most ``window_s`` times the frame rate (a quiet process spends none).
- Each spin step calls ``sched_yield``, so on a machine with more runnable processes than cores
  a spinning process gives its core to the others instead of holding it for a time slice.
- The window is measured on the real clock (``time.perf_counter``), not trio's: under a mock
  clock that only advances when every task sleeps, a window in trio time would never end.
- ``window_s <= 0`` turns it off: ``run`` returns at once and ``touch`` costs one increment.
- Spinning adapts: a spell of polling (from a wake-up to parking again) is useful if a frame
  arrived during it (:meth:`BusyPoll.arrived`, called on every frame received). When the
  moving share of useful spells falls below ``MIN_HIT_RATE`` (5 %), the poller polls only one
  spell in ``PROBE_EVERY`` (16) and parks at once otherwise, until a useful probe brings the
  share back (:class:`SpinBudget`). So a client whose answers nearly always take longer than
  the window (a remote or slow broker) stops spending CPU on polling.
- On a single-core machine spinning only delays the peer it waits for, so :func:`default_window_us`
  is 0 there. ``MINIMQ_BUSY_POLL_US`` overrides the default (brokers read it for
  ``busyPollMicros``, clients for ``ClientConfig.busy_poll_us``); explicit settings win.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Final

import trio

DEFAULT_WINDOW_US: Final = 200
"""Default spin window, µs: longer than a Python peer takes to answer or send its next request."""
ENV_VAR: Final = "MINIMQ_BUSY_POLL_US"
"""Environment variable overriding the default window (µs) of brokers and clients alike."""


def default_window_us(environ: Mapping[str, str] = os.environ) -> int:
    """The default window, µs: ``$MINIMQ_BUSY_POLL_US`` if set, else ``DEFAULT_WINDOW_US`` on a
    machine with two or more usable cores and 0 (off) on one.

    Raises ValueError naming the variable if it is not a whole number >= 0.
    """
    raw = environ.get(ENV_VAR)
    if raw is not None:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"{ENV_VAR} must be a whole number of microseconds >= 0, got {raw!r}")
        return value
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return DEFAULT_WINDOW_US if (cores or 1) >= 2 else 0


MIN_HIT_RATE: Final = 0.05
"""Below this share of useful spells the poller stops polling (but for probes)."""
PROBE_EVERY: Final = 16
"""While it does not poll, the poller still polls one spell in this many, to notice a change."""
HIT_RATE_WEIGHT: Final = 0.05
"""Weight of the newest spell in the moving average of useful spells."""


class SpinBudget:
    """Whether the next spell of polling should run, from how useful the last ones were.

    Pure policy (no trio, no clock): a moving average of the share of spells during which a
    frame arrived (starting at 1); while it is below ``min_hit_rate`` only one spell in
    ``probe_every`` polls, so the average can recover when the peer gets faster again.
    """

    def __init__(
        self,
        min_hit_rate: float = MIN_HIT_RATE,
        probe_every: int = PROBE_EVERY,
        weight: float = HIT_RATE_WEIGHT,
    ) -> None:
        self.min_hit_rate = min_hit_rate
        self.probe_every = probe_every
        self.weight = weight
        self.hit_rate = 1.0
        """Moving average of useful spells (1: every one)."""
        self._since_probe = 0

    def should_spin(self) -> bool:
        """True if this spell should poll; False if it is one to sit out."""
        if self.hit_rate >= self.min_hit_rate:
            return True
        self._since_probe += 1
        if self._since_probe >= self.probe_every:
            self._since_probe = 0
            return True
        return False

    def record(self, useful: bool) -> None:
        """Account for a spell that polled: ``useful`` if a frame arrived during it."""
        self.hit_rate += self.weight * (float(useful) - self.hit_rate)


def _no_yield() -> None:
    """Stands in for ``os.sched_yield`` where the platform has none."""


_GIVE_WAY: Final = getattr(os, "sched_yield", _no_yield)


class BusyPoll:
    """Keeps a trio loop polling for ``window_s`` after the last :meth:`touch`."""

    def __init__(self, window_s: float, budget: SpinBudget | None = None) -> None:
        self.window_s = max(window_s, 0.0)
        self.budget = budget if budget is not None else SpinBudget()
        self.spins = 0
        """Spin steps taken so far (for tests and metrics)."""
        self.spells_skipped = 0
        """Spells the budget sat out (for tests and metrics)."""
        self._touches = 0
        self._arrivals = 0
        self._wakeup: trio.Event | None = None  # set by touch() while run() is parked

    @property
    def enabled(self) -> bool:
        """True if the window is positive."""
        return self.window_s > 0

    @property
    def parked(self) -> bool:
        """True while :meth:`run` sleeps until the next touch."""
        return self._wakeup is not None

    def touch(self) -> None:
        """Mark traffic: poll for another ``window_s`` from now."""
        self._touches += 1
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def arrived(self) -> None:
        """Mark a frame received (what makes a spell of polling useful)."""
        self._arrivals += 1

    async def run(self) -> None:
        """Spin after each touch, park when quiet; until cancelled (returns at once if off)."""
        if not self.enabled:
            return
        budget = self.budget
        while True:
            wakeup = self._wakeup = trio.Event()
            await wakeup.wait()
            if budget.should_spin():
                budget.record(await self._spin())
            else:
                self.spells_skipped += 1

    async def _spin(self) -> bool:
        """Stay runnable until ``window_s`` passed with no touch; True if a frame arrived."""
        window = self.window_s
        clock = time.perf_counter
        checkpoint = trio.lowlevel.checkpoint
        give_way = _GIVE_WAY
        arrivals = self._arrivals
        seen = self._touches
        until = clock() + window
        while True:
            await checkpoint()
            self.spins += 1
            if self._touches != seen:
                seen = self._touches
                until = clock() + window
            elif clock() >= until:
                return self._arrivals != arrivals
            give_way()
