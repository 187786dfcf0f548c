"""Executor side of the Spark source: pull one queue's offset range ``[start, end)`` as Arrow.

Runs in Spark's Python worker processes. The connection is the process's shared client
instance (:class:`client.blocking.SharedInstance`, opened on first use and kept for the
worker's life, so a reused worker does not reconnect per task; a process forked from it opens
its own); it keeps the routes of the topics it pulled for as long
(:class:`client.spark.brokers.KeptRoutes`), so pulls go on through a name-server outage.
Pulls never wait on the broker
(``suspendTimeoutMillis`` 0). Without a tag filter the offsets of the next pulls are known, so
several pulls are kept in flight; a short answer discards the guesses after it. Records are
decoded straight into Arrow columns (:mod:`client.spark.columns`, no per-message objects).
Offsets whose data retention deleted are data loss (failOnDataLoss) whether or not a tag or
SQL92 filter is set: the broker answers them apart from the records it found
(``MESSAGE_WAS_REMOVING``). With an SQL92 selector (the ``sql`` option) the broker alone filters,
one pull at a time: each answer's ``nextBeginOffset`` is past the records it skipped, so a range
whose records all fail the filter is crossed without a row. A broker that refuses SQL92
(``enablePropertyFilter=false``) fails the read with :class:`PropertyFilterRefusedError`.

The whole pull, decode and column-building loop is one producer task in the client's loop
thread (pulls in flight are its child tasks); it hands finished record batches through a small
memory channel, so the reading thread makes one cross-thread call per batch, not per pull.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import os
import threading
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import trio

from client import api
from client.blocking import SharedInstance
from client.errors import MQBrokerError, MQClientError, RemotingFailedError
from client.instance import ClientInstance
from client.message import MessageQueue
from client.spark.brokers import kept_routes
from client.spark.columns import ARROW_SCHEMA, QUEUE_OFFSET, record_tag
from client.spark.columns import Columns as _Columns
from client.spark.columns import decode_body as _decode
from client.spark.options import NO_SECURITY, SecurityOptions
from common.sql_filter import EXPRESSION_SQL92
from common.subscription import SubscriptionData, SubscriptionExpression, build_subscription
from remoting.codes import ResponseCode

__all__ = [
    "ARROW_SCHEMA",
    "DataLossError",
    "PropertyFilterRefusedError",
    "PullGroupError",
    "QueueRange",
    "RangePuller",
    "check_pull_group",
    "open_shared_instance",
    "read_range",
    "shared_instance",
]

log = logging.getLogger(__name__)


DEFAULT_PULL_GROUP = "minimq-spark"
ROWS_PER_BATCH = 8192
IN_FLIGHT = 32
"""Pulls kept in flight per queue without a tag filter: 32 x 32 messages, about 300 KiB of
128-byte messages, enough to keep the broker busy while the worker decodes (8: 145-155k rows/s
in ``mqbench spark-read``; 16: 155-168k; 32: 165-185k)."""
PULL_TIMEOUT_S = 30.0
BATCHES_BUFFERED = 2
"""Batches the producer task may have built ahead of the reader."""
STOP_TIMEOUT_S = 10.0

_InstanceKey = tuple[str, SecurityOptions]
_instances: dict[_InstanceKey, SharedInstance] = {}
"""By name servers *and* account and TLS settings: jobs with other accounts never share one."""
_instances_lock = threading.Lock()


def _forget_instances_after_fork() -> None:
    """In a forked child (a ``multiprocessing`` fork pool's worker): the cached instances'
    loop threads stayed in the parent, so every pull through them would fail, and the lock
    may have been held by another thread of the parent at the fork. Start afresh: the child
    opens its own instance on first use."""
    global _instances_lock
    _instances.clear()
    _instances_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_instances_after_fork)


def open_shared_instance(namesrv: str, security: SecurityOptions = NO_SECURITY) -> SharedInstance:
    """A new, not yet started :class:`SharedInstance` for ``namesrv`` that signs with the
    account of ``security`` and speaks TLS as it says (the environment's TLS defaults are read
    here, in the process that connects). Without either it is the plain per-``namesrv`` one."""
    if security.is_default:
        return SharedInstance(namesrv)
    return SharedInstance(None, client_config=security.client_config(namesrv))


def shared_instance(namesrv: str, security: SecurityOptions = NO_SECURITY) -> SharedInstance:
    """This process's started :class:`SharedInstance` for ``namesrv`` and ``security``
    (opened once, kept)."""
    key = (namesrv, security)
    with _instances_lock:
        inst = _instances.get(key)
        if inst is None:
            inst = _instances[key] = open_shared_instance(namesrv, security).start()
        return inst


class DataLossError(RuntimeError):
    """Offsets a query must read are gone (retention deleted them) and failOnDataLoss is on."""


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets ``[start, end)`` of one queue: one Spark partition (picklable)."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int


@dataclass(slots=True)
class _Raw:
    offset: int
    code: int
    next_begin: int
    min_offset: int
    max_offset: int
    body: bytes
    remark: str = ""
    """The broker's store status (RocketMQ sets the remark to ``GetMessageStatus``'s name)."""


REMOVING: Final = "MESSAGE_WAS_REMOVING"
"""The remark of an answer whose records' data retention deleted (the queue's minimum had
not followed yet); its code is the same as a tag-filtered pull's that matched nothing."""


class PullGroupError(MQBrokerError):
    """A broker refused a pull because the consumer group the pulls name does not exist there
    (the broker runs with ``autoCreateSubscriptionGroup=false``); the message says how to fix it."""


def _group_missing(group: str, mq: MessageQueue, addr: str, remark: str) -> PullGroupError:
    option = (
        "the 'group' option"
        if group != DEFAULT_PULL_GROUP
        else f"the default {DEFAULT_PULL_GROUP!r}, no 'group' option given"
    )
    text = (
        f"minimq source: broker {mq.broker_name} ({addr}) refused to serve a pull of topic "
        f"{mq.topic} queue {mq.queue_id}: the consumer group {group!r} the pulls name "
        f"({option}) does not exist there, and the broker does not create groups "
        "automatically (autoCreateSubscriptionGroup=false). Create it "
        f"on the brokers of the topic (mqadmin updateSubGroup -n <namesrv> -c <cluster> -g "
        f"{group}; or -b {addr} for this broker only), or set the 'group' option to a group "
        f"that exists (broker said: {remark})"
    )
    return PullGroupError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, text, addr)


NO_FILTER_SUPPORT: Final = "The broker does not support consumer to filter message by"
"""How RocketMQ's ``PullMessageProcessor`` (and minimq's) starts the remark of its refusal of
an SQL92 pull when ``enablePropertyFilter`` is off."""


class PropertyFilterRefusedError(MQBrokerError):
    """A broker refused the SQL92 pulls of the ``sql`` option: it does not filter by
    properties (``enablePropertyFilter=false``, RocketMQ's default), or it could not parse the
    selector (``SUBSCRIPTION_PARSE_FAILED``); the message says which and what to do."""


def _sql_refusal(
    resp_code: int, remark: str, subscription: SubscriptionData, mq: MessageQueue, addr: str
) -> PropertyFilterRefusedError | None:
    """The error of a broker's refusal of an SQL92 pull, or None when ``resp_code`` and
    ``remark`` are not one."""
    if subscription.expression_type != EXPRESSION_SQL92:
        return None
    where = f"minimq source: broker {mq.broker_name} ({addr}) refused the pulls of topic {mq.topic}"
    if resp_code == ResponseCode.SYSTEM_ERROR and remark.startswith(NO_FILTER_SUPPORT):
        text = (
            f"{where} filtered by the 'sql' option: it does not filter by message properties "
            "(SQL92). Set enablePropertyFilter=true in the broker's configuration (broker.conf) "
            "and restart it, or filter with the 'tags' option instead "
            f"(broker said: {remark})"
        )
        return PropertyFilterRefusedError(resp_code, text, addr)
    if resp_code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
        text = (
            f"{where}: it could not parse the 'sql' option {subscription.sub_string!r} "
            f"(broker said: {remark})"
        )
        return PropertyFilterRefusedError(resp_code, text, addr)
    return None


async def _moved(instance: ClientInstance, mq: MessageQueue, addr: str) -> str | None:
    """The broker's address after a failed connection to ``addr``: refreshed from the name
    servers (unless another pull already did), or None when it did not change."""
    now = instance.broker_addr(mq.broker_name)
    if now == addr:
        try:
            await instance.topic_route(mq.topic, refresh=True)
        except MQClientError as exc:
            log.warning("refreshing the route of %s after %s failed: %s", mq.topic, addr, exc)
            return None
        now = instance.broker_addr(mq.broker_name)
    return now if now is not None and now != addr else None


async def _pull(
    instance: ClientInstance,
    mq: MessageQueue,
    offset: int,
    max_msgs: int,
    subscription: SubscriptionData,
    group: str,
) -> _Raw:
    """One pull. A broker that cannot be reached at the cached address (it restarted on
    another one: this worker's route is older than the driver's) is looked up again and the
    pull retried once at its new address."""
    addr = await instance.find_broker_addr(mq)
    cmd = api.pull_request(
        group=group,
        mq=mq,
        offset=offset,
        max_msgs=max_msgs,
        subscription=subscription,
        suspend_timeout_ms=0,
    )
    try:
        resp = await instance.invoke(addr, cmd)
    except RemotingFailedError:
        new = await _moved(instance, mq, addr)
        if new is None:
            raise
        log.info("broker %s moved from %s to %s; pulling from there", mq.broker_name, addr, new)
        addr = new
        resp = await instance.invoke(addr, cmd)
    if resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
        raise _group_missing(group, mq, addr, resp.remark or "")
    if resp.code not in api.PULL_STATUS_BY_CODE:
        refused = _sql_refusal(resp.code, resp.remark or "", subscription, mq, addr)
        if refused is not None:
            raise refused
        raise MQBrokerError(resp.code, resp.remark or f"pull failed with code {resp.code}", addr)
    fields = resp.ext_fields
    return _Raw(
        offset,
        resp.code,
        int(str(fields.get("nextBeginOffset", offset))),
        int(str(fields.get("minOffset", 0))),
        int(str(fields.get("maxOffset", 0))),
        resp.body,
        resp.remark or "",
    )


async def check_pull_group(
    instance: ClientInstance,
    queues: Mapping[tuple[str, str, int], tuple[int, int]],
    group: str | None,
    expression: SubscriptionExpression,
) -> None:
    """Driver side, as a query starts: raise what the executors' pulls would meet when a
    broker of ``queues`` (``{(topic, broker, queue id): (min, max offset)}``) refuses pulls
    that name ``group`` (default :data:`DEFAULT_PULL_GROUP`) and subscribe with ``expression``:
    :class:`PullGroupError` when it lacks the group and does not create groups,
    :class:`PropertyFilterRefusedError` when it refuses an SQL92 selector, or its
    MQBrokerError. One pull per broker,
    at a queue's max offset (nothing to transfer; the broker does not hold it). A broker that
    cannot be reached is left to the executors."""
    name = group or DEFAULT_PULL_GROUP
    by_broker: dict[str, tuple[str, str, int]] = {}
    for key in sorted(queues):
        by_broker.setdefault(key[1], key)
    for key in by_broker.values():
        mq = MessageQueue(*key)
        try:
            sub = build_subscription(mq.topic, expression)
            await _pull(instance, mq, queues[key][1], 1, sub, name)
        except MQBrokerError:
            raise
        except MQClientError as exc:
            log.info("minimq source: group %s not checked on %s: %s", name, mq.broker_name, exc)


class _Slot:
    """One pull in flight (loop thread): its offset and outcome. A pull that is no longer
    wanted (a guess after a short answer) is not cancelled: its answer, due at once, is
    dropped; the producer's nursery cancels whatever still runs when it ends."""

    __slots__ = ("done", "error", "offset", "raw")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.done = trio.Event()
        self.raw: _Raw | None = None
        self.error: Exception | None = None

    async def result(self) -> _Raw:
        """The answer (waited for at most ``PULL_TIMEOUT_S``), or the pull's error."""
        if not self.done.is_set():
            with trio.move_on_after(PULL_TIMEOUT_S):
                await self.done.wait()
            if not self.done.is_set():
                raise TimeoutError(f"a pull at offset {self.offset} took over {PULL_TIMEOUT_S} s")
        if self.error is not None:
            raise self.error
        assert self.raw is not None
        return self.raw


class _Handoff:
    """What the caller's thread shares with one producer task in the loop thread: the batch
    channel, the producer's cancel scope and its end (trio objects, used in the loop only)."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[pa.RecordBatch](BATCHES_BUFFERED)
        self.scope = trio.CancelScope()
        self.finished = trio.Event()


async def _next_batch(_instance: ClientInstance, handoff: _Handoff) -> pa.RecordBatch | None:
    """The producer's next batch; None once it has ended (then its outcome is in its future)."""
    try:
        return await handoff.receive.receive()
    except trio.EndOfChannel:
        return None


async def _stop(_instance: ClientInstance, handoff: _Handoff) -> None:
    """Cancel the producer and wait until it (and every pull it started) has ended."""
    handoff.scope.cancel()
    handoff.receive.close()
    await handoff.finished.wait()


class RangePuller:
    """Pulls one :class:`QueueRange`; iterate :meth:`batches`."""

    def __init__(
        self,
        instance: SharedInstance,
        qr: QueueRange,
        *,
        expression: SubscriptionExpression = "*",
        pull_batch_size: int = 32,
        fail_on_data_loss: bool = True,
        group: str | None = None,
    ) -> None:
        self.instance = instance
        self.qr = qr
        self.mq = MessageQueue(qr.topic, qr.broker, qr.queue_id)
        self.subscription = build_subscription(qr.topic, expression)
        self.every = self.subscription.matches_all
        """No filter: every offset of an answer is a record (a gap is data loss)."""
        self.step = pull_batch_size
        self.fail_on_data_loss = fail_on_data_loss
        self.group = group or DEFAULT_PULL_GROUP
        self.cur = qr.start
        self.window = IN_FLIGHT if self.every else 1
        self._inflight: collections.deque[_Slot] = collections.deque()

    def batches(self) -> Generator[pa.RecordBatch, None, None]:
        """Arrow record batches of the range's (tag-matching) messages, in offset order.

        One producer task in the loop thread pulls and builds the batches; this generator takes
        them one cross-thread call per batch. Its errors are raised here unchanged; closing the
        generator early cancels it and waits until nothing of it runs any more.
        """
        handoff = _Handoff()
        producer = self.instance.submit(_produce, self, handoff)
        try:
            while (batch := self.instance.call(_next_batch, handoff, timeout=math.inf)) is not None:
                yield batch
            producer.result(STOP_TIMEOUT_S)  # its error, if it failed
        finally:
            if not producer.done():
                self._stop(handoff, producer)

    def _stop(self, handoff: _Handoff, producer: concurrent.futures.Future[None]) -> None:
        try:
            self.instance.call(_stop, handoff, timeout=STOP_TIMEOUT_S)
        except RuntimeError:  # the loop is closed, or this is the loop thread (gc): no wait
            producer.cancel()

    async def produce(
        self, instance: ClientInstance, send: trio.MemorySendChannel[pa.RecordBatch]
    ) -> None:
        """Pull the range and send its batches (loop thread); pulls are kept in flight as
        tasks, every one of them ended when this returns."""
        kept_routes(instance).for_life.add(self.mq.topic)  # pulls outlive the route loop
        error: Exception | None = None
        async with trio.open_nursery() as nursery:
            try:
                await self._fill(instance, nursery, send)
            except Exception as exc:  # noqa: BLE001 - re-raised below, outside the nursery
                error = exc
            nursery.cancel_scope.cancel()
        if error is not None:
            raise error

    async def _fill(
        self,
        instance: ClientInstance,
        nursery: trio.Nursery,
        send: trio.MemorySendChannel[pa.RecordBatch],
    ) -> None:
        cols = _Columns(self.qr)
        inflight = self._inflight
        while self.cur < self.qr.end:
            self._refill(instance, nursery)
            slot = inflight.popleft()
            if slot.offset != self.cur:  # a guess after a short answer
                self._discard()
                continue
            if not self._handle(await slot.result(), cols):
                break
            if len(cols) >= ROWS_PER_BATCH:
                await send.send(cols.batch())
        if len(cols):
            await send.send(cols.batch())

    def _refill(self, instance: ClientInstance, nursery: trio.Nursery) -> None:
        inflight = self._inflight
        nxt = inflight[-1].offset + self.step if inflight else self.cur
        end = self.qr.end
        while len(inflight) < self.window and nxt < end:
            slot = _Slot(nxt)
            nursery.start_soon(self._pull_into, instance, slot, min(self.step, end - nxt))
            inflight.append(slot)
            nxt += self.step

    async def _pull_into(self, instance: ClientInstance, slot: _Slot, n: int) -> None:
        try:
            slot.raw = await _pull(instance, self.mq, slot.offset, n, self.subscription, self.group)
        except Exception as exc:  # noqa: BLE001 - raised when the slot's turn comes
            slot.error = exc
        slot.done.set()

    def _discard(self) -> None:
        self._inflight.clear()

    def _handle(self, raw: _Raw, cols: _Columns) -> bool:
        """Take one answer; False when the range cannot go on (data lost at its end)."""
        status = api.PULL_STATUS_BY_CODE[ResponseCode(raw.code)]
        end = self.qr.end
        if status is api.PullStatus.FOUND:
            if self.every:  # inline: the hot path of an unfiltered read
                first = cols.add_body(raw.body, self.cur, end)
                if first is None:  # not the common layout: the checked decoder
                    records = _decode(raw.body)
                    first = records[0][QUEUE_OFFSET] if records else self.cur
                    cols.add_range(records, self.cur, end)
                if first > self.cur:
                    self._lost(first, raw, "missing from the answer")
                got = raw.next_begin - raw.offset
                if 0 < got < self.step and raw.next_begin < end:
                    self.step = got  # the broker caps a pull below our batch size
            else:
                self._take_filtered(raw, cols)
            if raw.next_begin <= self.cur:
                raise MQBrokerError(
                    ResponseCode.SYSTEM_ERROR, f"a pull of {self.mq} at {self.cur} made no progress"
                )
            self.cur = raw.next_begin
            return True
        if (
            status is api.PullStatus.NO_MATCHED_MSG
            and raw.next_begin > self.cur
            and raw.remark != REMOVING
        ):
            self.cur = raw.next_begin
            return True
        if raw.next_begin > self.cur:  # offset moved / entries pointing at deleted data
            self._lost(min(raw.next_begin, end), raw, "deleted by retention")
            self.cur = raw.next_begin
            self._discard()
            return True
        self._lost(end, raw, "beyond the queue's max offset")
        return False

    def _take_filtered(self, raw: _Raw, cols: _Columns) -> None:
        """Add the records of a filtered answer (gaps are records the filter skipped; the
        broker never mixes found records with deleted ones): a TAG filter re-checks each exact
        tag (two tags may share a hash code), an SQL92 selector is the broker's alone."""
        sub = self.subscription
        end = self.qr.end
        if not sub.tags_set:  # SQL92
            if cols.add_body(raw.body, self.cur, end) is None:
                cols.add_range(_decode(raw.body), self.cur, end)
            return
        for rec in _decode(raw.body):
            if self.cur <= rec[QUEUE_OFFSET] < end and sub.matches_tag(record_tag(rec)):
                cols.add(rec)

    def _lost(self, upto: int, raw: _Raw, reason: str) -> None:
        qr = self.qr
        text = (
            f"minimq: offsets [{self.cur}, {upto}) of topic {qr.topic} broker {qr.broker} "
            f"queue {qr.queue_id} are not available ({reason}; the queue now holds "
            f"{raw.min_offset}..{raw.max_offset}); the query needed [{qr.start}, {qr.end})"
        )
        if self.fail_on_data_loss:
            raise DataLossError(text + ". Set failOnDataLoss=false to skip lost data.")
        log.warning("%s; skipping them (failOnDataLoss=false)", text)


async def _produce(instance: ClientInstance, puller: RangePuller, handoff: _Handoff) -> None:
    """The producer task: ``puller``'s batches into the channel until done or cancelled."""
    try:
        with handoff.send, handoff.scope:
            await puller.produce(instance, handoff.send)
    finally:
        handoff.finished.set()


def read_range(
    namesrv: str,
    qr: QueueRange,
    *,
    expression: SubscriptionExpression = "*",
    pull_batch_size: int = 32,
    fail_on_data_loss: bool = True,
    group: str | None = None,
    security: SecurityOptions = NO_SECURITY,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``qr`` pulled through this process's shared client instance (the one
    of ``namesrv`` and ``security``), of the messages ``expression`` (a TAG expression, or an
    SQL92 :class:`~common.subscription.MessageSelector`) selects."""
    if qr.end <= qr.start:
        return iter(())
    puller = RangePuller(
        shared_instance(namesrv, security),
        qr,
        expression=expression,
        pull_batch_size=pull_batch_size,
        fail_on_data_loss=fail_on_data_loss,
        group=group,
    )
    return puller.batches()
