"""The trio-native producer (RocketMQ's ``DefaultMQProducer``); the blocking one wraps it.

Rules (``sendDefaultImpl``):

- Messages are validated, given a ``UNIQ_KEY`` and, when the body is at least
  ``compress_over`` bytes, zlib-compressed — all before any network call.
- ``send`` picks a writable queue round robin (or latency-aware with
  ``latency_fault_tolerance=True``); when an attempt fails with a remoting error, a retriable
  broker answer or a broker whose address a route refresh dropped ("The broker[...] not
  exist") it retries (``retry_times`` more times, 2 by default) on a queue of another broker
  while one exists. ``send_batch`` retries the same way. With latency fault tolerance every
  attempt is recorded as RocketMQ 5 records it: a broker that refused is isolated and, until
  it takes a send again, the last choice when every broker is isolated. The sending, retries
  included, stays within ``send_timeout`` (a finite number of seconds); looking up the topic's
  route first is bounded by the client's ``request_timeout_s`` instead, as RocketMQ's route
  lookup by its ``mqClientApiTimeout``.
- A topic the name servers do not know is sent through the auto-create route (``TBW102``) with
  ``default_topic_queue_nums`` queues, as RocketMQ does; brokers with ``autoCreateTopicEnable``
  create it on the first message, with that many queues (at most TBW102's). The default is 8,
  the broker's ``defaultTopicQueueNums`` (RocketMQ's producer says 4).
- ``send_orderly`` sends to the queue its sharding key (or selector) picks and never moves to
  another queue; ``send_oneway`` sends once and waits for nothing; ``send_batch`` sends messages
  of one topic in one request to one queue (not to a retry topic ``%RETRY%<group>``, which
  takes single messages only, as RocketMQ's ``MessageBatch``).
- A send whose every attempt failed raises the last failure as its cause; when that was a
  timeout it is a :class:`RequestTimeoutError` (the outcome is unknown: the message may be
  stored), otherwise an :class:`MQClientError` whose ``code`` is the broker's answer when a
  broker refused the last attempt (``SYSTEM_BUSY``, ``NO_PERMISSION``...), as RocketMQ's.
- Anything but a :class:`Message` is a TypeError, before any network call. A send cut short
  because its producer closed raises :class:`ClientClosedError` (the cut request's failure as
  its cause).
- ``send_async`` validates the message when called; every send it accepts calls back exactly
  once, and leaving the producer waits (up to ``send_timeout``) for them to end.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from operator import attrgetter
from types import TracebackType
from typing import Any, TypeAlias, Unpack

import trio

from client import api
from client.compression import maybe_compress
from client.config import ClientConfig
from client.errors import (
    CLIENT_ERROR,
    BrokerNotFoundError,
    ClientClosedError,
    MQBrokerError,
    MQClientError,
    RemotingFailedError,
    RequestTimeoutError,
    TopicRouteError,
)
from client.instance import ClientInstance
from client.message import Message, MessageQueue, SendResult
from client.producer_options import (
    ProducerOptions,
    ProducerSettings,
    check_budget,
    producer_settings,
)
from client.queue_selector import MQFaultStrategy, RoundRobinSelector, select_by_key
from client.validation import (
    validate_batch_contents,
    validate_group,
    validate_message,
    validate_topic,
)
from common.batch_body import encode_batch_entries
from common.clock import monotonic_ms, wall_clock_ms
from common.errors import caused_by
from common.message import MessageConst
from common.message_id import UniqKeyGenerator
from common.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from common.topic import AUTO_CREATE_TOPIC_KEY_TOPIC, RETRY_GROUP_TOPIC_PREFIX
from remoting.command import RemotingCommand

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"

QueueSelector: TypeAlias = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""``select(queues, msg, arg) -> queue`` for :meth:`Producer.send_orderly`."""
SendCallback: TypeAlias = Callable[[SendResult | None, BaseException | None], None]
"""Called with ``(result, None)`` on success or ``(None, error)`` on failure."""

_UNIQ_KEYS = UniqKeyGenerator()
_topic_of = attrgetter("topic")


def encode_properties_str(props: dict[str, str]) -> str:
    """RocketMQ's ``messageProperties2String``: ``name\\x01value\\x02`` pairs."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def encode_batch(messages: Sequence[Message]) -> bytes:
    """The SEND_BATCH_MESSAGE body: ``[body, properties, flag]`` per message
    (:mod:`common.batch_body`)."""
    return encode_batch_entries([(m.body, m.properties, m.flag) for m in messages])


class Producer:
    """Sends messages; ``async with Producer(group=..., namesrv=...) as producer:``.

    Pass ``instance`` to share one :class:`ClientInstance` (connections, routes, heartbeats)
    between several producers and consumers; otherwise the producer runs its own.
    """

    def __init__(
        self,
        group: str = DEFAULT_PRODUCER_GROUP,
        namesrv: str | Sequence[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        **options: Unpack[ProducerOptions],
    ) -> None:
        validate_group(group)
        self._init(group, namesrv, instance, producer_settings(options))

    def _init(
        self,
        group: str,
        namesrv: str | Sequence[str] | None,
        instance: ClientInstance | None,
        settings: ProducerSettings,
    ) -> None:
        """Set up a producer of ``group`` from checked ``settings`` (also the transactional
        producer's, whose options are a superset)."""
        self.group = group
        self.send_timeout = settings.send_timeout
        self.retry_times = settings.retry_times
        self.compress_over = settings.compress_over
        self.max_message_size = settings.max_message_size
        self.default_topic_queue_nums = settings.default_topic_queue_nums
        self._own_instance = instance is None
        self._instance = instance or ClientInstance(ClientConfig.create(namesrv))
        self._fault = MQFaultStrategy(enabled=settings.latency_fault_tolerance)
        self._selectors: dict[str, RoundRobinSelector] = {}
        self._topics: set[str] = set()
        """The topics this producer has asked queues of (their routes stay refreshed)."""
        self._running = False
        self._async_sends = 0
        self._async_idle = trio.Event()
        self._async_idle.set()

    @property
    def instance(self) -> ClientInstance:
        """The client instance this producer uses."""
        return self._instance

    async def __aenter__(self) -> Producer:
        if self._own_instance:
            await self._instance.__aenter__()
        self._instance.register_producer(self.group)
        self._instance.published_topics.append(self.topics)
        self._running = True
        return self

    def topics(self) -> frozenset[str]:
        """The topics this producer has sent to (or looked up the queues of)."""
        return frozenset(self._topics)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # the accepted send_async calls end (shielded: the block may be left by cancellation)
            with trio.CancelScope(shield=True), trio.move_on_after(self.send_timeout):
                await self._async_idle.wait()
        finally:
            self._running = False
            with contextlib.suppress(ValueError):
                self._instance.published_topics.remove(self.topics)
            last_of_group = self._instance.unregister_producer(self.group)
            if self._own_instance:
                await self._instance.__aexit__(exc_type, exc, tb)
            elif last_of_group:  # another producer of the group in this process still sends
                with trio.CancelScope(shield=True):
                    await self._instance.unregister_client(producer_group=self.group)

    # ------------------------------------------------------------------ preparing

    def _prepare(self, msg: Message) -> tuple[str, bytes, int]:
        """Validate, stamp UNIQ_KEY, compress: ``(uniq key, body to send, sys flag)``."""
        if not self._running:
            raise ClientClosedError(f"producer {self.group}")
        if not isinstance(msg, Message):
            raise TypeError(f"a Message is needed, got {type(msg).__name__} {msg!r:.80}")
        validate_message(msg, self.max_message_size)
        uniq = msg.properties.get(MessageConst.UNIQ_KEY)
        if uniq is None:
            uniq = _UNIQ_KEYS.next()
            msg.properties[MessageConst.UNIQ_KEY] = uniq
        body, sys_flag = maybe_compress(bytes(msg.body), self.compress_over)
        return uniq, body, sys_flag

    async def _queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues; the auto-create route's brokers for a topic nobody knows yet."""
        self._topics.add(topic)
        try:
            queues = await self._instance.publish_queues(topic)
        except TopicRouteError as exc:
            try:
                default = await self._instance.publish_queues(AUTO_CREATE_TOPIC_KEY_TOPIC)
            except TopicRouteError:  # no broker creates topics: the error is about the user's
                raise caused_by(TopicRouteError(topic), exc)
            per_broker = self.default_topic_queue_nums
            queues = [
                MessageQueue(topic, q.broker_name, q.queue_id)
                for q in default
                if q.queue_id < per_broker
            ]
        if not queues:  # routed, but no broker of it takes writes now
            raise TopicRouteError(
                topic,
                f"topic {topic} has no writable queue: every broker of it is read-only "
                "(brokerPermission, or the topic's perm)",
            )
        return queues

    def _selector(self, topic: str) -> RoundRobinSelector:
        selector = self._selectors.get(topic)
        if selector is None:
            selector = self._selectors[topic] = RoundRobinSelector()
        return selector

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        send_timeout: float | None = None,
        avoid_broker: str | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer (to ``queue`` if given).

        Retries included, sending takes at most ``send_timeout`` seconds (default: the
        producer's), as RocketMQ's ``send(msg, timeout)``; the topic's route, when not known
        yet, is looked up first, within the client's ``request_timeout_s``. To bound the whole
        call, ``trio.fail_after`` also works. ``avoid_broker``: the first attempt goes to
        another broker when one has a writable queue (as a retry avoids the broker that
        failed; a push consumer's send-back fallback passes the broker it could not reach).
        """
        budget_s = self._budget(send_timeout)
        prepared = self._prepare(msg)
        if queue is not None and queue.topic != msg.topic:
            raise MQClientError(
                CLIENT_ERROR, f"message's topic {msg.topic} not equal mq's topic {queue.topic}"
            )
        try:  # not _as_closed_when_closed: a context manager costs about 1 us a send
            return await self._send_prepared(msg, prepared, queue, budget_s, avoid_broker)
        except MQClientError as exc:
            self._raise_if_closed(exc)
            raise

    def _raise_if_closed(self, exc: MQClientError) -> None:
        """Raise ClientClosedError, ``exc`` as its cause, when ``exc`` ended a send because the
        producer closed meanwhile (its requests were cut short)."""
        if not self._running and not isinstance(exc, ClientClosedError):
            raise caused_by(ClientClosedError(f"producer {self.group}"), exc)

    @contextmanager
    def _as_closed_when_closed(self) -> Iterator[None]:
        """A send that failed because the producer closed meanwhile raises ClientClosedError
        (see :meth:`_raise_if_closed`)."""
        try:
            yield
        except MQClientError as exc:
            self._raise_if_closed(exc)
            raise

    def _budget(self, send_timeout: float | None) -> float:
        """The time a send may take: ``send_timeout`` of the call, else the producer's."""
        if send_timeout is None:
            return self.send_timeout
        check_budget(send_timeout, "send_timeout")
        return send_timeout

    async def _send_prepared(
        self,
        msg: Message,
        prepared: tuple[str, bytes, int],
        queue: MessageQueue | None,
        budget_s: float,
        avoid_broker: str | None = None,
    ) -> SendResult:
        uniq, body, sys_flag = prepared
        if queue is not None:
            await self._queues(msg.topic)  # a new topic: learn the brokers from TBW102's route
            return await self._send_to(queue, msg, uniq, body, sys_flag, budget_s)
        return await self._send_with_retries(msg, uniq, body, sys_flag, budget_s, avoid_broker)

    async def _send_with_retries(
        self,
        msg: Message,
        uniq: str,
        body: bytes,
        sys_flag: int,
        budget_s: float,
        avoid_broker: str | None = None,
        *,
        batch: bool = False,
    ) -> SendResult:
        """``sendDefaultImpl``'s loop, for a message or a batch (``msg`` its carrier): each
        attempt's outcome goes to the latency fault table; a remoting failure, a retriable
        refusal or a broker whose address is gone is retried on another broker."""
        queues = await self._queues(msg.topic)  # bounded by request_timeout_s, not the budget
        began = trio.current_time()
        deadline = began + budget_s
        selector = self._selector(msg.topic)
        last_broker = avoid_broker
        errors: list[str] = []
        last: MQClientError | None = None
        for times in range(1 + self.retry_times):
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                break
            mq = self._fault.select_one(
                selector, queues, last_broker, monotonic_ms(), reset_index=times > 0
            )
            started = trio.current_time()
            try:
                result = await self._send_to(mq, msg, uniq, body, sys_flag, remaining, batch=batch)
            except BrokerNotFoundError as exc:  # a route refresh dropped it meanwhile
                self._record_fault(mq, started, isolation=False)
                last = exc
            except (RemotingFailedError, RequestTimeoutError) as exc:
                self._record_fault(mq, started, isolation=True)
                last = exc
            except MQBrokerError as exc:
                self._record_fault(mq, started, isolation=True, reachable=False)
                if exc.code not in api.RETRIABLE_SEND_CODES:
                    raise
                last = exc
            else:
                self._record_fault(mq, started, isolation=False)
                return result
            errors.append(f"{mq.broker_name}: {last}")
            last_broker = mq.broker_name
        raise _exhausted(
            f"Send [{len(errors)}] times, still failed, cost "
            f"[{int((trio.current_time() - began) * 1000)}]ms, "
            f"Topic: {msg.topic}, errors: {'; '.join(errors) or 'timed out'}",
            last,
            budget_s,
        )

    def _record_fault(
        self, mq: MessageQueue, started: float, *, isolation: bool, reachable: bool = True
    ) -> None:
        latency = int((trio.current_time() - started) * 1000)
        self._fault.update_fault_item(mq.broker_name, latency, isolation, monotonic_ms(), reachable)

    async def _send_to(
        self,
        mq: MessageQueue,
        msg: Message,
        uniq: str,
        body: bytes,
        sys_flag: int,
        budget_s: float,
        *,
        batch: bool = False,
    ) -> SendResult:
        addr = await self._instance.find_broker_addr(mq)
        cmd = self._request(mq, msg, body, sys_flag, batch=batch)
        resp = await self._instance.invoke(addr, cmd, budget_s)
        return api.parse_send(resp, mq, uniq, addr)

    async def send_batch(
        self, messages: Sequence[Message], *, send_timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic in one request, to one queue, with retries, within
        ``send_timeout`` seconds (default: the producer's; the route lookup before it is
        bounded by ``request_timeout_s``, see :meth:`send`).

        ``msg_id`` of the result is the messages' ``UNIQ_KEY``s joined by commas, in order.
        """
        budget_s = self._budget(send_timeout)
        if isinstance(messages, Message):
            raise TypeError("send_batch takes a sequence of Messages: send one with send()")
        if not messages:
            raise MQClientError(CLIENT_ERROR, "send_batch needs at least one message")
        uniqs = self._prepare_batch(messages)
        body = encode_batch(messages)
        if len(body) > self.max_message_size:
            raise MQClientError(
                CLIENT_ERROR,
                f"the batch is {len(body)} bytes, over the limit {self.max_message_size}",
            )
        carrier = Message(messages[0].topic, body)
        try:
            return await self._send_with_retries(
                carrier, ",".join(uniqs), body, 0, budget_s, batch=True
            )
        except MQClientError as exc:
            self._raise_if_closed(exc)
            raise

    def _prepare_batch(self, messages: Sequence[Message]) -> list[str]:
        """Validate a batch (its one topic once) and stamp UNIQ_KEYs: each message's key."""
        if not self._running:
            raise ClientClosedError(f"producer {self.group}")
        if set(map(type, messages)) != {Message}:  # one C-level pass; subclasses walk on
            _check_all_messages(messages)
        topic = messages[0].topic
        validate_topic(topic)
        if set(map(_topic_of, messages)) != {topic}:
            raise MQClientError(CLIENT_ERROR, "all messages of a batch must share a topic")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise MQClientError(
                CLIENT_ERROR,
                f"a batch cannot go to the retry topic {topic}: send its messages one by one "
                "(RocketMQ: Retry Group is not supported for batching)",
            )
        delay = MessageConst.DELAY
        if any(m.delay_level > 0 for m in messages if delay in m.properties):
            raise MQClientError(CLIENT_ERROR, "a batch does not support delayed messages")
        validate_batch_contents(messages, self.max_message_size)
        uniq = MessageConst.UNIQ_KEY
        unkeyed = [m.properties for m in messages if uniq not in m.properties]
        for props, key in zip(unkeyed, _UNIQ_KEYS.next_many(len(unkeyed)), strict=True):
            props[uniq] = key
        return [m.properties[uniq] for m in messages]

    async def send_oneway(self, msg: Message) -> None:
        """Send once without waiting for an answer (no retry; errors reaching the broker are
        not reported)."""
        _, body, sys_flag = self._prepare(msg)
        with self._as_closed_when_closed():
            queues = await self._queues(msg.topic)
            mq = self._fault.select_one(self._selector(msg.topic), queues, None, monotonic_ms())
            addr = await self._instance.find_broker_addr(mq)
            await self._instance.invoke_oneway(addr, self._request(mq, msg, body, sys_flag))

    def _request(
        self, mq: MessageQueue, msg: Message, body: bytes, sys_flag: int, *, batch: bool = False
    ) -> RemotingCommand:
        """The send request of ``msg`` (its prepared ``body``) to ``mq``."""
        if not batch and msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self._retry_request(mq, msg, body, sys_flag)
        return api.send_request(
            group=self.group,
            topic=msg.topic,
            queue_id=mq.queue_id,
            body=body,
            properties=encode_properties_str(msg.properties),
            sys_flag=sys_flag,
            flag=msg.flag,
            born_timestamp=wall_clock_ms(),
            batch=batch,
            default_topic_queue_nums=self.default_topic_queue_nums,
        )

    def _retry_request(
        self, mq: MessageQueue, msg: Message, body: bytes, sys_flag: int
    ) -> RemotingCommand:
        """The send request of a message to a retry topic: its RECONSUME_TIME and
        MAX_RECONSUME_TIMES properties travel as the header's ``reconsumeTimes`` and
        ``maxReconsumeTimes`` (RocketMQ's ``sendKernelImpl``; ``msg`` keeps them for a retry)."""
        props = dict(msg.properties)
        reconsume = _int_property(props.pop(MessageConst.RECONSUME_TIME, None))
        max_reconsume = _int_property(props.pop(MessageConst.MAX_RECONSUME_TIMES, None))
        return api.send_request(
            group=self.group,
            topic=msg.topic,
            queue_id=mq.queue_id,
            body=body,
            properties=encode_properties_str(props),
            sys_flag=sys_flag,
            flag=msg.flag,
            born_timestamp=wall_clock_ms(),
            default_topic_queue_nums=self.default_topic_queue_nums,
            reconsume_times=reconsume or 0,
            max_reconsume_times=max_reconsume,
        )

    async def send_orderly(
        self,
        msg: Message,
        sharding_key: str | None = None,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
        send_timeout: float | None = None,
    ) -> SendResult:
        """Send to the queue ``sharding_key`` hashes to (or ``selector(queues, msg, arg)``),
        within ``send_timeout`` seconds (default: the producer's; the route lookup before it is
        bounded by ``request_timeout_s``, see :meth:`send`).

        The same key reaches the same queue while the topic's queues do not change; a failed
        send is not moved to another queue (that would break the order). ``selector`` gets a
        copy of the queue list (as RocketMQ's ``sendSelectImpl``): changing it changes nothing
        for other sends.
        """
        if (sharding_key is None) == (selector is None):
            raise MQClientError(CLIENT_ERROR, "pass exactly one of sharding_key and selector")
        if sharding_key is not None and not isinstance(sharding_key, str):
            raise TypeError(  # the compiled build's own check raises a TypeError first
                f"sharding_key must be a str (hashed as Java's String.hashCode), got "
                f"{type(sharding_key).__name__} {sharding_key!r}: pass str(key), or a selector"
            )
        budget_s = self._budget(send_timeout)
        prepared = self._prepare(msg)  # before the route and the selector, as sendSelectImpl
        with self._as_closed_when_closed():
            queues = await self._queues(msg.topic)
            if selector is not None:
                mq = selector(list(queues), msg, arg)
                if mq not in queues:
                    raise MQClientError(CLIENT_ERROR, f"the selector chose an unknown queue {mq}")
            else:
                assert sharding_key is not None
                mq = select_by_key(queues, sharding_key)
            return await self._send_prepared(msg, prepared, mq, budget_s)

    def send_async(self, msg: Message, callback: SendCallback) -> None:
        """Send in a background task of the client instance; ``callback(result, error)`` runs
        in the event loop when the send ends (keep it short).

        The message is validated (and given its UNIQ_KEY) here, raising as :meth:`send` would,
        and a ``callback`` that is not callable is a TypeError (nobody would learn the
        outcome); once accepted, the callback runs exactly once, with ClientClosedError if the
        producer closed before the send ended.
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        prepared = self._prepare(msg)
        self._instance.start_soon(self._send_and_call_back, msg, prepared, callback)
        if self._async_sends == 0:  # a close may be waiting on the current event: keep it
            self._async_idle = trio.Event()
        self._async_sends += 1

    async def _send_and_call_back(
        self, msg: Message, prepared: tuple[str, bytes, int], callback: SendCallback
    ) -> None:
        try:
            with self._as_closed_when_closed():
                result = await self._send_prepared(msg, prepared, None, self.send_timeout)
        except trio.Cancelled:
            _call(callback, None, ClientClosedError(f"producer {self.group}"))
            raise
        except Exception as exc:  # noqa: BLE001 (never into the instance's nursery)
            _call(callback, None, exc)
        else:
            _call(callback, result, None)
        finally:
            self._async_sends -= 1
            if self._async_sends == 0:
                self._async_idle.set()


def _check_all_messages(messages: Sequence[Message]) -> None:
    """TypeError naming the first item of a batch that is not a Message."""
    for i, msg in enumerate(messages):
        if not isinstance(msg, Message):
            raise TypeError(
                f"a batch holds Messages only, got {type(msg).__name__} {msg!r:.80} at [{i}]"
            )


def _int_property(value: str | None) -> int | None:
    """A property holding an int (None when absent or not one)."""
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _exhausted(what: str, last: MQClientError | None, timeout_s: float) -> MQClientError:
    """The error of a send whose every attempt failed, ``last`` chained as its cause: a
    RequestTimeoutError when the last attempt timed out or none had time to run (the outcome
    is unknown), else an MQClientError with the broker's response code when the last attempt
    was refused by one (as RocketMQ's ``sendDefaultImpl`` sets it), CLIENT_ERROR otherwise."""
    if last is None or isinstance(last, RequestTimeoutError):
        error: MQClientError = RequestTimeoutError(what, timeout_s, complete=True)
    else:
        code = last.code if isinstance(last, MQBrokerError) else CLIENT_ERROR
        error = MQClientError(code, what)
    error.__cause__ = last
    return error


def _call(callback: SendCallback, result: SendResult | None, error: BaseException | None) -> None:
    try:
        callback(result, error)
    except Exception:
        log.exception("send callback raised")
