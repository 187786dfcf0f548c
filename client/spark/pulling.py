"""Executor side of the Spark source: pull one queue's offset range ``[start, end)`` as Arrow.

Runs in Spark's Python worker processes. The connection is the process's shared client
instance (:class:`client.blocking.SharedInstance`, opened on first use and kept for the
worker's life, so a reused worker does not reconnect per task). Pulls never wait on the broker
(``suspendTimeoutMillis`` 0). Without a tag filter the offsets of the next pulls are known, so
several pulls are kept in flight; a short answer discards the guesses after it. Records are
decoded straight into Arrow columns (no per-message objects).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from client import api
from client.blocking import SharedInstance
from client.compression import decompress_if_needed
from client.errors import MQBrokerError
from client.instance import ClientInstance
from client.message import MessageQueue
from common.message import MessageConst, MessageSysFlag
from common.message_id import offset_msg_id_of_packed
from common.record import RecordError, RecordFields, decode_fields, decode_records
from common.subscription import SubscriptionData, build_subscription
from remoting.codes import ResponseCode

log = logging.getLogger(__name__)

ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("broker", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("msg_id", pa.string()),
        ("tags", pa.string()),
        ("keys", pa.string()),
        ("body", pa.binary()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("born_timestamp", pa.timestamp("us", tz="UTC")),
        ("store_timestamp", pa.timestamp("us", tz="UTC")),
        ("reconsume_times", pa.int32()),
    ]
)
"""Exactly Spark's ``to_arrow_schema`` of the source schema (checked by a test)."""

DEFAULT_PULL_GROUP = "minimq-spark"
ROWS_PER_BATCH = 8192
IN_FLIGHT = 8
"""Pulls kept in flight per queue without a tag filter."""
PULL_TIMEOUT_S = 30.0
_PROPERTIES: Final = 4
_QUEUE_OFFSET: Final = 12
"""Positions in a :data:`common.record.RecordFields` tuple."""

_instances: dict[str, SharedInstance] = {}
_instances_lock = threading.Lock()


def shared_instance(namesrv: str) -> SharedInstance:
    """This process's started :class:`SharedInstance` for ``namesrv`` (opened once, kept)."""
    with _instances_lock:
        inst = _instances.get(namesrv)
        if inst is None:
            inst = _instances[namesrv] = SharedInstance(namesrv).start()
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


async def _pull(
    instance: ClientInstance,
    mq: MessageQueue,
    offset: int,
    max_msgs: int,
    subscription: SubscriptionData,
    group: str,
) -> _Raw:
    addr = await instance.find_broker_addr(mq)
    cmd = api.pull_request(
        group=group,
        mq=mq,
        offset=offset,
        max_msgs=max_msgs,
        subscription=subscription,
        suspend_timeout_ms=0,
    )
    resp = await instance.invoke(addr, cmd)
    if resp.code not in api.PULL_STATUS_BY_CODE:
        raise MQBrokerError(resp.code, resp.remark or f"pull failed with code {resp.code}", addr)
    fields = resp.ext_fields
    return _Raw(
        offset,
        resp.code,
        int(str(fields.get("nextBeginOffset", offset))),
        int(str(fields.get("minOffset", 0))),
        int(str(fields.get("maxOffset", 0))),
        resp.body,
    )


class _Columns:
    """Arrow columns being filled for one partition."""

    def __init__(self, qr: QueueRange) -> None:
        self.qr = qr
        self.clear()

    def clear(self) -> None:
        self.offsets: list[int] = []
        self.msg_ids: list[str] = []
        self.tags: list[str | None] = []
        self.keys: list[str | None] = []
        self.bodies: list[bytes] = []
        self.prop_offsets: list[int] = [0]
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.born: list[int] = []
        self.stored: list[int] = []
        self.reconsume: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, fields: RecordFields) -> None:
        """One record (a field tuple of :func:`common.record.decode_fields`)."""
        self.add_range([fields], fields[_QUEUE_OFFSET], fields[_QUEUE_OFFSET] + 1)

    def add_range(self, records: list[RecordFields], lo: int, hi: int) -> None:
        """:meth:`add` every record with ``lo <= queue_offset < hi`` (no tag filter): the hot
        loop of a read, with the list methods bound once instead of looked up per record."""
        offsets, msg_ids, tags, keys = self.offsets, self.msg_ids, self.tags, self.keys
        bodies, prop_keys, prop_values = self.bodies, self.prop_keys, self.prop_values
        prop_offsets, born, stored, reconsume = (
            self.prop_offsets,
            self.born,
            self.stored,
            self.reconsume,
        )
        uniq, tag_key, keys_key = MessageConst.UNIQ_KEY, MessageConst.TAGS, MessageConst.KEYS
        compressed = MessageSysFlag.COMPRESSED_FLAG
        for (
            _topic,
            body,
            _queue_id,
            _flag,
            props,
            sys_flag,
            born_ts,
            _born_host,
            store_ts,
            store_host,
            reconsume_times,
            _prepared,
            queue_offset,
            phys,
            _crc,
            _size,
        ) in records:
            if not lo <= queue_offset < hi:
                continue
            offsets.append(queue_offset)
            msg_ids.append(props.get(uniq) or offset_msg_id_of_packed(store_host, phys))
            tags.append(props.get(tag_key))
            keys.append(props.get(keys_key))
            bodies.append(decompress_if_needed(body, sys_flag) if sys_flag & compressed else body)
            prop_keys.extend(props)
            prop_values.extend(props.values())
            prop_offsets.append(len(prop_keys))
            born.append(born_ts * 1000)
            stored.append(store_ts * 1000)
            reconsume.append(reconsume_times)

    def batch(self) -> pa.RecordBatch:
        n = len(self.offsets)
        qr = self.qr
        props = pa.MapArray.from_arrays(
            pa.array(self.prop_offsets, pa.int32()),
            pa.array(self.prop_keys, pa.string()),
            pa.array(self.prop_values, pa.string()),
        )
        ts = ARROW_SCHEMA.field("born_timestamp").type
        arrays = [
            pa.array([qr.topic] * n, pa.string()),
            pa.array([qr.broker] * n, pa.string()),
            pa.array([qr.queue_id] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.msg_ids, pa.string()),
            pa.array(self.tags, pa.string()),
            pa.array(self.keys, pa.string()),
            pa.array(self.bodies, pa.binary()),
            props.cast(ARROW_SCHEMA.field("properties").type),
            pa.array(self.born, ts),
            pa.array(self.stored, ts),
            pa.array(self.reconsume, pa.int32()),
        ]
        self.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _decode(body: bytes) -> list[RecordFields]:
    """A pull body's records as field tuples (no per-record objects)."""
    fields = decode_fields(body)
    if fields is not None:
        return fields
    try:  # not the common IPv4 layout: the checked decoder, which names what is wrong
        records = decode_records(body)
    except RecordError as exc:
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad pull body: {exc}") from None
    return [
        (
            r.topic,
            r.body,
            r.queue_id,
            r.flag,
            r.properties,
            r.sys_flag,
            r.born_timestamp,
            r.born_host,
            r.store_timestamp,
            r.store_host,
            r.reconsume_times,
            r.prepared_transaction_offset,
            r.queue_offset,
            r.physical_offset,
            r.body_crc,
            r.store_size,
        )
        for r in records
    ]


class RangePuller:
    """Pulls one :class:`QueueRange`; iterate :meth:`batches`."""

    def __init__(
        self,
        instance: SharedInstance,
        qr: QueueRange,
        *,
        tags: str = "*",
        pull_batch_size: int = 32,
        fail_on_data_loss: bool = True,
        group: str | None = None,
    ) -> None:
        self.instance = instance
        self.qr = qr
        self.mq = MessageQueue(qr.topic, qr.broker, qr.queue_id)
        self.subscription = build_subscription(qr.topic, tags)
        self.step = pull_batch_size
        self.fail_on_data_loss = fail_on_data_loss
        self.group = group or DEFAULT_PULL_GROUP
        self.cur = qr.start
        self.window = IN_FLIGHT if self.subscription.matches_all else 1
        self._inflight: collections.deque[tuple[int, concurrent.futures.Future[_Raw]]] = (
            collections.deque()
        )

    def _submit(self, offset: int) -> None:
        n = min(self.step, self.qr.end - offset)
        fut = self.instance.submit(_pull, self.mq, offset, n, self.subscription, self.group)
        self._inflight.append((offset, fut))

    def _refill(self) -> None:
        nxt = self._inflight[-1][0] + self.step if self._inflight else self.cur
        while len(self._inflight) < self.window and nxt < self.qr.end:
            self._submit(nxt)
            nxt += self.step

    def _discard(self) -> None:
        while self._inflight:
            self._inflight.popleft()[1].cancel()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Arrow record batches of the range's (tag-matching) messages, in offset order."""
        cols = _Columns(self.qr)
        try:
            while self.cur < self.qr.end:
                self._refill()
                offset, fut = self._inflight.popleft()
                if offset != self.cur:  # a guess after a short answer
                    fut.cancel()
                    self._discard()
                    continue
                raw = fut.result(PULL_TIMEOUT_S)
                if not self._handle(raw, cols):
                    break
                if len(cols) >= ROWS_PER_BATCH:
                    yield cols.batch()
            if len(cols):
                yield cols.batch()
        finally:
            self._discard()

    def _handle(self, raw: _Raw, cols: _Columns) -> bool:
        """Take one answer; False when the range cannot go on (data lost at its end)."""
        status = api.PULL_STATUS_BY_CODE[ResponseCode(raw.code)]
        end = self.qr.end
        if status is api.PullStatus.FOUND:
            records = _decode(raw.body)
            first = records[0][_QUEUE_OFFSET] if records else self.cur
            if self.subscription.matches_all and first > self.cur:
                self._lost(first, raw, "missing from the answer")
            sub = self.subscription
            if sub.matches_all:
                cols.add_range(records, self.cur, end)
            else:
                for rec in records:
                    if self.cur <= rec[_QUEUE_OFFSET] < end and sub.matches_tag(
                        rec[_PROPERTIES].get(MessageConst.TAGS)
                    ):
                        cols.add(rec)
            got = raw.next_begin - raw.offset
            if sub.matches_all and 0 < got < self.step and raw.next_begin < end:
                self.step = got  # the broker caps a pull below our batch size
            if raw.next_begin <= self.cur:
                raise MQBrokerError(
                    ResponseCode.SYSTEM_ERROR, f"a pull of {self.mq} at {self.cur} made no progress"
                )
            self.cur = raw.next_begin
            return True
        if status is api.PullStatus.NO_MATCHED_MSG and raw.next_begin > self.cur:
            self.cur = raw.next_begin
            return True
        if raw.next_begin > self.cur:  # offset moved / entries pointing at deleted data
            self._lost(min(raw.next_begin, end), raw, "deleted by retention")
            self.cur = raw.next_begin
            self._discard()
            return True
        self._lost(end, raw, "beyond the queue's max offset")
        return False

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


def read_range(
    namesrv: str,
    qr: QueueRange,
    *,
    tags: str = "*",
    pull_batch_size: int = 32,
    fail_on_data_loss: bool = True,
    group: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``qr`` pulled through this process's shared client instance."""
    if qr.end <= qr.start:
        return iter(())
    puller = RangePuller(
        shared_instance(namesrv),
        qr,
        tags=tags,
        pull_batch_size=pull_batch_size,
        fail_on_data_loss=fail_on_data_loss,
        group=group,
    )
    return puller.batches()
