"""Arrow columns of pulled records for the Spark source: the schema and the per-partition
column builder (records are decoded straight into columns, no per-message objects)."""

from __future__ import annotations

import struct
from itertools import accumulate
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from client.compression import decompress_if_needed
from client.errors import MQBrokerError
from common.inner_batch import InnerBatchError, any_inner_batch, unwrap_all
from common.message import MessageConst, MessageSysFlag
from common.message_id import offset_msg_id_of_packed
from common.record import (
    MAGIC_CODE_V1,
    RawRecordFields,
    RecordError,
    decode_properties,
    decode_raw_fields,
    decode_records,
    raw_fields_of,
)
from remoting.codes import ResponseCode

if TYPE_CHECKING:
    from client.spark.pulling import QueueRange

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

_TIMESTAMP: Final = ARROW_SCHEMA.field("born_timestamp").type
_MILLIS: Final = pa.timestamp("ms", tz="UTC")
PROPERTIES: Final = 4
QUEUE_OFFSET: Final = 12
"""Positions in a :data:`common.record.RecordFields` tuple."""


class Columns:
    """Arrow columns being filled for one partition.

    Rows keep their properties encoded (``name\x01value\x02`` bytes); :meth:`batch` turns a
    whole batch of them into the properties map and the ``msg_id``/``tags``/``keys`` columns
    with Arrow's string kernels (:func:`properties_columns`), not one dict per row.
    """

    def __init__(self, qr: QueueRange) -> None:
        self.qr = qr
        self.clear()

    def clear(self) -> None:
        self.offsets: list[int] = []
        self.bodies: list[bytes] = []
        self.props: list[bytes] = []
        self.born: list[int] = []  # ms, as stored
        self.stored: list[int] = []
        self.reconsume: list[int] = []
        self.store_hosts: list[bytes] = []  # for the offset msg id of rows without UNIQ_KEY
        self.phys: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, fields: RawRecordFields) -> None:
        """One record (a field tuple of :func:`common.record.decode_raw_fields`)."""
        self.add_range([fields], fields[QUEUE_OFFSET], fields[QUEUE_OFFSET] + 1)

    def add_range(self, records: list[RawRecordFields], lo: int, hi: int) -> None:
        """:meth:`add` every record with ``lo <= queue_offset < hi`` (no tag filter): the hot
        loop of a read, with the list methods bound once instead of looked up per record."""
        offsets, bodies, props_, born = self.offsets, self.bodies, self.props, self.born
        stored, reconsume, hosts, phys_ = self.stored, self.reconsume, self.store_hosts, self.phys
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
            bodies.append(decompress_if_needed(body, sys_flag) if sys_flag & compressed else body)
            props_.append(props)
            born.append(born_ts)
            stored.append(store_ts)
            reconsume.append(reconsume_times)
            hosts.append(store_host)
            phys_.append(phys)

    def add_body(self, buf: bytes, lo: int, hi: int) -> int | None:
        """:meth:`add_range` straight from a pull body, without field tuples: the fields Spark
        needs are unpacked and appended to the columns as each record is read.

        Returns the first record's queue offset (``lo`` for an empty body), or None, having
        added nothing, when a record is not in the common IPv4 layout, is an inner batch or
        does not add up
        (then decode with :func:`decode_body` and use :meth:`add_range`, which checks
        everything). The checks are those of :func:`common.record.decode_raw_fields`.
        """
        offsets, bodies, props_, born = self.offsets, self.bodies, self.props, self.born
        stored, reconsume, hosts, phys_ = self.stored, self.reconsume, self.store_hosts, self.phys
        start = len(offsets)
        unpack = _SPARK_HEADER.unpack_from
        compressed = MessageSysFlag.COMPRESSED_FLAG
        first = lo
        pos, n = 0, len(buf)
        while pos < n:
            if pos + _HEADER_SIZE > n:
                self._undo(start)
                return None
            (
                total, magic, queue_offset, phys, sys_flag, born_ts, store_ts, store_host,
                reconsume_times, body_len,
            ) = unpack(buf, pos)  # fmt: skip
            end = pos + total
            if magic != MAGIC_CODE_V1 or sys_flag & _V6_BITS or total < _HEADER_SIZE or end > n:
                self._undo(start)
                return None
            p = pos + _HEADER_SIZE
            if body_len < 0 or p + body_len + 3 > end:
                self._undo(start)
                return None
            body_end = p + body_len
            props_at = body_end + 1 + buf[body_end] + 2  # past the topic and the length
            props_len = (buf[props_at - 2] << 8) | buf[props_at - 1]
            if props_len > 0x7FFF or props_at + props_len != end:
                self._undo(start)
                return None
            if pos == 0:
                first = queue_offset
            pos = end
            if not lo <= queue_offset < hi:
                continue
            body = buf[p:body_end]
            bodies.append(decompress_if_needed(body, sys_flag) if sys_flag & compressed else body)
            offsets.append(queue_offset)
            props_.append(buf[props_at:end])
            born.append(born_ts)
            stored.append(store_ts)
            reconsume.append(reconsume_times)
            hosts.append(store_host)
            phys_.append(phys)
        return first

    def _undo(self, start: int) -> None:
        """Drop the rows from ``start`` on (a body that turned out not to be simple)."""
        for column in (
            self.offsets, self.bodies, self.props, self.born, self.stored, self.reconsume,
            self.store_hosts, self.phys,
        ):  # fmt: skip
            del column[start:]

    def batch(self) -> pa.RecordBatch:
        n = len(self.offsets)
        qr = self.qr
        props, uniq, tags, keys = properties_columns(self.props)
        arrays = [
            pa.repeat(pa.scalar(qr.topic, pa.string()), n),
            pa.repeat(pa.scalar(qr.broker, pa.string()), n),
            pa.repeat(pa.scalar(qr.queue_id, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            self._msg_ids(uniq),
            tags,
            keys,
            pa.array(self.bodies, pa.binary()),
            props,
            pa.array(self.born, _MILLIS).cast(_TIMESTAMP),
            pa.array(self.stored, _MILLIS).cast(_TIMESTAMP),
            pa.array(self.reconsume, pa.int32()),
        ]
        self.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)

    def _msg_ids(self, uniq: pa.Array) -> pa.Array:
        """The UNIQ_KEY, or for a message without one its offset message id."""
        if not uniq.null_count:
            return uniq
        ids = uniq.to_pylist()
        for i, value in enumerate(ids):
            if not value:
                ids[i] = offset_msg_id_of_packed(self.store_hosts[i], self.phys[i])
        return pa.array(ids, pa.string())


_MAP_TYPE: Final = ARROW_SCHEMA.field("properties").type
_SPARK_HEADER: Final = struct.Struct(">ii12xqqiq8xq8si8xi")
"""The v1 record header (:data:`common.record.HEADER_V4`) with only what the columns need:
total size, magic, queue offset, physical offset, sys flag, born and store times, store host,
reconsume times and body length; the rest is skipped."""
_HEADER_SIZE: Final = _SPARK_HEADER.size
_V6_BITS: Final = (
    MessageSysFlag.BORNHOST_V6_FLAG
    | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    | MessageSysFlag.INNER_BATCH_FLAG
)
"""SYSFLAG bits :meth:`Columns.add_body` leaves to :func:`decode_body`: IPv6 hosts, and the
inner batches of BatchCQ topics, which it unwraps (the same one test per record as before)."""


def properties_columns(raw: list[bytes]) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """The properties map and the UNIQ_KEY, TAGS and KEYS columns of encoded properties.

    Vectorised with Arrow's string kernels when every row is well formed (valid UTF-8, at
    least one ``name\x01value\x02`` entry, each with its separator); otherwise row by row
    with :func:`common.record.decode_properties`, exactly as a consumer decodes them. Names
    are unique per record (the broker stores a map), so the two agree.
    """
    fast = _properties_vectorised(raw) if raw else None
    return fast if fast is not None else _properties_by_row(raw)


def _properties_by_row(raw: list[bytes]) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    decoded = [decode_properties(r) if r else {} for r in raw]
    keys_flat = [k for d in decoded for k in d]
    values_flat = [v for d in decoded for v in d.values()]
    offsets = [0, *accumulate(map(len, decoded))]
    props = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys_flat, pa.string()),
        pa.array(values_flat, pa.string()),
    ).cast(_MAP_TYPE)

    def column(name: str) -> pa.Array:
        return pa.array([d.get(name) for d in decoded], pa.string())

    return (
        props,
        column(MessageConst.UNIQ_KEY),
        column(MessageConst.TAGS),
        column(MessageConst.KEYS),
    )


def _properties_vectorised(
    raw: list[bytes],
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array] | None:
    n = len(raw)
    try:
        text = pa.array(raw, pa.binary()).cast(pa.string())  # checks UTF-8
    except pa.ArrowInvalid:
        return None
    if (
        pc.min(pc.binary_length(text)).as_py() == 0
        or not pc.all(pc.ends_with(text, _ENTRY_END)).as_py()
    ):
        return None
    entries = pc.split_pattern(pc.utf8_slice_codeunits(text, 0, -1), _ENTRY_END)
    pairs = pc.split_pattern(pc.list_flatten(entries), _NAME_END, max_splits=1)
    if pc.min(pc.list_value_length(pairs)).as_py() != 2:
        return None  # an entry without its name separator
    names = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    offsets = entries.offsets
    props = pa.MapArray.from_arrays(offsets, names, values).cast(_MAP_TYPE)
    every_row = np.arange(n)
    row_of_entry = np.repeat(every_row, np.diff(offsets.to_numpy()))

    def column(name: str) -> pa.Array:
        hit = pc.equal(names, name)
        found = values.filter(hit)
        rows = row_of_entry[hit.to_numpy(zero_copy_only=False)]
        if len(found) == n and bool((rows == every_row).all()):  # one per row, in row order
            return found
        index = np.full(n, -1, dtype=np.int64)
        index[rows] = np.arange(len(found))
        return found.take(pa.array(index, mask=index < 0))

    return (
        props,
        column(MessageConst.UNIQ_KEY),
        column(MessageConst.TAGS),
        column(MessageConst.KEYS),
    )


_ENTRY_END: Final = "\x02"
_NAME_END: Final = "\x01"


def decode_body(body: bytes) -> list[RawRecordFields]:
    """A pull body's messages as field tuples, properties still encoded (no per-record
    objects); the inner batches of a BatchCQ topic unwrapped into their messages
    (:mod:`common.inner_batch`; the callers keep the offsets they asked for)."""
    fields = decode_raw_fields(body)
    if fields is None:
        try:  # not the common IPv4 layout: the checked decoder, which names what is wrong
            fields = [raw_fields_of(r) for r in decode_records(body)]
        except RecordError as exc:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad pull body: {exc}") from None
    if not any_inner_batch(fields):
        return fields
    try:
        return unwrap_all(fields, 0)
    except InnerBatchError as exc:
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad pull body: {exc}") from None


def record_tag(fields: RawRecordFields) -> str | None:
    """The TAGS property of a record's field tuple (decodes its properties)."""
    raw = fields[PROPERTIES]
    return decode_properties(raw).get(MessageConst.TAGS) if raw else None
