"""GroupCommitWorker: the thread that makes SYNC_FLUSH puts durable (RocketMQ's GroupCommitService).

A SYNC_FLUSH put asks for the commitlog to be flushed up to its end offset and waits. The
worker, a thread of its own, flushes whenever an offset beyond what is durable is asked for;
every put that arrived while it flushed shares the next flush (group commit). Rounds follow
each other inside the thread, with no event-loop step in between: each round costs one
``fdatasync`` and one hand-over of the flushed offset to whoever waits (``on_flushed``,
called from the worker thread, so it must be thread-safe; the trio shell passes a function
that schedules the wake-up on its event loop).

Without requests the worker still flushes every ``interval_s`` (flushIntervalCommitLog), so
puts that do not wait for the disk reach it too.

The class knows nothing of trio: it is a plain thread body with a request and a stop method.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class GroupCommitWorker:
    """Flushes the commitlog in a dedicated thread whenever a put asks for it.

    ``flush()`` makes everything appended so far durable and returns the flushed offset; it
    is called only from the worker thread. ``on_flushed(offset)`` is called after each flush
    that moved the flushed offset, from the worker thread.
    """

    def __init__(
        self,
        flush: Callable[[], int],
        on_flushed: Callable[[int], None],
        *,
        flushed: int = 0,
        interval_s: float = 0.5,
    ) -> None:
        self._flush = flush
        self._on_flushed = on_flushed
        self._interval_s = interval_s
        self._cond = threading.Condition(threading.Lock())
        self._wanted = flushed
        self._flushed = flushed
        self._stopping = False
        self.flushes = 0
        """Flushes that made something durable (group commits and interval flushes)."""
        self.flush_seconds = 0.0
        """Their total time, from picking the round up to handing its offset over."""
        self.error: OSError | None = None
        """The flush failure that ended :meth:`run`, if one did."""

    @property
    def flushed(self) -> int:
        """The commitlog offset the last flush made durable."""
        return self._flushed

    def request(self, offset: int) -> None:
        """Ask for a flush covering ``offset`` (any thread; cheap when one is under way)."""
        with self._cond:
            if offset > self._wanted:
                self._wanted = offset
                self._cond.notify()

    def stop(self) -> None:
        """Make :meth:`run` return once the flush under way (if any) is done."""
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def run(self) -> None:
        """The thread's body: flush on request or every interval until :meth:`stop`, or until
        a flush fails (the ``OSError`` is kept in :attr:`error`: no later flush is tried, as
        one could report success for data the failed one lost)."""
        while self._next_round():
            started = time.perf_counter()
            try:
                flushed = self._flush()
            except OSError as exc:
                self.error = exc
                return
            moved = flushed > self._flushed
            with self._cond:
                self._flushed = max(self._flushed, flushed)
            if moved:
                self._on_flushed(flushed)
                self.flushes += 1
                self.flush_seconds += time.perf_counter() - started

    def _next_round(self) -> bool:
        """Wait for a request beyond what is flushed, or for the interval; False once stopped
        or failed."""
        if self.error is not None:
            return False
        with self._cond:
            if self._wanted <= self._flushed and not self._stopping:
                self._cond.wait(self._interval_s)
            return not self._stopping
