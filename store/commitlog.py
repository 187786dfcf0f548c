"""CommitLog: every message of every topic, appended in arrival order to mapped files.

Rules:
- ``append`` never blocks on I/O and never yields: position reservation and the copy into the
  mapping happen in one lock hold, so a batch is atomic and lands in a single file.
- A batch that does not fit in the current file leaves an 8-byte blank marker and goes whole into
  the next file, which is created (and allocated on disk) before anything is written.
- Queue offsets are assigned here, per (topic, queue), at append time.
- A record whose properties take more than :data:`PROPS_CRC_MIN` bytes (every record with
  ``enabled_append_prop_crc``) ends with RocketMQ's ``__CRC32#`` property: a CRC of all its
  other bytes, which recovery checks. BODYCRC covers only the body, and the other checks see
  only the properties' ends: without it, a sector that a power cut lost from inside long
  properties would go unnoticed. A ``__CRC32#`` property a sender set is dropped. (Properties
  within 20 bytes of the 32767-byte limit have no room for it and go without.)
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import NamedTuple

from common.message import MessageConst, MessageSysFlag
from common.record import (
    BLANK_MAGIC_CODE,
    CRC32_PLACEHOLDER,
    CRC32_RESERVED_LEN,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_V4,
    MAGIC_CODE_V1,
    MAX_PROPERTIES_LENGTH,
    PROPERTY_CRC32,
    MessageRecord,
    crc32_property,
    encode_blank,
    header_for,
    pack_host,
    record_crc_ok,
    record_field_problem,
)
from common.topic import NAME_CHARS, topic_problem
from store.batch_consume_queue import inner_batch_size
from store.config import StoreConfig
from store.dispatch_request import DispatchRequest
from store.errors import MappedFileCreateError
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.status import PutResult, PutStatus
from store.tags import TAGS_CODE_CACHE, tags_code

log = logging.getLogger(__name__)

CREATE_FAILURE_LOG_INTERVAL_S = 10.0
"""A commitlog file that cannot be created is logged at most this often (every put retries)."""

_SIZE_MAGIC = struct.Struct(">ii")
_SHORT = struct.Struct(">h")
_SYSFLAG = struct.Struct(">i")


_HOST_V6_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_TX_MASK = MessageSysFlag.TRANSACTION_MASK
_TX_COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE
_INNER_BATCH = MessageSysFlag.INNER_BATCH_FLAG
_TAGS = MessageConst.TAGS
PROPS_CRC_MIN = 512
"""Properties longer than this (one disk sector) get the ``__CRC32#`` property; see above."""
_CRC_FITS = MAX_PROPERTIES_LENGTH - CRC32_RESERVED_LEN  # longer ones have no room for it


_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__ (hot path)


class _Encoded(NamedTuple):
    """A batch validated and encoded except for what is assigned inside the lock."""

    tails: list[bytes]
    """Each record from BODY on (body, topic, properties)."""
    sizes: list[int]
    tags_codes: list[int]
    total: int
    with_crc: list[int]
    """Indexes of the records that end with a ``__CRC32#`` placeholder to fill in."""


class CommitLog:
    """The append-only message log; see the module docstring for the rules."""

    def __init__(self, config: StoreConfig, clock_ms: Callable[[], int]) -> None:
        self.config = config
        self.queue = MappedFileQueue(config.commitlog_dir, config.mapped_file_size_commit_log)
        self.clock_ms = clock_ms
        self.store_host = pack_host(*config.store_host)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.pending_dispatch: list[DispatchRequest] = []
        self.last_store_timestamp = 0
        self.lock = threading.Lock()
        self._topic_prefix: dict[str, bytes] = {}  # validated topic -> length byte + UTF-8
        self._create_failure_logged = -CREATE_FAILURE_LOG_INTERVAL_S  # time.monotonic()
        self._append_crc = config.enabled_append_prop_crc
        # properties longer than this take the batch way, which adds the CRC property (or,
        # over MAX_PROPERTIES_LENGTH, refuses them); with enabled_append_prop_crc every record
        self._plain_props_max = -1 if self._append_crc else PROPS_CRC_MIN
        self.warmed_offset = 0
        """Commitlog offset up to which the pages are prefaulted (see :meth:`warm_ahead`)."""
        self.batch_topics: set[str] = set()
        """BatchCQ topics: the only ones that take inner-batch records
        (``MessageStore.set_queue_type``)."""

    def inner_batch_step(self, m: MessageRecord) -> int | PutResult:
        """The queue offsets an inner-batch record takes (its INNER_NUM), or why it is refused:
        its topic is not a BatchCQ topic, or INNER_NUM is not 1 to 32767 (RocketMQ's
        MESSAGE_ILLEGAL in ``asyncPutMessage``)."""
        if m.topic not in self.batch_topics:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                remark=f"inner-batch message for topic {m.topic}, whose queue.type is not BatchCQ",
            )
        num = inner_batch_size(m.properties)
        if num is None:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                remark=f"inner-batch message with INNER_NUM "
                f"{m.properties.get(MessageConst.PROPERTY_INNER_NUM)!r}, not 1 to 32767",
            )
        return num

    # -- validation and encoding (outside the lock) ----------------------------------------
    def _encode_all(self, msgs: Sequence[MessageRecord]) -> _Encoded | PutResult:
        """Validate and pre-encode a batch in one pass; a PutResult says why it was refused."""
        max_body = self.config.max_message_size
        topic_prefix = self._topic_prefix
        join = b"".join
        pack_short = _SHORT.pack
        tag_cache = TAGS_CODE_CACHE
        tags_key = MessageConst.TAGS
        tails: list[bytes] = []
        sizes: list[int] = []
        codes: list[int] = []
        with_crc: list[int] = []
        for i, m in enumerate(msgs):
            prefix = topic_prefix.get(m.topic)
            if prefix is None:
                problem = topic_problem(m.topic, self.config.max_topic_length)
                if problem:
                    return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=problem)
                prefix = self._remember_topic(m.topic)
            body = m.body
            if len(body) > max_body:
                return PutResult(
                    PutStatus.MESSAGE_ILLEGAL,
                    remark=f"body of {len(body)} bytes exceeds {max_body}",
                )
            props = m.properties
            if PROPERTY_CRC32 in props:  # the store's own: never taken from a sender
                props = {k: v for k, v in props.items() if k != PROPERTY_CRC32}
            raw = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()
            if (self._append_crc or len(raw) > PROPS_CRC_MIN) and len(raw) <= _CRC_FITS:
                raw += CRC32_PLACEHOLDER
                with_crc.append(i)
            if raw:
                if len(raw) > MAX_PROPERTIES_LENGTH:
                    return PutResult(
                        PutStatus.PROPERTIES_SIZE_EXCEEDED,
                        remark=f"properties take {len(raw)} bytes, more than "
                        f"{MAX_PROPERTIES_LENGTH}",
                    )
                tag = props.get(tags_key)
                codes.append((tag_cache.get(tag) or tags_code(tag)) if tag else 0)
            else:
                codes.append(0)
            if len(m.born_host) != 8:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="born host must be IPv4")
            if m.sys_flag & _INNER_BATCH:
                step = self.inner_batch_step(m)
                if isinstance(step, PutResult):
                    return step
            problem = record_field_problem(m)
            if problem:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=problem)
            tail = join((body, prefix, pack_short(len(raw)), raw))
            tails.append(tail)
            sizes.append(88 + len(tail))
        return _new_tuple(_Encoded, (tails, sizes, codes, sum(sizes), with_crc))

    def _remember_topic(self, topic: str) -> bytes:
        encoded = topic.encode()
        prefix = bytes((len(encoded),)) + encoded
        if len(self._topic_prefix) < 100_000:
            self._topic_prefix[topic] = prefix
        return prefix

    # -- append (one lock hold) ------------------------------------------------------------
    def append(self, msgs: Sequence[MessageRecord]) -> PutResult:
        """Validate, encode and append ``msgs`` as one atomic batch."""
        if len(msgs) == 1:
            return self._append_one(msgs[0])
        if not msgs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="no messages")
        with self.lock:
            files = self.queue.files
            if files:
                done = self._append_uniform(files[-1], msgs)
                if done is not None:
                    return done
        return self._append_batch(msgs)

    def _append_uniform(self, mf: MappedFile, msgs: Sequence[MessageRecord]) -> PutResult | None:
        """:meth:`append` in one pass for a batch of one topic, queue and sys flag (every batch
        send) that fits in ``mf``; None, with nothing changed, for anything else (a topic not
        seen yet, a message to refuse, a mixed batch, a file to roll): the two-pass way
        validates, reports and rolls."""
        first = msgs[0]
        topic, queue_id = first.topic, first.queue_id
        sys_flag = first.sys_flag & ~_HOST_V6_FLAGS
        prefix = self._topic_prefix.get(topic)
        if prefix is None or self._append_crc or sys_flag & _INNER_BATCH:
            return None
        tx = sys_flag & _TX_MASK
        consumable = tx == 0 or tx == _TX_COMMIT
        key = (topic, queue_id)
        first_qoff = qoff = self.topic_queue_table.get(key, 0) if consumable else 0
        step = 1 if consumable else 0
        now = self.clock_ms()
        phys = start = mf.file_from_offset + mf.wrote_position
        limit = mf.file_from_offset + mf.file_size - END_FILE_MIN_BLANK_LENGTH
        max_body = self.config.max_message_size
        store_host = self.store_host
        pack, pack_short, crc32 = HEADER_V4.pack, _SHORT.pack, zlib.crc32
        tag_cache = TAGS_CODE_CACHE
        parts: list[bytes] = []
        sizes: list[int] = []
        codes: list[int] = []
        props_list: list[dict[str, str]] = []
        for m in msgs:
            body, props = m.body, m.properties
            if (
                m.topic != topic
                or m.queue_id != queue_id
                or m.sys_flag & ~_HOST_V6_FLAGS != sys_flag
                or len(body) > max_body
                or len(m.born_host) != 8
            ):
                return None
            if props:
                raw = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()
                if len(raw) > PROPS_CRC_MIN or PROPERTY_CRC32 in props:
                    return None
                tag = props.get(_TAGS)
                codes.append((tag_cache.get(tag) or tags_code(tag)) if tag else 0)
            else:
                raw = b""
                codes.append(0)
            total = 90 + len(body) + len(prefix) + len(raw)  # 88 fixed + 2 properties length
            try:
                header = pack(
                    total, MAGIC_CODE_V1, crc32(body) & 0x7FFFFFFF, queue_id, m.flag, qoff,
                    phys, sys_flag, m.born_timestamp, m.born_host, now, store_host,
                    m.reconsume_times, m.prepared_transaction_offset, len(body),
                )  # fmt: skip
            except struct.error:
                return None  # a number out of its field's range: the two-pass way says which
            parts.append(header)
            parts.append(body)
            parts.append(prefix)
            parts.append(pack_short(len(raw)))
            parts.append(raw)
            sizes.append(total)
            props_list.append(props)
            qoff += step
            phys += total
        if phys > limit:
            return None
        mf.append(b"".join(parts))
        if consumable:
            self.topic_queue_table[key] = qoff
        self.pending_dispatch.append(
            _new_tuple(
                DispatchRequest,
                (topic, queue_id, sys_flag, now, start, phys, first_qoff, sizes, codes, props_list),
            )
        )
        self.last_store_timestamp = now
        return PutResult(
            PutStatus.PUT_OK,
            list(accumulate(sizes[:-1], initial=start)),
            list(range(first_qoff, qoff)) if consumable else [0] * len(sizes),
            now,
            phys - start,
            phys,
        )

    def _append_batch(self, msgs: Sequence[MessageRecord]) -> PutResult:
        encoded = self._encode_all(msgs)
        if isinstance(encoded, PutResult):
            return encoded
        batch_size = encoded.total
        if batch_size + END_FILE_MIN_BLANK_LENGTH > self.queue.file_size:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                remark=f"batch of {batch_size} bytes exceeds the commitlog file size",
            )
        with self.lock:
            try:
                mf = self._file_for(batch_size)
            except MappedFileCreateError as exc:
                return self._create_failed(exc)
            return self._write(mf, msgs, encoded)

    def _create_failed(self, exc: MappedFileCreateError) -> PutResult:
        """The put's answer when the next file cannot be created: the reason, but not the
        server's paths (those go to the log, at most every few seconds)."""
        now = time.monotonic()
        if now - self._create_failure_logged >= CREATE_FAILURE_LOG_INTERVAL_S:
            self._create_failure_logged = now
            log.error("refusing puts: %s", exc)
        return PutResult(
            PutStatus.CREATE_MAPPED_FILE_FAILED,
            remark=f"create mapped file failed: {exc.reason} (the broker's log names the file)",
        )

    def _append_one(self, m: MessageRecord) -> PutResult:
        """:meth:`append` for one message (most sends), without the batch's lists.

        Anything unusual (a topic not seen yet, a message to refuse, a file to roll) goes the
        batch way, which validates and reports it.
        """
        prefix = self._topic_prefix.get(m.topic)
        body = m.body
        props = m.properties
        if props:
            raw = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()
            tag = props.get(_TAGS)
            code = (TAGS_CODE_CACHE.get(tag) or tags_code(tag)) if tag else 0
        else:
            raw, code = b"", 0
        if (
            prefix is None
            or len(body) > self.config.max_message_size
            or len(raw) > self._plain_props_max
            or len(m.born_host) != 8
            or PROPERTY_CRC32 in props
        ):
            return self._append_batch((m,))
        step = 1
        if m.sys_flag & _INNER_BATCH:  # BatchCQ: the record takes INNER_NUM queue offsets
            inner = self.inner_batch_step(m)
            if isinstance(inner, PutResult):
                return inner
            step = inner
        total = 90 + len(body) + len(prefix) + len(raw)  # 88 fixed + 2 properties length
        with self.lock:
            files = self.queue.files
            mf = files[-1] if files else None
            room = mf.file_size - mf.wrote_position if mf is not None else 0
            if mf is not None and total + END_FILE_MIN_BLANK_LENGTH <= room:
                now = self.clock_ms()
                phys = mf.file_from_offset + mf.wrote_position
                sys_flag = m.sys_flag & ~_HOST_V6_FLAGS
                tx = sys_flag & _TX_MASK
                key = (m.topic, m.queue_id)
                numbered = tx == 0 or tx == _TX_COMMIT  # consumable: numbered in its queue
                qoff = self.topic_queue_table.get(key, 0) if numbered else 0
                try:
                    header = HEADER_V4.pack(
                        total, MAGIC_CODE_V1, zlib.crc32(body) & 0x7FFFFFFF, m.queue_id,
                        m.flag, qoff, phys, sys_flag, m.born_timestamp, m.born_host, now,
                        self.store_host, m.reconsume_times, m.prepared_transaction_offset,
                        len(body),
                    )  # fmt: skip
                except struct.error:
                    pass  # a number out of its field's range: the batch way names it
                else:  # nothing changed before this point, so a refusal leaves no trace
                    if numbered:
                        self.topic_queue_table[key] = qoff + step
                    mf.append(b"".join((header, body, prefix, _SHORT.pack(len(raw)), raw)))
                    self.pending_dispatch.append(
                        _new_tuple(
                            DispatchRequest,
                            (
                                m.topic, m.queue_id, sys_flag, now, phys, phys + total, qoff,
                                [total], [code], [props],
                            ),
                        )
                    )  # fmt: skip
                    self.last_store_timestamp = now
                    return PutResult(PutStatus.PUT_OK, [phys], [qoff], now, total, phys + total)
        return self._append_batch((m,))

    def _file_for(self, batch_size: int) -> MappedFile:
        mf = self.queue.writable_file()
        if mf.wrote_position + batch_size + END_FILE_MIN_BLANK_LENGTH > mf.file_size:
            nxt = self.queue.create_file(mf.file_from_offset + mf.file_size)
            remaining = mf.file_size - mf.wrote_position
            mf.write_at(mf.wrote_position, encode_blank(remaining))
            mf.wrote_position = mf.file_size
            mf = nxt
        return mf

    def _write(self, mf: MappedFile, msgs: Sequence[MessageRecord], enc: _Encoded) -> PutResult:
        """Number, pack and copy the batch; queue it for dispatch as runs (one per send)."""
        now = self.clock_ms()
        phys = start = mf.file_from_offset + mf.wrote_position
        store_host = self.store_host
        pack = HEADER_V4.pack
        parts: list[bytes] = []
        runs = _RunSplitter(self, msgs, enc, now)
        run_topic, run_queue, run_flag = "", -1, -1
        qoff = step = 0
        crc32 = zlib.crc32
        with_crc = set(enc.with_crc)
        for i, (m, tail, total) in enumerate(zip(msgs, enc.tails, enc.sizes, strict=True)):
            sys_flag = m.sys_flag & ~_HOST_V6_FLAGS
            if m.queue_id != run_queue or sys_flag != run_flag or m.topic != run_topic:
                qoff, step = runs.begin(i, m, sys_flag, phys, qoff)
                run_topic, run_queue, run_flag = m.topic, m.queue_id, sys_flag
                if sys_flag & _INNER_BATCH:
                    run_flag = -1  # an inner-batch record is a run of its own
            body = m.body
            header = pack(
                total, MAGIC_CODE_V1, crc32(body) & 0x7FFFFFFF, m.queue_id, m.flag, qoff,
                phys, sys_flag, m.born_timestamp, m.born_host, now, store_host,
                m.reconsume_times, m.prepared_transaction_offset, len(body),
            )  # fmt: skip
            if i in with_crc:
                head = header + tail[:-CRC32_RESERVED_LEN]
                tail = tail[:-CRC32_RESERVED_LEN] + crc32_property(head)
            parts.append(header)
            parts.append(tail)
            qoff += step
            phys += total
        runs.end(len(msgs), phys, qoff)
        mf.append(b"".join(parts))
        self.last_store_timestamp = now
        phys_offsets = list(accumulate(enc.sizes[:-1], initial=start))
        return PutResult(
            PutStatus.PUT_OK, phys_offsets, runs.queue_offsets, now, phys - start, phys
        )

    # -- prefaulting ------------------------------------------------------------------------
    def needs_warming(self, window: int) -> bool:
        """True when less than half of ``window`` is prefaulted ahead of the write position
        (and the file being written has pages left to prefault)."""
        mf = self.queue.last_file()
        if mf is None or self.warmed_offset >= mf.file_from_offset + mf.file_size:
            return False
        return self.warmed_offset - (mf.file_from_offset + mf.wrote_position) < window // 2

    def warm_ahead(self, window: int) -> bool:
        """Prefault the file being written up to ``window`` bytes past the write position.

        For a worker thread (the event loop keeps appending meanwhile). False when the system
        cannot prefault: the caller stops asking.
        """
        mf = self.queue.last_file()
        if mf is None:
            return True
        base = mf.file_from_offset
        start = max(self.warmed_offset, base + mf.wrote_position)
        end = min(base + mf.file_size, base + mf.wrote_position + window)
        if end <= start:
            return True
        if not mf.prefault(start - base, end - base):
            return False
        self.warmed_offset = end
        return True

    # -- reads -----------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """First retained commitlog offset."""
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        """Offset just past the last record."""
        return self.queue.max_offset

    def read(self, offset: int, size: int) -> bytes | None:
        """The ``size`` bytes at ``offset``, or None if that range is not stored."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        return mf.read(pos, size)

    def record_size_at(self, offset: int) -> int:
        """TOTALSIZE of the record at ``offset`` (0 if none is there)."""
        mf = self.queue.find(offset)
        if mf is None:
            return 0
        pos = offset - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return 0
        size, magic = _SIZE_MAGIC.unpack_from(mf.mm, pos)
        return size if magic == MAGIC_CODE_V1 else 0

    def read_record(self, offset: int) -> bytes | None:
        """The whole record at ``offset``, or None."""
        size = self.record_size_at(offset)
        return self.read(offset, size) if size else None

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` (0 if none)."""
        mf = self.queue.find(offset)
        if mf is None:
            return 0
        pos = offset - mf.file_from_offset
        if pos + 64 > mf.wrote_position:
            return 0
        return int(struct.unpack_from(">q", mf.mm, pos + 56)[0])

    # -- recovery --------------------------------------------------------------------------
    def set_end(self, offset: int) -> None:
        """Make ``offset`` the end of the log: later bytes and files are discarded."""
        self.queue.truncate_dirty(offset)
        # Files before the end are complete: their wrote position is the file size.
        for mf in self.queue.files[:-1]:
            mf.wrote_position = mf.file_size
        for mf in self.queue.files:
            mf.flushed_position = mf.wrote_position

    def is_clean_end(self, offset: int) -> bool:
        """True when the bytes after ``offset`` in its file are still zero (nothing torn there)."""
        mf = self.queue.find(offset)
        if mf is None:
            return True
        pos = offset - mf.file_from_offset
        end = min(mf.file_size, pos + 4096)
        return mf.mm[pos:end] == bytes(end - pos)


class _RunSplitter:
    """Cuts a batch being written into dispatch runs and numbers each run's queue offsets.

    ``_write`` calls :meth:`begin` where topic, queue or sys flag change and :meth:`end` after
    the last message; in between, a run costs nothing per message.
    """

    def __init__(
        self, log: CommitLog, msgs: Sequence[MessageRecord], enc: _Encoded, now: int
    ) -> None:
        self.log, self.msgs, self.enc, self.now = log, msgs, enc, now
        self.open: tuple[str, int, int, int, int, int, int] | None = None
        # (topic, queue_id, sys_flag, first index, first phys, first queue offset, step);
        # an inner-batch record is a run of one whose step is its INNER_NUM
        self.queue_offsets: list[int] = []
        """Each message's queue offset (0 for those no consume queue sees)."""

    def begin(
        self, i: int, m: MessageRecord, sys_flag: int, phys: int, qoff: int
    ) -> tuple[int, int]:
        """Close the open run at message ``i`` and open one; return (queue offset, step)."""
        self.end(i, phys, qoff)
        tx = sys_flag & _TX_MASK
        if tx == 0 or tx == _TX_COMMIT:  # consumable: numbered in its queue
            first, step = self.log.topic_queue_table.get((m.topic, m.queue_id), 0), 1
            if sys_flag & _INNER_BATCH:
                step = inner_batch_size(m.properties) or 1  # validated by _encode_all
        else:
            first, step = 0, 0
        self.open = (m.topic, m.queue_id, sys_flag, i, phys, first, step)
        return first, step

    def end(self, i: int, phys: int, next_queue_offset: int) -> None:
        """Queue the open run, messages up to ``i`` ending at ``phys``, for dispatch."""
        if self.open is None:
            return
        topic, queue_id, sys_flag, first, start, first_qoff, step = self.open
        self.open = None
        if step and sys_flag & _INNER_BATCH:
            self.log.topic_queue_table[(topic, queue_id)] = next_queue_offset
            self.queue_offsets.append(first_qoff)  # one record: its base offset
        elif step:
            self.log.topic_queue_table[(topic, queue_id)] = next_queue_offset
            self.queue_offsets += range(first_qoff, next_queue_offset)
        else:
            self.queue_offsets += [0] * (i - first)
        whole = first == 0 and i == len(self.msgs)
        enc = self.enc
        self.log.pending_dispatch.append(
            DispatchRequest(
                topic,
                queue_id,
                sys_flag,
                self.now,
                start,
                phys,
                first_qoff,
                enc.sizes if whole else enc.sizes[first:i],
                enc.tags_codes if whole else enc.tags_codes[first:i],
                [m.properties for m in self.msgs[first:i]],
            )
        )


class ScannedRecord(NamedTuple):
    """What recovery needs from one record, without decoding its body."""

    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    properties_raw: bytes


def scan_records(
    log: CommitLog,
    start: int,
    *,
    check_crc: bool,
) -> Iterator[ScannedRecord | int]:
    """Yield each valid record from ``start`` on, then the end offset (an int) as the last item.

    A record is valid when its magic, lengths, CRC (if checked) and PHYSICALOFFSET (which must
    equal where it lies, so a stale record left past an earlier truncation is never revived)
    all agree, its properties, if any, end with their separator, and its topic is a legal
    name (the CRC covers only the body, so these catch a write torn inside the properties or
    the topic: the bytes past the tear are zeros). The end offset is where a torn or corrupt
    tail, if any, begins.
    """
    offset = start
    while True:
        mf = log.queue.find(offset)
        if mf is None:
            break
        pos = offset - mf.file_from_offset
        item = _scan_one(mf, pos, offset, check_crc)
        if item is None:
            break
        if isinstance(item, int):  # blank marker: continue in the next file
            offset = mf.file_from_offset + mf.file_size
            continue
        yield item
        offset += item.size
    yield offset


def _scan_one(mf: MappedFile, pos: int, offset: int, check_crc: bool) -> ScannedRecord | int | None:
    mm = mf.mm
    limit = mf.file_size
    if pos + 8 > limit:
        return None
    size, magic = _SIZE_MAGIC.unpack_from(mm, pos)
    if magic == BLANK_MAGIC_CODE and size == limit - pos:
        return 0
    if magic != MAGIC_CODE_V1 or size < HEADER_V4.size + 3 or pos + size > limit:
        return None
    sys_flag = _SYSFLAG.unpack_from(mm, pos + 36)[0]
    header = header_for(sys_flag)
    if size < header.size + 3:
        return None
    fields = header.unpack_from(mm, pos)
    crc, queue_id, queue_offset, phys, store_ts, body_len = (
        fields[2],
        fields[3],
        fields[5],
        fields[6],
        fields[10],
        fields[14],
    )
    p = pos + header.size
    end = pos + size
    if phys != offset or body_len < 0 or p + body_len + 3 > end:
        return None
    if check_crc and zlib.crc32(mm[p : p + body_len]) & 0x7FFFFFFF != crc:
        return None
    p += body_len
    topic_len = mm[p]
    topic_end = p + 1 + topic_len
    if topic_end + 2 > end:
        return None
    (props_len,) = _SHORT.unpack_from(mm, topic_end)
    if props_len < 0 or topic_end + 2 + props_len != end:
        return None
    if props_len and mm[end - 1] != 0x02:  # BODYCRC does not cover properties: a torn tail
        return None
    raw_topic = mm[p + 1 : topic_end]
    if not raw_topic or raw_topic.translate(None, NAME_CHARS):
        return None  # nor the topic: zeros there are a write torn inside it
    if check_crc and props_len >= CRC32_RESERVED_LEN and mm[end - CRC32_RESERVED_LEN] == 0x5F:
        with memoryview(mm) as view:  # '_': maybe the CRC property that covers the rest
            if not record_crc_ok(view[pos:end], topic_end + 2 - pos):
                return None
    topic = raw_topic.decode("ascii")
    return ScannedRecord(
        offset, size, topic, queue_id, queue_offset, sys_flag, store_ts, mm[topic_end + 2 : end]
    )
