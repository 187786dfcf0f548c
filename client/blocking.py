"""The blocking client: :class:`Producer` and :class:`PullConsumer` for ordinary programs.

They wrap the trio-native classes of :mod:`client.aio`. One background thread runs one trio
loop and one :class:`~client.instance.ClientInstance` per name-server list in the process; every
blocking producer and consumer of that list shares it (RocketMQ's one ``MQClientInstance`` per
process). The thread starts with the first user and stops when the last one closes.

To tune the instance (heartbeat and route intervals, timeouts, client IP, instance name), pass
``client_config=ClientConfig.create(namesrv, heartbeat_broker_interval_s=5)`` instead of
``namesrv``: the producers and consumers given the same (equal) config share one instance, with
its own thread and client id.

Every blocking call takes a ``timeout`` (seconds) and raises
:class:`~client.errors.RequestTimeoutError` when it runs out; Ctrl+C interrupts a waiting call
(the work in the loop is cancelled); ``close()`` always returns. A bad ``timeout`` (NaN, not a
number; for a send, also 0 or less) raises in the calling thread and never reaches the shared
loop: nothing is sent. A consumer's ``poll(timeout=0)`` returns what is buffered at once.

``send_async`` callbacks run in the instance's callback thread (:mod:`client.callback_thread`),
one at a time, never in the loop thread: they may block and may call the blocking API, waiting
on another send's future included (futures are resolved in the loop thread, before the
callback is queued).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar, Unpack

import trio

from client import producer as aio_producer
from client import pull_consumer as aio_consumer
from client import push_consumer as aio_push
from client import transaction as aio_tx
from client.callback_thread import CallbackThread
from client.config import ClientConfig, parse_namesrv
from client.consume_service import Handler
from client.errors import ClientClosedError, RequestTimeoutError
from client.instance import ClientInstance, with_call_budget
from client.loop_thread import LoopThread, checked_timeout
from client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from client.producer import DEFAULT_PRODUCER_GROUP, QueueSelector, SendCallback
from client.producer_options import ProducerOptions, TransactionProducerOptions, producer_settings
from common.subscription import SubscriptionExpression

log = logging.getLogger(__name__)

T = TypeVar("T")


class _AsyncConsumer(Protocol):
    """What the blocking facade needs of a trio-native consumer."""

    closed: trio.Event

    @property
    def instance(self) -> ClientInstance: ...

    async def run(self, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None: ...


C = TypeVar("C", bound=_AsyncConsumer)

CLOSE_TIMEOUT_S = 5.0
"""Bound of each step of ``close()``: ending the producer (its accepted ``send_async`` calls
included) or consumer, then, for the last user of the instance, unregistering from the brokers
and stopping the loop thread (a consumer's first step may take twice as long)."""
SLACK_S = 1.0
"""Extra time a blocking call allows beyond the inner operation's own timeout."""


_Key = tuple[str, ...] | ClientConfig


@dataclass(eq=False)
class _Shared:
    key: _Key
    loop: LoopThread
    instance: ClientInstance
    callbacks: CallbackThread
    users: int = 0


_shared: dict[_Key, _Shared] = {}
"""By name-server list, or by ClientConfig (equal configs share an instance)."""
_shared_lock = threading.Lock()


def _forget_shared_after_fork() -> None:
    """In a forked child: the parent's loop threads are not here, and the lock may have been
    held by one of its threads at the fork. Start afresh."""
    global _shared_lock
    _shared.clear()
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_shared_after_fork)


def _acquire(namesrv: str | Sequence[str] | None, config: ClientConfig | None) -> _Shared:
    """The process's loop thread and client instance for this name-server list, or for this
    client config (+1 user)."""
    key: _Key = config if config is not None else parse_namesrv(namesrv)
    with _shared_lock:
        shared = _shared.get(key)
        if shared is None or not shared.loop.running:
            config = config or ClientConfig.create(namesrv)
            loop = LoopThread(f"minimq-client[{';'.join(config.namesrv_addrs)}]")
            loop.start()
            instance = ClientInstance(config)
            try:
                loop.start_service(instance.run, timeout=CLOSE_TIMEOUT_S)
            except BaseException:
                loop.stop()
                raise
            callbacks = CallbackThread(f"minimq-callbacks[{';'.join(config.namesrv_addrs)}]")
            shared = _shared[key] = _Shared(key, loop, instance, callbacks)
        shared.users += 1
        return shared


def _release(shared: _Shared) -> None:
    """-1 user; the last one stops the loop thread (unregistering from the brokers)."""
    if shared.loop.forked:  # made by the parent process: its loop and connections are there
        return
    with _shared_lock:
        shared.users -= 1
        if shared.users > 0:
            return
        if _shared.get(shared.key) is shared:
            del _shared[shared.key]
    try:  # unregister from the brokers while the connections still work, then stop the loop
        shared.loop.run(shared.instance.shutdown, timeout=CLOSE_TIMEOUT_S)
    except Exception:
        log.exception("closing the client instance failed")
    finally:
        shared.loop.stop(CLOSE_TIMEOUT_S)
        shared.callbacks.stop(CLOSE_TIMEOUT_S)  # after the loop: the closing sends' callbacks


def _check_options(options: Mapping[str, Any]) -> None:
    """The blocking clients make their own instance: ``instance=`` is the trio API's."""
    if "instance" in options:
        raise TypeError(
            "instance= is for client.aio; the blocking clients share a ClientInstance of their "
            "own: pass client_config=ClientConfig.create(namesrv, ...) to tune it"
        )


async def _call_sync(fn: Callable[..., T], *args: Any) -> T:
    """Run a plain function in the loop thread (it touches trio state)."""
    return fn(*args)


_Caller = tuple[int, int]
"""A process id and a thread ident: who starts or closes a client."""


def _caller() -> _Caller:
    """This process and thread."""
    return os.getpid(), threading.get_ident()


def _another_thread_here(other: _Caller, me: _Caller) -> bool:
    """``other`` is another thread of this process: a forked child has only the thread that
    forked, so a start or close the parent's threads had in progress never ends here."""
    return other[0] == me[0] and other != me


class _BlockingBase:
    """A started/closed life cycle around a shared loop thread."""

    _what = "client"

    def __init__(
        self, namesrv: str | Sequence[str] | None, client_config: ClientConfig | None = None
    ) -> None:
        if (
            client_config is not None
            and namesrv
            and parse_namesrv(namesrv) != client_config.namesrv_addrs
        ):
            raise ValueError("namesrv differs from client_config.namesrv_addrs: pass one")
        self._namesrv = namesrv
        self._client_config = client_config
        self._shared: _Shared | None = None
        self._closed = False
        self._state = threading.Lock()
        """Guards the start/close transitions (two threads, or a signal handler, may race).
        Nothing is called while it is held: a signal handler runs at a call, and one closing
        this client there would wait for it for ever."""
        self._starting: _Caller | None = None
        """The thread in :meth:`start` now."""
        self._start_over = threading.Event()
        self._closer: tuple[_Caller, _Shared] | None = None
        """The thread that closes, and the instance it leaves."""
        self._close_over = threading.Event()

    def start(self) -> Self:
        """Join the shared client instance; returns self."""
        raise NotImplementedError

    def close(self) -> None:
        """Leave the shared client instance; always returns."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _loop(self) -> LoopThread:
        if self._shared is None or self._closed:
            raise ClientClosedError(self._what)
        return self._shared.loop

    def _run(
        self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float, give_up: bool = True
    ) -> T:
        try:
            return self._loop().run(fn, *args, timeout=timeout, give_up=give_up)
        except TimeoutError as exc:
            if isinstance(exc, RequestTimeoutError):
                raise
            raise RequestTimeoutError(f"{self._what} call", timeout) from exc

    def _run_within(
        self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None, default: float
    ) -> T:
        """:meth:`_run` bounded by ``timeout``, the call's whole budget: its requests may take
        all of it (:func:`client.instance.with_call_budget`), not just ``request_timeout_s``.
        ``timeout`` None: ``default``, and requests keep their own timeout."""
        budget = checked_timeout(timeout)
        if budget is None:
            return self._run(fn, *args, timeout=default)
        result: T = self._run(with_call_budget, budget, fn, *args, timeout=budget)
        return result

    def _start(self, open_fn: Callable[[_Shared], None]) -> None:
        """Join the shared instance and ``open_fn`` it. A :meth:`close` called meanwhile (by
        another thread, or a signal handler of this one) closes what started, then
        ClientClosedError is raised here."""
        me = _caller()  # not under the lock: a call is where a signal handler may run
        with self._state:
            if self._shared is not None or self._closed or self._starting is not None:
                raise RuntimeError(f"{self._what} can be started only once")
            self._starting = me
        shared: _Shared | None = None
        try:
            shared = _acquire(self._namesrv, self._client_config)
            try:
                open_fn(shared)
            except BaseException:
                _release(shared)
                shared = None
                raise
        finally:
            with self._state:
                self._starting, self._shared = None, shared
                closed_meanwhile = self._closed
            self._start_over.set()
        if closed_meanwhile:
            self.close()
            raise ClientClosedError(f"{self._what} (closed while starting)")

    def _close(self, close_fn: Callable[[LoopThread], None]) -> None:
        """Close once, whoever calls: the first call leaves the instance; a call from another
        thread meanwhile returns once that close is done (a start in progress is waited for,
        then closed); a call from a signal handler interrupting this thread's start or close
        returns at once (the interrupted call finishes the job), and so does one from the
        instance's send-callback thread (the close waits for that thread) or from a forked
        child (the start or close in progress was the parent's)."""
        me = _caller()  # not under the lock: a call is where a signal handler may run
        with self._state:
            self._closed = True
            shared, self._shared = self._shared, None
            if shared is not None:
                self._closer = (me, shared)
            starting, closer = self._starting, self._closer
        if shared is not None:
            try:
                self._leave(shared, close_fn)
            finally:
                self._close_over.set()
        elif starting is not None:
            if _another_thread_here(starting, me):
                self._start_over.wait()
                self._close(close_fn)
        elif closer is not None and _another_thread_here(closer[0], me):
            self._join_close(closer[1])
            if not closer[1].callbacks.in_callback:
                self._close_over.wait()

    def _leave(self, shared: _Shared, close_fn: Callable[[LoopThread], None]) -> None:
        """``close_fn`` in the loop, then leave the shared instance."""
        if shared.loop.forked:  # the parent's client: nothing of it runs in this process
            return
        try:
            close_fn(shared.loop)
        except Exception:
            log.exception("closing %s failed", self._what)
        finally:  # a Ctrl+C still releases the loop thread, then reaches the caller
            _release(shared)

    def _join_close(self, shared: _Shared) -> None:
        """A second ``close()`` while another thread closes, before it waits for that close
        (a consumer's handler closing it must not be waited for)."""


class Producer(_BlockingBase):
    """Blocking producer: ``with Producer(group="pg", namesrv="127.0.0.1:9876") as p:``.

    Options are those of :class:`client.aio.Producer`. A send's ``timeout`` is its whole
    budget, retries included, as RocketMQ's ``send(msg, timeout)`` (default ``send_timeout``,
    3 s); a ``timeout`` of 0 or less (or not finite) raises ValueError before anything is
    sent. ``client_config`` tunes the shared client instance (see the module docstring).
    """

    def __init__(
        self,
        group: str = DEFAULT_PRODUCER_GROUP,
        namesrv: str | Sequence[str] | None = None,
        *,
        client_config: ClientConfig | None = None,
        **options: Unpack[ProducerOptions],
    ) -> None:
        self._setup(group, namesrv, client_config, dict(options), transactional=False)

    def _setup(
        self,
        group: str,
        namesrv: str | Sequence[str] | None,
        client_config: ClientConfig | None,
        options: dict[str, Any],
        *,
        transactional: bool,
    ) -> None:
        _check_options(options)
        who = type(self).__name__  # a bad option fails here, not at start()
        settings = producer_settings(options, who=who, transactional=transactional)
        super().__init__(namesrv, client_config)
        self._what = f"producer {group}"
        self.group = group
        self._options = options
        self._async: aio_producer.Producer | None = None
        self.send_timeout: float = settings.send_timeout

    def start(self) -> Self:
        """Join the shared client instance and register the group; returns self."""

        def open_(shared: _Shared) -> None:
            producer = aio_producer.Producer(self.group, instance=shared.instance, **self._options)
            shared.loop.run(producer.__aenter__, timeout=CLOSE_TIMEOUT_S)
            self._async = producer

        self._start(open_)
        return self

    def close(self) -> None:
        """Unregister the group and leave the shared instance; always returns."""

        def close_(loop: LoopThread) -> None:
            if self._async is not None:  # it waits up to send_timeout for send_async calls
                limit = max(CLOSE_TIMEOUT_S, self.send_timeout + SLACK_S)
                loop.run(self._async.__aexit__, None, None, None, timeout=limit)

        self._close(close_)

    def _p(self) -> aio_producer.Producer:
        self._loop()
        assert self._async is not None
        return self._async

    def _call_timeout(self, timeout: float | None) -> float:
        """A call's bound: ``timeout`` (checked as :meth:`_budget` checks it), else
        ``send_timeout`` and some slack."""
        if timeout is None:
            return self.send_timeout + SLACK_S
        return self._budget(timeout, "oneway send")

    def _budget(self, timeout: float | None, what: str) -> float:
        """A send's budget: ``timeout``, else ``send_timeout``. Anything but a finite number
        of seconds > 0 raises here, before anything is sent (TypeError, ValueError), as the
        trio producer's ``send_timeout`` does: a send with no time to run is a caller's bug,
        and a RequestTimeoutError would say its outcome is unknown."""
        if timeout is None:
            return self.send_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout of a {what} must be a number of seconds, got {timeout!r}")
        if not 0 < timeout < math.inf:  # also NaN
            raise ValueError(
                f"timeout of a {what} must be a finite number of seconds > 0, got {timeout!r}"
            )
        return float(timeout)

    def send(
        self, msg: Message, *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send one message and return the broker's answer (retrying on another broker)
        within ``timeout`` seconds."""
        budget = self._budget(timeout, "send")
        return self._run(_send, self._p(), msg, queue, budget, timeout=budget + SLACK_S)

    def send_batch(
        self, messages: Sequence[Message], *, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic in one request, within ``timeout`` seconds."""
        budget = self._budget(timeout, "batch send")
        return self._run(_send_batch, self._p(), messages, budget, timeout=budget + SLACK_S)

    def send_oneway(self, msg: Message, *, timeout: float | None = None) -> None:
        """Send without waiting for the broker's answer."""
        self._run(self._p().send_oneway, msg, timeout=self._call_timeout(timeout))

    def send_orderly(
        self,
        msg: Message,
        sharding_key: str | None = None,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send to the queue ``sharding_key`` (or ``selector``) picks, within ``timeout``
        seconds; see the aio producer."""
        budget = self._budget(timeout, "orderly send")
        return self._run(
            _send_orderly,
            self._p(),
            msg,
            sharding_key,
            selector,
            arg,
            budget,
            timeout=budget + SLACK_S,
        )

    def send_async(
        self, msg: Message, callback: SendCallback | None = None
    ) -> concurrent.futures.Future[SendResult]:
        """Send in the background within ``send_timeout``; returns a Future of the result.

        The message is checked here (raising as :meth:`send` would). The future is already
        running (``cancel()`` cannot unsend it); it is resolved in the client's loop thread, so
        functions given to its ``add_done_callback`` run there and must be quick.
        ``callback(result, error)`` runs in the client's callback thread, in the order the
        sends end; it may block or use the blocking API. :meth:`close` waits (up to
        ``send_timeout``) for the sends accepted before it.
        """
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable or None, got {callback!r}")
        shared = self._shared
        producer = self._p()
        assert shared is not None
        future: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()

        def done(result: SendResult | None, error: BaseException | None) -> None:
            _resolve(future, result, error)  # in the loop thread: waiters wake at once
            if callback is not None:
                shared.callbacks.submit(_call_back, callback, result, error)

        self._run(_call_sync, producer.send_async, msg, done, timeout=self._call_timeout(None))
        return future


class TransactionProducer(Producer):
    """Blocking transactional producer:
    ``with TransactionProducer(group="tx-pg", namesrv=..., checker=check) as p:`` then
    ``p.send_in_transaction(msg, execute, arg)``.

    ``execute(msg, arg)`` runs in the calling thread between the half message and the decision;
    ``checker(msg)`` runs in a worker thread of the producer's check pool whenever a broker
    asks (``check_threads`` at once; ``close()`` abandons those still running). Options are
    those of :class:`client.aio.TransactionProducer`.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        checker: aio_tx.TransactionChecker,
        client_config: ClientConfig | None = None,
        **options: Unpack[TransactionProducerOptions],
    ) -> None:
        self._setup(group, namesrv, client_config, dict(options), transactional=True)
        self.checker = checker

    def start(self) -> Self:
        """Join the shared client instance, register the group and its checker; returns
        self."""

        def open_(shared: _Shared) -> None:
            producer = aio_tx.TransactionProducer(
                self.group, instance=shared.instance, checker=self.checker, **self._options
            )
            shared.loop.run(producer.__aenter__, timeout=CLOSE_TIMEOUT_S)
            self._async = producer

        self._start(open_)
        return self

    def _tx(self) -> aio_tx.TransactionProducer:
        producer = self._p()
        assert isinstance(producer, aio_tx.TransactionProducer)
        return producer

    def send_in_transaction(
        self,
        msg: Message,
        execute: aio_tx.LocalExecutor,
        arg: Any = None,
        *,
        timeout: float | None = None,
    ) -> aio_tx.TransactionSendResult:
        """Store ``msg`` as a half message, run ``execute(msg, arg)`` here (an exception or a
        non-state result counts as UNKNOW), then send the decision.

        ``timeout`` is the half send's whole budget, retries included, as :meth:`send`'s
        (default ``send_timeout``); sending the decision (oneway) may take as long again.
        ``execute`` is not bounded. A message that is not one :class:`Message`, or an
        ``execute`` that is not callable, is refused before anything is sent."""
        aio_tx.check_transaction_args(msg, execute)
        budget = self._budget(timeout, "transactional send")
        producer = self._tx()
        half = self._run(_send_half, producer, msg, budget, timeout=budget + SLACK_S)
        if half.status is not SendStatus.SEND_OK:
            state = aio_tx.LocalTransactionState.ROLLBACK_MESSAGE
        elif aio_tx.is_async_callable(execute):
            state = self._loop().run(aio_tx.run_local, execute, msg, arg)
        else:
            state = aio_tx.run_local_sync(execute, msg, arg)
        return self._run(producer.end_transaction, half, state, timeout=budget + SLACK_S)

    def fetch_publish_queues(
        self, topic: str, *, timeout: float | None = None
    ) -> list[MessageQueue]:
        """The topic's writable queues; heartbeats to its brokers at once so they may ask this
        member to check the group's half messages."""
        return self._run_within(
            self._tx().fetch_publish_queues,
            topic,
            timeout=timeout,
            default=self.send_timeout + SLACK_S,
        )


async def _send(
    producer: aio_producer.Producer, msg: Message, queue: MessageQueue | None, budget: float
) -> SendResult:
    return await producer.send(msg, queue=queue, send_timeout=budget)


async def _send_half(
    producer: aio_tx.TransactionProducer, msg: Message, budget: float
) -> SendResult:
    return await producer.send_half(msg, send_timeout=budget)


async def _send_batch(
    producer: aio_producer.Producer, messages: Sequence[Message], budget: float
) -> SendResult:
    return await producer.send_batch(messages, send_timeout=budget)


async def _send_orderly(
    producer: aio_producer.Producer,
    msg: Message,
    sharding_key: str | None,
    selector: QueueSelector | None,
    arg: Any,
    budget: float,
) -> SendResult:
    return await producer.send_orderly(
        msg, sharding_key, selector=selector, arg=arg, send_timeout=budget
    )


def _resolve(
    future: concurrent.futures.Future[SendResult],
    result: SendResult | None,
    error: BaseException | None,
) -> None:
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]


def _call_back(
    callback: SendCallback, result: SendResult | None, error: BaseException | None
) -> None:
    """In the callback thread: ``callback(result, error)``, an exception logged."""
    try:
        callback(result, error)
    except Exception:
        log.exception("send callback raised")


@dataclass(eq=False)
class _Service(Generic[C]):
    """A trio-native consumer run as a service of the loop thread. Its scope is made here, not
    by the consumer, so a start interrupted after the consumer started can still stop it."""

    consumer: C
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    running: bool = False
    """Its task has begun (in the loop thread)."""
    ended: trio.Event = field(default_factory=trio.Event)

    async def serve(self, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        """Run the consumer until :attr:`scope` is cancelled."""
        self.running = True
        try:
            with self.scope:
                await self.consumer.run(task_status=task_status)
        finally:
            self.ended.set()

    async def wait_ended(self) -> None:
        """Wait until the task has returned (a task not begun yet starts cancelled)."""
        if self.running:
            await self.ended.wait()


class _ServiceConsumer(_BlockingBase, Generic[C]):
    """A trio-native consumer run as a service of the shared loop thread."""

    _kind = "consumer"

    def __init__(
        self,
        factory: Callable[..., C],
        group: str,
        namesrv: str | Sequence[str] | None,
        client_config: ClientConfig | None,
        options: dict[str, Any],
    ) -> None:
        _check_options(options)
        super().__init__(namesrv, client_config)
        self._what = f"{self._kind} {group}"
        self.group = group
        self._factory = factory
        self._options = options
        self._async: C | None = None
        self._service: _Service[C] | None = None
        timeout = client_config.request_timeout_s if client_config is not None else 3.0
        self.request_timeout = timeout + SLACK_S

    def start(self) -> Self:
        """Join the shared client instance and start the consumer; returns self."""

        def open_(shared: _Shared) -> None:
            consumer = self._factory(self.group, instance=shared.instance, **self._options)
            service = _Service(consumer)
            try:
                shared.loop.start_service(service.serve, timeout=CLOSE_TIMEOUT_S)
            except BaseException:
                # interrupted (Ctrl+C) or timed out: the consumer may have started meanwhile
                with contextlib.suppress(Exception):
                    self._stop(shared.loop, service)
                raise
            self._async, self._service = consumer, service

        self._start(open_)
        return self

    @property
    def client_id(self) -> str:
        """This member's client id (``ip@instance``), as the brokers list it."""
        return self._c().instance.client_id

    def close(self) -> None:
        """Stop the consumer (committing or persisting its offsets) and leave the shared
        instance; always returns, once the consumer has closed (a second call from another
        thread waits for the first)."""

        def close_(loop: LoopThread) -> None:
            if self._service is not None:
                self._stop(loop, self._service)

        self._close(close_)

    def _join_close(self, shared: _Shared) -> None:
        if self._service is not None:
            with contextlib.suppress(Exception):  # the loop may have stopped: closed already
                self._stop(shared.loop, self._service)

    def _stop(self, loop: LoopThread, service: _Service[C]) -> None:
        """Close the consumer ``service`` runs and wait for it."""
        loop.run(_stop_service, service, timeout=2 * CLOSE_TIMEOUT_S)

    def _c(self) -> C:
        self._loop()
        assert self._async is not None
        return self._async


IDLE_POLL_S = 1.0
"""How long one poll of ``PullConsumer.messages(None)`` waits before it polls again."""


class PullConsumer(_ServiceConsumer[aio_consumer.PullConsumer]):
    """Blocking pull consumer: ``with PullConsumer(group="cg", namesrv=...) as c:``.

    Options are those of :class:`client.aio.PullConsumer`; ``client_config`` tunes the shared
    client instance (see the module docstring).
    """

    _kind = "pull consumer"
    _exit_clean = True
    """Whether the application finished with everything it polled when it closes (see
    :meth:`close`)."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        client_config: ClientConfig | None = None,
        **options: Any,
    ) -> None:
        super().__init__(aio_consumer.PullConsumer, group, namesrv, client_config, options)

    def _t(self, timeout: float | None) -> float:
        return self.request_timeout if timeout is None else timeout

    def _within(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None) -> T:
        return self._run_within(fn, *args, timeout=timeout, default=self.request_timeout)

    def fetch_queues(self, topic: str, *, timeout: float | None = None) -> list[MessageQueue]:
        """The topic's readable queues, sorted."""
        return self._within(self._c().fetch_queues, topic, timeout=timeout)

    def assign(
        self, queues: Iterable[MessageQueue], expression: SubscriptionExpression = "*"
    ) -> None:
        """Read exactly ``queues`` from now on, filtered by ``expression`` (a TAG expression
        or a :class:`common.subscription.MessageSelector`)."""
        self._run(_call_sync, self._c().assign, list(queues), expression, timeout=self._t(None))

    def subscribe(self, topic: str, expression: SubscriptionExpression = "*") -> None:
        """Group mode: share ``topic``'s queues with the group's other members (rebalance);
        :meth:`assignment` shows the queues this member owns now."""
        self._run(_call_sync, self._c().subscribe, topic, expression, timeout=self._t(None))

    def assignment(self) -> list[MessageQueue]:
        """The assigned queues."""
        return self._run(_call_sync, self._c().assignment, timeout=self._t(None))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Make ``offset`` the next offset :meth:`poll` returns for ``mq``."""
        self._run(_call_sync, self._c().seek, mq, offset, timeout=self._t(None))

    def seek_to_begin(self, mq: MessageQueue, *, timeout: float | None = None) -> None:
        """Seek to the queue's min offset."""
        self._within(self._c().seek_to_begin, mq, timeout=timeout)

    def seek_to_end(self, mq: MessageQueue, *, timeout: float | None = None) -> None:
        """Seek to the queue's max offset."""
        self._within(self._c().seek_to_end, mq, timeout=timeout)

    def seek_to_timestamp(
        self, mq: MessageQueue, timestamp_ms: int, *, timeout: float | None = None
    ) -> None:
        """Seek to the first message stored at or after ``timestamp_ms``."""
        self._within(self._c().seek_to_timestamp, mq, timestamp_ms, timeout=timeout)

    def position(self, mq: MessageQueue) -> int | None:
        """The next offset :meth:`poll` returns for ``mq`` (None until known)."""
        position: int | None = self._run(_call_sync, self._c().position, mq, timeout=self._t(None))
        return position

    def committed(self, mq: MessageQueue, *, timeout: float | None = None) -> int | None:
        """The group's committed offset of ``mq`` on its broker."""
        return self._within(self._c().committed, mq, timeout=timeout)

    def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ReceivedMessage]:
        """Messages buffered or arriving within ``timeout`` seconds (``[]`` if none; 0 or
        less: what is buffered now)."""
        seconds = checked_timeout(timeout)
        if seconds is None:
            raise TypeError("poll needs a timeout in seconds")
        try:
            # never given up on while the loop is busy: a poll abandoned so would still take
            # messages once the loop runs again, and nobody would receive them
            return self._run(
                self._c().poll_for, seconds, max_records, timeout=seconds + SLACK_S, give_up=False
            )
        except RequestTimeoutError:
            # The loop's clock jumped past both deadlines at once (the process was stopped, by
            # SIGSTOP say, while the poll waited), so the outer one won. poll_for hands messages
            # out without waiting after taking them, so a cancelled poll took none.
            return []

    def commit(
        self, offsets: Mapping[MessageQueue, int] | None = None, *, timeout: float | None = None
    ) -> None:
        """Commit ``offsets`` (default: every changed position) to the brokers."""
        self._within(self._c().commit, offsets, timeout=timeout)

    def messages(
        self, timeout: float | None = 1.0, max_records: int | None = None
    ) -> Iterator[ReceivedMessage]:
        """The messages one at a time: ``for msg in consumer.messages(timeout=5):``.

        Each step polls (at most ``max_records``) when the last poll's messages are all handed
        out, so with ``auto_commit`` a batch is committed only once the loop asked for the
        message after it. The iteration ends when no message arrives within ``timeout``
        seconds (``None``: never; Ctrl+C still interrupts it) or when the consumer is closed
        (by another thread). ``for msg in consumer`` is ``consumer.messages(None)``.
        """
        seconds = checked_timeout(timeout)
        if max_records is not None and max_records <= 0:
            raise ValueError(f"max_records must be > 0, got {max_records}")
        self._c()  # a consumer not started (or closed) fails here, not at the first step
        return self._message_steps(seconds, max_records)

    def __iter__(self) -> Iterator[ReceivedMessage]:
        return self.messages(None)

    def _message_steps(
        self, seconds: float | None, max_records: int | None
    ) -> Iterator[ReceivedMessage]:
        while True:
            try:
                batch = self.poll(IDLE_POLL_S if seconds is None else seconds, max_records)
            except ClientClosedError:
                return  # closed by another thread while we iterated
            if batch:
                yield from batch
            elif seconds is not None:
                return

    def close(self) -> None:
        """Stop the consumer and leave the shared instance (see the base class). With
        ``auto_commit`` it commits every position: the application is done with all it polled.
        Leaving a ``with`` block by an exception commits only what polls before the last one
        handed out, so the last poll's messages come again."""
        super().close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit_clean = exc_type is None
        self.close()

    def _stop(self, loop: LoopThread, service: _Service[aio_consumer.PullConsumer]) -> None:
        service.consumer.close_clean = self._exit_clean  # read in the loop once it is cancelled
        super()._stop(loop, service)


async def _stop_service(service: _Service[Any]) -> None:
    service.scope.cancel()
    await service.wait_ended()


async def _stop_push(service: _Service[aio_push.PushConsumer], caller: int) -> None:
    service.scope.cancel()
    service.consumer.abandon_handler_in(caller)  # a handler closing its consumer: not waited for
    await service.wait_ended()


class PushConsumer(_ServiceConsumer[aio_push.PushConsumer]):
    """Blocking push consumer: ``with PushConsumer(group="cg", namesrv=...) as c:`` then
    ``c.subscribe(topic, expression, handler)``; messages are consumed in the background until
    ``close()``.

    Handlers are plain functions ``handler(msgs) -> ConsumeResult``; they run in a pool of
    ``consume_thread_max`` worker threads (orderly: one queue at a time each). Options are
    those of :class:`client.aio.PushConsumer`; ``client_config`` tunes the shared client
    instance (see the module docstring). :meth:`close` waits for the handlers in flight up to
    ``await_termination_ms`` (10 s), then abandons the ones still running (their messages
    are consumed again later). :meth:`suspend` and :meth:`resume` stop and restart pulling
    (RocketMQ's), from any thread.
    """

    _kind = "push consumer"

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        client_config: ClientConfig | None = None,
        **options: Any,
    ) -> None:
        if "consume_timeout_min" in options:  # a bad one fails here, not at start()
            aio_push.validate_consume_timeout(options["consume_timeout_min"])
        super().__init__(aio_push.PushConsumer, group, namesrv, client_config, options)

    def _stop(self, loop: LoopThread, service: _Service[aio_push.PushConsumer]) -> None:
        """The consumer bounds its own close (abandoning handlers after
        ``await_termination_ms``): the timeout only guards against a stuck loop thread. A
        handler closing its own consumer is not waited for (its messages count as not
        consumed)."""
        caller = threading.get_ident()
        bound = service.consumer.close_bound_s + SLACK_S
        loop.run(_stop_push, service, caller, timeout=bound)

    def subscribe(
        self,
        topic: str,
        expression: SubscriptionExpression = "*",
        handler: Handler | None = None,
    ) -> None:
        """Consume ``topic``'s messages matching ``expression`` (a TAG expression or a
        :class:`common.subscription.MessageSelector`) with ``handler``."""
        self._run(
            _call_sync,
            self._c().subscribe,
            topic,
            expression,
            handler,
            timeout=self.request_timeout,
        )

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``."""
        self._run(_call_sync, self._c().unsubscribe, topic, timeout=self.request_timeout)

    def assignment(self) -> list[MessageQueue]:
        """The queues this member consumes now."""
        return self._run(_call_sync, self._c().assignment, timeout=self.request_timeout)

    def suspend(self) -> None:
        """Stop pulling until :meth:`resume` (RocketMQ's ``suspend()``): what is buffered is
        still consumed, the member stays in its group with its queues, offsets are still
        persisted. Idempotent; from any thread, a handler's included; ClientClosedError
        before :meth:`start` and after :meth:`close`."""
        self._run(_call_sync, self._c().suspend, timeout=self.request_timeout)

    def resume(self) -> None:
        """Pull again at once after :meth:`suspend` (RocketMQ's ``resume()``). Idempotent;
        from any thread; ClientClosedError before :meth:`start` and after :meth:`close`."""
        self._run(_call_sync, self._c().resume, timeout=self.request_timeout)

    @property
    def suspended(self) -> bool:
        """True between :meth:`suspend` and :meth:`resume`."""
        suspended: bool = self._run(
            _call_sync, lambda: self._c().suspended, timeout=self.request_timeout
        )
        return suspended


class SharedInstance(_BlockingBase):
    """A handle on the process's shared loop thread and :class:`ClientInstance` for code that
    talks to brokers directly (the Spark connector's range pulls and offset queries).

    ``with SharedInstance(namesrv) as s: s.call(fn, *args, timeout=5)`` runs
    ``await fn(instance, *args)`` in the loop thread and returns its result.
    """

    _what = "shared client instance"

    def start(self) -> Self:
        """Join the shared client instance; returns self."""
        self._start(lambda shared: None)
        return self

    def close(self) -> None:
        """Leave the shared client instance; always returns."""
        self._close(lambda loop: None)

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float = 30.0) -> T:
        """``await fn(instance, *args)`` in the loop thread (RequestTimeoutError after
        ``timeout`` seconds)."""
        self._loop()
        assert self._shared is not None
        return self._run(fn, self._shared.instance, *args, timeout=timeout)

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start ``fn(instance, *args)`` in the loop thread; returns a Future at once."""
        loop = self._loop()
        assert self._shared is not None
        return loop.submit(fn, self._shared.instance, *args)
