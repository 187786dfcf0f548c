"""One trio loop in a background thread, driven by blocking code: the bridge under the sync client.

minimq's client has a trio-native async API and a blocking API with the same names. The blocking
face owns one :class:`LoopThread` per client instance: a daemon thread running ``trio.run`` with a
root nursery. Blocking methods call :meth:`LoopThread.run` (or :meth:`~LoopThread.submit`,
:meth:`~LoopThread.start_service`), which start a task in that nursery and hand its outcome back.
No loop is ever started per call.

Hot path: a blocking ``producer.send()`` is one :meth:`~LoopThread.run`. The task start is scheduled
with ``TrioToken.run_sync_soon`` (one wake-up of the loop, no other thread involved) and the outcome
comes back through a per-call ``threading.Lock`` that the loop releases: cheaper than a
``concurrent.futures.Future`` (no ``Condition``, no waiter list).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, TypeVar, TypeVarTuple

import trio

__all__ = ["LoopThread"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

INTERRUPT_GRACE_S: Final = 1.0
"""How long a caller hit by Ctrl+C waits for its cancelled task before re-raising."""
_WAIT_SLICE_S: Final = 0.1
"""Waits are sliced so that a pending KeyboardInterrupt is seen even when no real signal
interrupts the lock wait (``_thread.interrupt_main()``, Windows)."""
STUCK_LOOP_GRACE_S: Final = 2.0
"""How long past its own ``timeout`` a blocking call waits for the loop before it cancels the
task and gives up: a loop thread kept busy (user code blocking in it) cannot make a call with a
timeout hang."""
_TASK_NAME: Final = "minimq-loop-thread-call"
"""Fixed task name: saves trio from deriving one from the function on every call."""
_MISSING: Final = object()


def checked_timeout(timeout: object) -> float | None:
    """``timeout`` as seconds for :meth:`LoopThread.run`: None (no bound), else a real number;
    a negative one is 0 (a deadline already passed: the call times out at once).

    Raises TypeError for a non-number and ValueError for NaN, in the caller's thread: a bad
    value must never reach the loop, where it would end it for every client sharing it.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
    if math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds, got nan")
    return max(0.0, float(timeout))


def _describe(async_fn: object) -> str:
    """A readable name for ``async_fn`` in error messages."""
    return getattr(async_fn, "__qualname__", None) or repr(async_fn)


class _Call(Generic[T]):
    """One task's request and outcome; owned by the loop until ``done`` is released."""

    __slots__ = (
        "args",
        "async_fn",
        "cancel_requested",
        "done",
        "error",
        "future",
        "scope",
        "timeout",
        "value",
    )

    def __init__(
        self,
        async_fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        timeout: float | None,
        future: concurrent.futures.Future[T] | None,
    ) -> None:
        self.async_fn = async_fn
        self.args = args
        self.timeout = timeout
        self.future = future
        self.value: object = _MISSING
        self.error: BaseException | None = None
        self.scope: trio.CancelScope | None = None
        self.cancel_requested = False
        self.done: threading.Lock | None = None
        if future is None:
            self.done = threading.Lock()
            self.done.acquire()

    def cancel(self) -> None:
        """Cancel the task (loop thread only); a task not yet started is cancelled on start."""
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel()

    def finish(self) -> None:
        """Hand the outcome to the waiting caller or the future (loop thread only)."""
        future = self.future
        if future is None:
            assert self.done is not None
            self.done.release()
            return
        try:
            if self.error is not None:
                future.set_exception(self.error)
            elif not self.cancel_requested:
                future.set_result(self.value)  # type: ignore[arg-type]
        except concurrent.futures.InvalidStateError:
            pass  # cancelled by its owner meanwhile: nobody wants the outcome


class _StartedRelay:
    """The ``task_status`` handed to a service: forwards ``started`` and remembers it happened."""

    __slots__ = ("_inner", "was_started")

    def __init__(self, inner: trio.TaskStatus[Any]) -> None:
        self._inner = inner
        self.was_started = False

    def started(self, value: object = None) -> None:
        """Report the service ready with ``value`` (returned by ``start_service``)."""
        self._inner.started(value)
        self.was_started = True


class LoopThread:
    """A daemon thread running one trio loop (trio.run) with a root nursery; blocking code runs
    coroutines in it.

    Thread safety: every public method may be called from any thread. :meth:`run` and
    :meth:`start_service` block, so they refuse to run in the loop thread itself.
    """

    def __init__(self, name: str = "minimq-client") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._crash: BaseException | None = None
        self._pid: int | None = None
        """The process that started the thread (a forked child has no loop thread)."""

    @property
    def name(self) -> str:
        """The loop thread's name."""
        return self._name

    @property
    def running(self) -> bool:
        """True once :meth:`start` returned, until :meth:`stop` is called or the loop ends."""
        thread = self._thread
        alive = thread is not None and thread.is_alive()
        return alive and not self._closed and self._token is not None and not self.forked

    @property
    def forked(self) -> bool:
        """True in a child process forked after :meth:`start`: the loop thread is not there."""
        return self._pid is not None and self._pid != os.getpid()

    def start(self) -> None:
        """Start the thread and return once its loop runs; a second call raises RuntimeError."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            if self._thread is not None:
                raise RuntimeError(f"{self._name} was already started")
            thread = threading.Thread(target=self._main, name=self._name, daemon=True)
            self._thread = thread
            self._pid = os.getpid()
        thread.start()
        self._ready.wait()
        if self._token is None:
            raise RuntimeError(f"{self._name}: the trio loop failed to start") from self._crash

    def run(
        self,
        async_fn: Callable[[*Ts], Awaitable[T]],
        *args: *Ts,
        timeout: float | None = None,
        give_up: bool = True,
    ) -> T:
        """Run ``async_fn(*args)`` as a new task in the loop and block until it finishes.

        Returns its value or re-raises its exception (the same object). With ``timeout``, trio
        cancels the task after that many seconds and :class:`TimeoutError` is raised here; if
        the loop has not answered ``STUCK_LOOP_GRACE_S`` later (its thread is blocked), the
        task is cancelled from here and TimeoutError raised all the same (unless ``give_up`` is
        False: for a call whose outcome must not be lost, as a poll's messages). A negative
        ``timeout`` is 0; NaN or a non-number raises here (:func:`checked_timeout`). A
        KeyboardInterrupt while waiting cancels the task, waits for it at most
        ``INTERRUPT_GRACE_S`` and is re-raised. Raises RuntimeError if called in the loop thread
        (it would deadlock), before :meth:`start` or after :meth:`stop`.
        """
        call: _Call[T] = _Call(async_fn, args, checked_timeout(timeout), None)
        done = call.done
        assert done is not None
        self._check_caller()
        try:
            # scheduling inside the try: a Ctrl+C landing right after it still cancels the task
            self._schedule(call, blocking=True)
            if not self._wait(done, call.timeout if give_up else None):
                self._give_up(call, done)
        except KeyboardInterrupt:
            self._interrupt(call, done)
            raise
        error = call.error
        if error is not None:
            call.error = None
            try:
                raise error
            finally:
                del error, call
        return call.value  # type: ignore[return-value]

    def submit(
        self, async_fn: Callable[[*Ts], Awaitable[T]], *args: *Ts
    ) -> concurrent.futures.Future[T]:
        """Start ``async_fn(*args)`` in the loop and return a Future of its outcome at once.

        ``future.cancel()`` cancels the trio task and the future reports cancelled (the future
        stays PENDING while the task runs, never RUNNING, so that cancel() is always possible).
        Callbacks added with ``add_done_callback`` run in the loop thread when the task
        finishes (in the cancelling thread for a cancel): they must be quick and must not call
        :meth:`run`. Raises RuntimeError before :meth:`start` or after :meth:`stop`.
        """
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        call: _Call[T] = _Call(async_fn, args, None, future)
        self._schedule(call, blocking=False)
        future.add_done_callback(lambda f: self._cancel_if_cancelled(f, call))
        return future

    def start_service(
        self,
        async_fn: Callable[..., Awaitable[object]],
        *args: object,
        timeout: float | None = None,
    ) -> Any:
        """``nursery.start(async_fn, *args)`` in the root nursery; returns the started value.

        The service runs in the background until :meth:`stop`. If it raises before calling
        ``task_status.started(value)`` the exception is re-raised here; if it raises later it is
        logged and the loop keeps serving other tasks. ``timeout`` bounds the wait for
        ``started`` (the service is then cancelled and TimeoutError raised).
        """
        return self.run(self._start_guarded, async_fn, args, timeout=timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel every task and service, and wait at most ``timeout`` s for the thread to end.

        Idempotent and never raises. A thread still busy after ``timeout`` (a task ignoring
        cancellation) is logged and abandoned; it is a daemon thread. Blocking calls still
        waiting on such a task keep waiting for it.
        """
        if self.forked:  # the loop thread stayed in the parent: nothing to stop or wait for
            self._closed = True
            return
        with self._lock:
            self._closed = True
        token = self._token
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._cancel_root)
        thread = self._thread
        if thread is None or threading.get_ident() == self._thread_id:
            return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("%s did not stop within %.3g s; abandoning the thread", self._name, timeout)

    # -- inside the loop thread ------------------------------------------------------------------

    def _main(self) -> None:
        """Thread body: run the loop, record a crash instead of dying silently."""
        self._thread_id = threading.get_ident()
        try:
            trio.run(self._root)
        except BaseException as exc:
            self._crash = exc
            log.exception("%s: trio loop crashed", self._name)
        finally:
            self._ready.set()

    async def _root(self) -> None:
        """The loop's main task: hold the root nursery open until :meth:`stop` cancels it."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await trio.sleep_forever()

    def _cancel_root(self) -> None:
        """Cancel the root nursery (scheduled by :meth:`stop`)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _spawn(self, call: _Call[Any]) -> None:
        """Start ``call`` as a task (run via ``run_sync_soon``: must never raise)."""
        nursery = self._nursery
        try:
            assert nursery is not None
            nursery.start_soon(self._run_call, call, name=_TASK_NAME)
        except RuntimeError:  # nursery closed: stop() won the race
            call.error = RuntimeError(f"{self._name} is closed")
            call.finish()

    async def _run_call(self, call: _Call[Any]) -> None:
        """Task body: run the call in its own cancel scope and hand the outcome over."""
        if call.cancel_requested:  # cancelled before it started: do not start it at all
            call.finish()
            return
        try:
            scope = call.scope = trio.CancelScope()
            if call.timeout is not None:
                scope.relative_deadline = call.timeout
            with scope:
                call.value = await call.async_fn(*call.args)
            if scope.cancelled_caught and not call.cancel_requested:
                call.error = TimeoutError(
                    f"{_describe(call.async_fn)} did not finish within {call.timeout} s"
                )
        except trio.Cancelled:  # the root nursery is being cancelled by stop()
            call.error = RuntimeError(f"{self._name} is closed: task cancelled by stop()")
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who re-raises it
            call.error = exc
        finally:
            call.finish()

    async def _start_guarded(
        self, async_fn: Callable[..., Awaitable[object]], args: tuple[object, ...]
    ) -> Any:
        """Start ``async_fn`` as a guarded service in the root nursery; return its started value."""
        assert self._nursery is not None
        return await self._nursery.start(self._guarded_service, async_fn, args)

    async def _guarded_service(
        self,
        async_fn: Callable[..., Awaitable[object]],
        args: tuple[object, ...],
        *,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run a service; after ``started`` its errors are logged instead of ending the loop."""
        relay = _StartedRelay(task_status)
        try:
            await async_fn(*args, task_status=relay)
        except Exception:
            if not relay.was_started:
                raise
            log.exception("%s: service %s failed", self._name, _describe(async_fn))

    # -- caller side -----------------------------------------------------------------------------

    def _check_caller(self) -> None:
        """RuntimeError unless a blocking call may be made from this thread now."""
        if self.forked:
            raise RuntimeError(
                f"{self._name} was started in process {self._pid}, and its loop thread did not "
                "follow the fork: make the client again in this process"
            )
        if self._closed:
            raise RuntimeError(f"{self._name} is closed")
        if self._token is None:
            raise RuntimeError(f"{self._name} is not started")
        if threading.get_ident() == self._thread_id:
            raise RuntimeError(f"blocking call into {self._name} from its own loop thread")

    def _schedule(self, call: _Call[Any], *, blocking: bool) -> None:
        """Check the loop accepts calls from this thread and schedule ``call``'s task start."""
        if self.forked:
            self._check_caller()  # raises, naming the process that started the loop
        token = self._token
        if self._closed:
            raise RuntimeError(f"{self._name} is closed")
        if token is None:
            raise RuntimeError(f"{self._name} is not started")
        if blocking and threading.get_ident() == self._thread_id:
            raise RuntimeError(f"blocking call into {self._name} from its own loop thread")
        try:
            token.run_sync_soon(self._spawn, call)
        except trio.RunFinishedError:
            raise RuntimeError(f"{self._name} is closed") from None

    def _cancel_in_loop(self, call: _Call[Any]) -> bool:
        """Ask the loop to cancel ``call``'s task; False if the loop has finished."""
        token = self._token
        assert token is not None
        try:
            token.run_sync_soon(call.cancel)
        except trio.RunFinishedError:
            return False
        return True

    def _cancel_if_cancelled(
        self, future: concurrent.futures.Future[Any], call: _Call[Any]
    ) -> None:
        """Done-callback of a submitted future: propagate ``future.cancel()`` to the task."""
        if future.cancelled():
            self._cancel_in_loop(call)

    @staticmethod
    def _wait(done: threading.Lock, timeout: float | None) -> bool:
        """Wait for ``done``: True once released, False when ``timeout`` plus
        ``STUCK_LOOP_GRACE_S`` passed first (never, without a timeout)."""
        if done.acquire(timeout=_WAIT_SLICE_S):
            return True
        limit = None if timeout is None else time.monotonic() + timeout + STUCK_LOOP_GRACE_S
        while not done.acquire(timeout=_WAIT_SLICE_S):
            if limit is not None and time.monotonic() > limit:
                return False
        return True

    def _give_up(self, call: _Call[Any], done: threading.Lock) -> None:
        """The loop did not end the call in time: cancel it and wait a bounded moment. The
        call's own outcome wins if it comes (a loop back from a pause answers at once);
        otherwise ``call.error`` becomes a TimeoutError."""
        answered = self._cancel_in_loop(call) and done.acquire(timeout=INTERRUPT_GRACE_S)
        if answered and (call.error is not None or call.value is not _MISSING):
            return
        call.error = TimeoutError(
            f"{self._name} did not finish {_describe(call.async_fn)} within {call.timeout} s "
            f"plus {STUCK_LOOP_GRACE_S} s: its loop thread is busy (is code blocking in it?)"
        )

    def _interrupt(self, call: _Call[Any], done: threading.Lock) -> None:
        """Ctrl+C while waiting: cancel the task and give it a bounded moment to finish."""
        if self._cancel_in_loop(call) and not done.acquire(timeout=INTERRUPT_GRACE_S):
            log.warning(
                "%s: %s still running %.3g s after KeyboardInterrupt cancelled it",
                self._name,
                _describe(call.async_fn),
                INTERRUPT_GRACE_S,
            )
