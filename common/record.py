"""The CommitLog record: RocketMQ's v1 message layout, as pure functions of bytes.

The broker writes these records into the commitlog, pull responses carry them verbatim, and the
client decodes them with :func:`decode_records`. Layout (big-endian, IPv4 hosts)::

    TOTALSIZE i4 | MAGICCODE i4 | BODYCRC i4 | QUEUEID i4 | FLAG i4 | QUEUEOFFSET i8
    PHYSICALOFFSET i8 | SYSFLAG i4 | BORNTIMESTAMP i8 | BORNHOST 8 | STORETIMESTAMP i8
    STOREHOSTADDRESS 8 | RECONSUMETIMES i4 | PREPARED TRANSACTION OFFSET i8
    BODY (i4 len + bytes) | TOPIC (u1 len + bytes) | PROPERTIES (i2 len + bytes)

Hosts are 20 bytes instead of 8 when SYSFLAG has the BORNHOST_V6 / STOREHOSTADDRESS_V6 bit.
Properties are ``name\\x01value\\x02`` repeated. A file that cannot hold the next record ends with
an 8-byte blank marker: ``int remaining | int BLANK_MAGIC_CODE``.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Final, TypeAlias

from common.errors import caused_by
from common.message import MessageConst, MessageSysFlag

MAGIC_CODE_V1: Final = -626843481  # 0xDAA320A7 as a signed int
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194 as a signed int
END_FILE_MIN_BLANK_LENGTH: Final = 8
MAX_TOPIC_LENGTH: Final = 127
MAX_PROPERTIES_LENGTH: Final = 32767

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

# Field positions, as RocketMQ's MessageDecoder constants.
MAGIC_POSITION: Final = 4
QUEUE_OFFSET_POSITION: Final = 20
PHYSICAL_OFFSET_POSITION: Final = 28
SYSFLAG_POSITION: Final = 36
STORE_TIMESTAMP_POSITION: Final = 56

# TOTALSIZE .. PREPARED TRANSACTION OFFSET + body length, for each host-size combination.
HEADER_V4: Final = struct.Struct(">iiiiiqqiq8sq8siqi")
_HEADERS: Final = {
    (8, 8): HEADER_V4,
    (20, 8): struct.Struct(">iiiiiqqiq20sq8siqi"),
    (8, 20): struct.Struct(">iiiiiqqiq8sq20siqi"),
    (20, 20): struct.Struct(">iiiiiqqiq20sq20siqi"),
}
_INT: Final = struct.Struct(">i")
_SHORT: Final = struct.Struct(">h")
_BLANK: Final = struct.Struct(">ii")
_PREFIX: Final = struct.Struct(">iiiiiqqi")  # up to SYSFLAG, enough to size the hosts


def record_length(
    body_len: int, topic_len: int, props_len: int, *, born_v6: bool = False, store_v6: bool = False
) -> int:
    """Return TOTALSIZE for a record with these lengths (91 fixed bytes with IPv4 hosts)."""
    return 91 + body_len + topic_len + props_len + (12 if born_v6 else 0) + (12 if store_v6 else 0)


def body_crc(body: bytes) -> int:
    """RocketMQ's BODYCRC: ``CRC32(body) & 0x7FFFFFFF``."""
    return zlib.crc32(body) & 0x7FFFFFFF


@functools.lru_cache(maxsize=4096)
def pack_host(host: str, port: int) -> bytes:
    """Encode a socket address as RocketMQ does: 4 (or 16) address bytes and an int port.

    Cached: a process sees few distinct addresses and this runs once per message.
    """
    return ipaddress.ip_address(host).packed + _INT.pack(port)


@functools.lru_cache(maxsize=4096)
def unpack_host(raw: bytes) -> tuple[str, int]:
    """Decode :func:`pack_host`'s bytes back to ``(host, port)`` (cached, as pack_host)."""
    return str(ipaddress.ip_address(raw[:-4])), _INT.unpack_from(raw, len(raw) - 4)[0]


def encode_properties(props: dict[str, str]) -> bytes:
    """Encode properties as ``name\\x01value\\x02`` pairs (UTF-8)."""
    if not props:
        return b""
    return "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()


def plain_properties_fit(maps: Sequence[dict[Any, Any]], reserve_each: int = 0) -> bool:
    """True if every map in ``maps`` is plainly legal (str names and values, no empty name,
    no separator, all ASCII) and all of them encoded together, with ``reserve_each`` bytes
    more for each, fit MAX_PROPERTIES_LENGTH, so each one does. A few C-level passes over
    every name and value at once: the batch checks of producer and broker. False is no
    verdict: check such maps one by one."""
    try:
        names = "".join(chain.from_iterable(maps))
        values = "".join(chain.from_iterable(map(dict.values, maps)))
    except TypeError:
        return False
    if (
        NAME_VALUE_SEPARATOR in names
        or PROPERTY_SEPARATOR in names
        or NAME_VALUE_SEPARATOR in values
        or PROPERTY_SEPARATOR in values
        or not all(chain.from_iterable(maps))  # an empty name (every name is a str here)
        or not (names.isascii() and values.isascii())
    ):
        return False
    total = len(names) + len(values) + 2 * sum(map(len, maps)) + reserve_each * len(maps)
    return total <= MAX_PROPERTIES_LENGTH


PROPERTY_CRC32: Final = "__CRC32#"
"""RocketMQ's property holding a CRC of the whole record (``enabledAppendPropCRC``)."""
CRC32_PROPERTY_PREFIX: Final = b"__CRC32#\x01"
CRC32_RESERVED_LEN: Final = len(CRC32_PROPERTY_PREFIX) + 10 + 1  # 20, always the last property
CRC32_PLACEHOLDER: Final = CRC32_PROPERTY_PREFIX + b"0" * 10 + b"\x02"


def crc32_property(record_head: bytes | memoryview) -> bytes:
    """The :data:`PROPERTY_CRC32` property for a record whose bytes before it (everything
    but the last :data:`CRC32_RESERVED_LEN`) are ``record_head``: ``CRC32(head) & 0x7FFFFFFF``
    as ten decimal digits, least significant first, as RocketMQ's ``createCrc32`` writes it."""
    crc = zlib.crc32(record_head) & 0x7FFFFFFF
    return CRC32_PROPERTY_PREFIX + f"{crc:010d}"[::-1].encode() + b"\x02"


def record_crc_ok(record: bytes | memoryview, properties_at: int) -> bool:
    """False when ``record`` (whole; its properties start at ``properties_at``) ends in a
    :data:`PROPERTY_CRC32` property that does not match its other bytes; True when it matches
    or there is none. Only a whole last property counts (a name such as ``x__CRC32#`` ends the
    same way, but has no separator in front)."""
    at = len(record) - CRC32_RESERVED_LEN
    if at < properties_at or bytes(record[at : at + 9]) != CRC32_PROPERTY_PREFIX:
        return True
    if at > properties_at and record[at - 1] != 0x02:
        return True
    return crc32_property(record[:at]) == bytes(record[at:])


def decode_properties(raw: bytes | str) -> dict[str, str]:
    """Decode :func:`encode_properties`'s output, skipping malformed segments as RocketMQ does."""
    text = raw.decode() if isinstance(raw, _BINARY) else raw
    out: dict[str, str] = {}
    # the separators as literals (not the module constants): this runs per consumed message
    for item in text.split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name:
            out[name] = value
    return out


_BINARY: Final = (bytes, bytearray, memoryview)


def record_properties(record: bytes | memoryview) -> dict[str, str]:
    """The properties of one whole raw record, its body and topic skipped (what RocketMQ's
    ``MessageDecoder.decodeProperties`` reads for the SQL92 filter). Raises ValueError (a
    :class:`struct.error` or UnicodeDecodeError among them) or IndexError on a malformed one."""
    header = header_for(_INT.unpack_from(record, SYSFLAG_POSITION)[0])
    at = header.size + _INT.unpack_from(record, header.size - 4)[0]
    at += 1 + record[at]
    (props_len,) = _SHORT.unpack_from(record, at)
    return decode_properties(bytes(record[at + 2 : at + 2 + props_len])) if props_len > 0 else {}


@dataclass(slots=True)
class MessageRecord:
    """One decoded commitlog record (RocketMQ's ``MessageExt``)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    store_timestamp: int = 0
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    body_crc: int = 0
    store_size: int = 0

    @property
    def tags(self) -> str | None:
        """The TAGS property, or None."""
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces (empty elements dropped)."""
        raw = self.properties.get(MessageConst.KEYS, "")
        return [k for k in raw.split(MessageConst.KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        """The client-side unique id (UNIQ_KEY), or None."""
        return self.properties.get(MessageConst.UNIQ_KEY)


class RecordError(ValueError):
    """Bytes that are not a valid record: carries the position and the reason."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"invalid commitlog record at {position}: {reason}")
        self.position = position
        self.reason = reason


_INT32_RANGE = (-(2**31), 2**31 - 1)
_INT64_RANGE = (-(2**63), 2**63 - 1)
_FIELD_RANGES = (
    ("queue_id", _INT32_RANGE),
    ("flag", _INT32_RANGE),
    ("sys_flag", _INT32_RANGE),
    ("reconsume_times", _INT32_RANGE),
    ("born_timestamp", _INT64_RANGE),
    ("prepared_transaction_offset", _INT64_RANGE),
)


def record_field_problem(msg: MessageRecord) -> str | None:
    """Why ``msg`` cannot be written as a record (a number outside its field's Java int or
    long), or None."""
    for name, (lo, hi) in _FIELD_RANGES:
        value = getattr(msg, name)
        if not lo <= value <= hi:
            return f"{name} {value} is out of range [{lo}, {hi}]"
    return None


def encode_record(msg: MessageRecord) -> bytes:
    """Encode ``msg`` as a commitlog record, using its offsets and store timestamp as given."""
    topic = msg.topic.encode()
    props = encode_properties(msg.properties)
    if len(topic) > MAX_TOPIC_LENGTH:
        raise ValueError(f"topic longer than {MAX_TOPIC_LENGTH} bytes: {msg.topic[:40]!r}...")
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties take {len(props)} bytes, more than {MAX_PROPERTIES_LENGTH}")
    sys_flag = _host_flags(msg.sys_flag, msg.born_host, msg.store_host)
    header = _HEADERS[(len(msg.born_host), len(msg.store_host))]
    total = header.size + len(msg.body) + 1 + len(topic) + 2 + len(props)
    return b"".join(
        (
            header.pack(
                total,
                MAGIC_CODE_V1,
                body_crc(msg.body),
                msg.queue_id,
                msg.flag,
                msg.queue_offset,
                msg.physical_offset,
                sys_flag,
                msg.born_timestamp,
                msg.born_host,
                msg.store_timestamp,
                msg.store_host,
                msg.reconsume_times,
                msg.prepared_transaction_offset,
                len(msg.body),
            ),
            msg.body,
            bytes((len(topic),)),
            topic,
            _SHORT.pack(len(props)),
            props,
        )
    )


def _host_flags(sys_flag: int, born_host: bytes, store_host: bytes) -> int:
    for raw in (born_host, store_host):
        if len(raw) not in (8, 20):
            raise ValueError(f"a host is 8 (IPv4) or 20 (IPv6) bytes, not {len(raw)}")
    sys_flag &= ~(MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG)
    if len(born_host) == 20:
        sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
    if len(store_host) == 20:
        sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    return sys_flag


def header_for(sys_flag: int) -> struct.Struct:
    """The fixed-part struct for a record with this SYSFLAG (host sizes depend on it)."""
    born = 20 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else 8
    return _HEADERS[(born, store)]


def decode_record(
    buf: bytes | bytearray | memoryview | object,
    pos: int = 0,
    *,
    check_crc: bool = False,
    with_body: bool = True,
) -> MessageRecord:
    """Decode the record at ``pos`` of ``buf``; raise :class:`RecordError` if it is not valid."""
    view = memoryview(buf)  # type: ignore[arg-type]
    try:
        return _decode(view, pos, check_crc, with_body)
    except (struct.error, IndexError) as exc:
        raise caused_by(RecordError(pos, f"truncated ({exc})"), None)
    except UnicodeDecodeError as exc:
        raise caused_by(RecordError(pos, f"topic or properties are not UTF-8 ({exc.reason})"), None)
    finally:
        view.release()


def _decode(view: memoryview, pos: int, check_crc: bool, with_body: bool) -> MessageRecord:
    prefix = _PREFIX.unpack_from(view, pos)
    total, magic = prefix[0], prefix[1]
    if magic != MAGIC_CODE_V1:
        raise RecordError(pos, f"magic code {magic & 0xFFFFFFFF:#x}")
    if total < HEADER_V4.size or pos + total > len(view):
        raise RecordError(pos, f"total size {total} out of range")
    header = header_for(prefix[7])
    (
        _,
        _,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body_len,
    ) = header.unpack_from(view, pos)
    p = pos + header.size
    end = pos + total
    if body_len < 0 or p + body_len + 3 > end:
        raise RecordError(pos, f"body length {body_len} out of range")
    body = bytes(view[p : p + body_len]) if with_body or check_crc else b""
    p += body_len
    topic_len = view[p]
    topic = bytes(view[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    (props_len,) = _SHORT.unpack_from(view, p)
    p += 2
    if props_len < 0 or p + props_len != end:
        raise RecordError(pos, "length fields do not add up to the total size")
    if check_crc and body_crc(body) != crc:
        raise RecordError(pos, "body CRC mismatch")
    props = decode_properties(bytes(view[p : p + props_len])) if props_len else {}
    return MessageRecord(
        topic=topic,
        body=body if with_body else b"",
        queue_id=queue_id,
        flag=flag,
        properties=props,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        queue_offset=queue_offset,
        physical_offset=phys,
        body_crc=crc,
        store_size=total,
    )


_V6_BITS: Final = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_V4_SIZE: Final = HEADER_V4.size


@functools.lru_cache(maxsize=1024)
def _topic_name(raw: bytes) -> str:
    return raw.decode()


RecordFields: TypeAlias = tuple[
    str, bytes, int, int, dict[str, str], int, int, bytes, int, bytes, int, int, int, int, int, int
]
"""A record's fields in :class:`MessageRecord`'s order (``MessageRecord(*fields)``)."""

RawRecordFields: TypeAlias = tuple[
    str, bytes, int, int, bytes, int, int, bytes, int, bytes, int, int, int, int, int, int
]
""":data:`RecordFields` with the properties still encoded (``name\\x01value\\x02`` bytes)."""


def decode_fields(buf: bytes) -> list[RecordFields] | None:
    """Every record of a ``bytes`` body as a field tuple (see :data:`RecordFields`), or None
    when one is not a well-formed IPv4 record: then use :func:`decode_records`, which checks
    everything and raises the precise error. Consumers build their own message objects from
    the tuples without an intermediate :class:`MessageRecord`."""
    return _walk_v4(buf, True)  # type: ignore[return-value]


def decode_raw_fields(buf: bytes) -> list[RawRecordFields] | None:
    """:func:`decode_fields` without decoding the properties (field 4 is their raw bytes, to
    decode with :func:`decode_properties` when needed): for consumers that decode lazily."""
    return _walk_v4(buf, False)  # type: ignore[return-value]


def _walk_v4(buf: bytes, decode_props: bool) -> list[tuple[object, ...]] | None:
    """The common case of :func:`_decode` for every record of ``buf``, one unpack each: IPv4
    records whose fields add up. None as soon as one is anything else (IPv6 hosts, a bad magic
    or length), which the caller then decodes with :func:`_decode` to get the exact error.

    One loop without a call per record: this runs for every consumed message.
    """
    out: list[tuple[object, ...]] = []
    append = out.append
    unpack = HEADER_V4.unpack_from
    pos, n = 0, len(buf)
    while pos < n:
        if pos + _V4_SIZE > n:
            return None
        (
            total,
            magic,
            crc,
            queue_id,
            flag,
            queue_offset,
            phys,
            sys_flag,
            born_ts,
            born_host,
            store_ts,
            store_host,
            reconsume,
            prepared,
            body_len,
        ) = unpack(buf, pos)
        end = pos + total
        if magic != MAGIC_CODE_V1 or sys_flag & _V6_BITS or total < _V4_SIZE or end > n:
            return None
        p = pos + _V4_SIZE
        if body_len < 0 or p + body_len + 3 > end:
            return None
        body = buf[p : p + body_len]
        p += body_len
        topic_len = buf[p]
        topic = _topic_name(buf[p + 1 : p + 1 + topic_len])
        p += 1 + topic_len
        props_len = (buf[p] << 8) | buf[p + 1]
        p += 2
        if props_len > 0x7FFF or p + props_len != end:
            return None
        props: object = buf[p:end]
        if decode_props:
            props = decode_properties(props) if props_len else {}  # type: ignore[arg-type]
        append(
            (
                topic,
                body,
                queue_id,
                flag,
                props,
                sys_flag,
                born_ts,
                born_host,
                store_ts,
                store_host,
                reconsume,
                prepared,
                queue_offset,
                phys,
                crc,
                total,
            )
        )
        pos = end
    return out


def raw_fields_of(record: MessageRecord) -> RawRecordFields:
    """``record`` as a :data:`RawRecordFields` tuple (its properties encoded again)."""
    return (
        record.topic,
        record.body,
        record.queue_id,
        record.flag,
        encode_properties(record.properties),
        record.sys_flag,
        record.born_timestamp,
        record.born_host,
        record.store_timestamp,
        record.store_host,
        record.reconsume_times,
        record.prepared_transaction_offset,
        record.queue_offset,
        record.physical_offset,
        record.body_crc,
        record.store_size,
    )


def decode_records(
    buf: bytes | bytearray | memoryview,
    *,
    check_crc: bool = False,
) -> list[MessageRecord]:
    """Decode records laid end to end (a pull or query response body).

    Bodies given as ``bytes`` without CRC checking take a fast path for IPv4 records (one
    struct unpack, slices of the bytes object); anything unusual falls back to the checked
    decoder, which raises the precise :class:`RecordError`.
    """
    if isinstance(buf, bytes) and not check_crc:
        try:
            fast = _decode_all_v4(buf)
        except (struct.error, IndexError, UnicodeDecodeError):
            fast = None  # malformed: the checked decoder below says where and why
        if fast is not None:
            return fast
    out: list[MessageRecord] = []
    view = memoryview(buf)
    try:
        pos, n = 0, len(view)
        while pos < n:
            rec = _decode(view, pos, check_crc, True) if pos + 8 <= n else None
            if rec is None:
                raise RecordError(pos, "trailing bytes")
            out.append(rec)
            pos += rec.store_size
    except (struct.error, IndexError) as exc:
        raise caused_by(RecordError(pos, f"truncated ({exc})"), None)
    except UnicodeDecodeError as exc:
        raise caused_by(RecordError(pos, f"topic or properties are not UTF-8 ({exc.reason})"), None)
    finally:
        view.release()
    return out


def _decode_all_v4(buf: bytes) -> list[MessageRecord] | None:
    """Every record of ``buf`` through :func:`decode_fields`, or None if one needs the slow
    path."""
    fields = decode_fields(buf)
    return None if fields is None else [MessageRecord(*f) for f in fields]


def encode_blank(remaining: int) -> bytes:
    """The end-of-file marker written when a record does not fit in ``remaining`` bytes."""
    return _BLANK.pack(remaining, BLANK_MAGIC_CODE)
