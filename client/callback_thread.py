"""One daemon thread that runs the blocking client's send callbacks, in order.

The blocking API's ``send_async`` must not run user code in the client's loop thread: a callback
that blocks (waiting on another send's Future, a database write) would stop the loop every
producer and consumer of the process shares, so no timeout would hold and ``close()`` would
hang. RocketMQ runs these callbacks in a callback executor for the same reason.

Rules:

- :meth:`CallbackThread.submit` queues a call and returns at once (it is called from the loop
  thread); the thread starts with the first call.
- Calls run one at a time in the order submitted; an exception is logged, never raised.
- :meth:`CallbackThread.stop` lets the calls already queued run, then ends the thread, and waits
  for that up to its ``timeout`` (not when called from a callback). It is a daemon thread: a
  callback that never returns cannot hold up the interpreter's exit beyond that bound.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CallbackThread"]

log = logging.getLogger(__name__)

_Item = tuple[Callable[..., object], tuple[Any, ...]] | None


class CallbackThread:
    """Runs submitted calls in one daemon thread, in order."""

    def __init__(self, name: str = "minimq-callbacks") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue ``fn(*args)``; starts the thread on first use."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put((fn, args))

    @property
    def in_callback(self) -> bool:
        """True when called from this thread (by a callback)."""
        thread = self._thread
        return thread is not None and thread is threading.current_thread()

    def stop(self, timeout: float) -> None:
        """End the thread once the calls queued so far have run; wait for them at most
        ``timeout`` seconds (a callback closing its own client is not waited for)."""
        self._queue.put(None)
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("%s: callbacks still running %.3g s after close", self._name, timeout)

    def _main(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, args = item
            try:
                fn(*args)
            except Exception:
                log.exception("%s: a callback raised", self._name)
