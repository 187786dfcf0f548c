"""Inner-batch records of BatchCQ topics, unwrapped into their messages (RocketMQ's
``MessageDecoder.decodeMessage(MessageExt, List)``), as pure functions of bytes and tuples.

A SEND_BATCH_MESSAGE to a topic whose ``queue.type`` is BatchCQ is stored as one commitlog
record (an *inner batch*): SYSFLAG has ``INNER_BATCH_FLAG | NEED_UNWRAP_FLAG``, QUEUEOFFSET is
the queue offset of its first message, property ``INNER_NUM`` counts its messages, property
``UNIQ_KEY`` is the batch's id, and its body is the batch body as the producer sent it
(minimq's msgpack array of ``[body, properties, flag]`` entries, :mod:`common.batch_body`; the
older ``{"body", "properties", "flag"}`` maps are read too).

Inner message ``i`` (RocketMQ's rules, with minimq's per-entry defaults):

- queue offset ``base + i``; body = the entry's body;
- properties = the entry's when it has them, else the record's without ``INNER_NUM`` and the
  batch ``UNIQ_KEY``; flag = the entry's when it has one, else the record's;
- sysFlag = the record's without the two inner-batch bits (consumers see ordinary messages);
- topic, queue id, commitlog offset, store size, body CRC, hosts, timestamps, reconsume times
  and prepared offset = the record's.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any, Final

import msgpack

from common.batch_body import BatchEntry, entry_fields, plain_rows
from common.errors import caused_by
from common.message import MessageConst, MessageSysFlag
from common.record import (
    MessageRecord,
    RawRecordFields,
    decode_properties,
    encode_properties,
)

INNER_BATCH_BITS: Final = MessageSysFlag.INNER_BATCH_FLAG | MessageSysFlag.NEED_UNWRAP_FLAG
"""Both bits mark a record to unwrap (RocketMQ checks both)."""
SYS_FLAG: Final = 5
QUEUE_OFFSET: Final = 12
"""Positions in a :data:`common.record.RawRecordFields` tuple."""
_properties_of = operator.itemgetter(1)

InnerEntry = BatchEntry
"""One inner message as stored, ``(body, properties, flag)``: its own properties (None: the
record's) and flag (None: the record's); a row as msgpack decoded it (see
:data:`common.batch_body.BatchEntry`)."""


class InnerBatchError(ValueError):
    """A record marked as an inner batch whose body is not a valid batch body."""


def is_inner_batch(sys_flag: int) -> bool:
    """True when a record with this SYSFLAG is an inner batch to unwrap."""
    return sys_flag & INNER_BATCH_BITS == INNER_BATCH_BITS


def any_inner_batch(records: Sequence[RawRecordFields]) -> bool:
    """True when one of ``records`` has an inner-batch bit: one C-level pass over their
    SYSFLAGs (what a pull decode checks once per response)."""
    if not records:
        return False
    flags = functools.reduce(operator.or_, map(operator.itemgetter(SYS_FLAG), records))
    return bool(flags & MessageSysFlag.INNER_BATCH_FLAG)


def decode_inner_entries(body: bytes) -> list[InnerEntry]:
    """The entries of an inner-batch body; InnerBatchError naming the first bad one."""
    try:
        wire = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise caused_by(InnerBatchError(f"inner batch body is not valid msgpack: {exc}"), None)
    if not isinstance(wire, list) or not wire:
        raise InnerBatchError("inner batch body must be a non-empty list")
    rows = plain_rows(wire)
    if rows is not None and _all_str_maps(list(filter(None, map(_properties_of, rows)))):
        return rows
    return [_entry(i, e) for i, e in enumerate(wire)]


def _all_str_maps(maps: list[dict[Any, Any]]) -> bool:
    """True if every name and value of ``maps`` is a str (two C-level joins)."""
    try:
        "".join(chain.from_iterable(maps))
        "".join(chain.from_iterable(map(dict.values, maps)))
    except TypeError:
        return False
    return True


def _entry(i: int, entry: Any) -> InnerEntry:
    fields = entry_fields(entry)
    if fields is None or not isinstance(fields[0], bytes):
        raise InnerBatchError(
            f"inner batch entry {i} must be [body, properties, flag] with a bytes body"
        )
    body, props, flag = fields
    if props is not None and not (
        isinstance(props, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())
    ):
        raise InnerBatchError(f"inner batch entry {i}: 'properties' must map str to str")
    if flag is not None and (type(flag) is not int):
        raise InnerBatchError(f"inner batch entry {i}: 'flag' must be an int")
    return body, props, flag


def outer_defaults(properties: dict[str, str]) -> dict[str, str]:
    """The properties an entry without its own takes: the record's without ``INNER_NUM`` and
    the batch ``UNIQ_KEY``."""
    out = dict(properties)
    out.pop(MessageConst.PROPERTY_INNER_NUM, None)
    out.pop(MessageConst.UNIQ_KEY, None)
    return out


def unwrap_fields(fields: RawRecordFields) -> list[RawRecordFields]:
    """The inner messages of one inner-batch record given as a field tuple (properties still
    encoded), in order; InnerBatchError when its body is not a batch body."""
    (
        topic, body, queue_id, flag, raw_props, sys_flag, born_ts, born_host, store_ts,
        store_host, reconsume, prepared, base, phys, crc, size,
    ) = fields  # fmt: skip
    entries = decode_inner_entries(body)
    inner_flag = sys_flag & ~INNER_BATCH_BITS
    defaults: bytes | None = None
    out: list[RawRecordFields] = []
    for i, (e_body, e_props, e_flag) in enumerate(entries):
        if e_props is not None:
            props = encode_properties(e_props)
        else:
            if defaults is None:
                defaults = encode_properties(outer_defaults(decode_properties(raw_props)))
            props = defaults
        inner = (
            topic, e_body, queue_id, flag if e_flag is None else e_flag, props, inner_flag,
            born_ts, born_host, store_ts, store_host, reconsume, prepared, base + i, phys,
            crc, size,
        )  # fmt: skip
        out.append(inner)
    return out


def unwrap_all(records: Iterable[RawRecordFields], from_offset: int) -> list[RawRecordFields]:
    """``records`` with every inner batch replaced by its inner messages at queue offsets of
    at least ``from_offset`` (a pull's first record may start below the offset asked for);
    other records are kept as they are. InnerBatchError for a bad inner batch."""
    out: list[RawRecordFields] = []
    for fields in records:
        if not is_inner_batch(fields[SYS_FLAG]):
            out.append(fields)
            continue
        inner = unwrap_fields(fields)
        if fields[QUEUE_OFFSET] < from_offset:
            inner = [m for m in inner if m[QUEUE_OFFSET] >= from_offset]
        out.extend(inner)
    return out


def inner_messages(record: MessageRecord) -> list[MessageRecord]:
    """The inner messages of a decoded inner-batch record, as :class:`MessageRecord` s (the
    broker's send-back and the admin tools); InnerBatchError for a bad body."""
    entries = decode_inner_entries(record.body)
    inner_flag = record.sys_flag & ~INNER_BATCH_BITS
    defaults = outer_defaults(record.properties)
    return [
        MessageRecord(
            topic=record.topic,
            body=e_body,
            queue_id=record.queue_id,
            flag=record.flag if e_flag is None else e_flag,
            properties=dict(defaults if e_props is None else e_props),
            sys_flag=inner_flag,
            born_timestamp=record.born_timestamp,
            born_host=record.born_host,
            store_timestamp=record.store_timestamp,
            store_host=record.store_host,
            reconsume_times=record.reconsume_times,
            prepared_transaction_offset=record.prepared_transaction_offset,
            queue_offset=record.queue_offset + i,
            physical_offset=record.physical_offset,
            body_crc=record.body_crc,
            store_size=record.store_size,
        )
        for i, (e_body, e_props, e_flag) in enumerate(entries)
    ]


def find_inner_message(record: MessageRecord, uniq_key: str) -> MessageRecord | None:
    """The inner message of ``record`` whose ``UNIQ_KEY`` is ``uniq_key``, or None."""
    for msg in inner_messages(record):
        if msg.properties.get(MessageConst.UNIQ_KEY) == uniq_key:
            return msg
    return None


__all__ = [
    "INNER_BATCH_BITS",
    "InnerBatchError",
    "InnerEntry",
    "any_inner_batch",
    "decode_inner_entries",
    "find_inner_message",
    "inner_messages",
    "is_inner_batch",
    "outer_defaults",
    "unwrap_all",
    "unwrap_fields",
]
