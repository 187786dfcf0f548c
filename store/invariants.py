"""The store's consistency invariant, checked over an open store: ``check_store(store)``.

What must hold once recovery is done and every appended record is dispatched:

- Commitlog: from ``min_offset`` to ``max_offset`` every record is valid (magic, lengths, CRC,
  PHYSICALOFFSET equal to where it lies); blank markers end files; nothing is left over.
- Record -> unit: every consumable record (not a prepared or rolled-back transaction half) has,
  at its queue offset in its queue's consume queue, a unit naming exactly its commitlog offset,
  size and tags code (Java ``hashCode`` of TAGS, 0 without). Within a queue, records carry
  consecutive queue offsets in commitlog order (no repeats, no jumps), and none lies below the
  queue's min offset (it would be stored but unreachable).
- Unit -> record: every unit in ``[min_offset, max_offset)`` points at a valid record of the same
  topic and queue whose QUEUEOFFSET is the unit's position; none points at or past the commitlog
  end or below its start.
- Offsets: the next queue offset of every queue (``commitlog.topic_queue_table``) equals its
  consume queue's max offset.
- BatchCQ queues (:mod:`store.batch_consume_queue`): the same with message offsets. A record
  takes ``INNER_NUM`` consecutive queue offsets when it is an inner batch (else one); its unit
  has msgBaseOffset = its QUEUEOFFSET and batchSize = that count, and each unit starts where
  the one before ended.
- Index (when ``message_index_enable``): every key of every record (UNIQ_KEY and each KEYS
  element) finds that record through ``store.query_messages`` over all time. A key with more
  matches than one query returns (``max_msgs_num_batch``) is retried in a narrow time window
  around the record and skipped if it still cannot be verified.
- Deleted topics: a record of a deleted topic below where it was deleted (``store.deleted_topics``)
  is dead and must have no unit; the checks above skip it.

Cost: one pass over the commitlog (CRC included), one bulk read of each consume queue (numpy
compares), and one index query per distinct (topic, key): seconds for ~100k records.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from common.hashing import java_string_hash
from common.message import MessageConst, MessageSysFlag
from common.record import PHYSICAL_OFFSET_POSITION, RecordError, decode_properties, decode_record
from store.batch_consume_queue import BatchConsumeQueue, BatchUnit, record_batch_size
from store.commitlog import scan_records
from store.consume_queue import CQ_STORE_UNIT_SIZE

if TYPE_CHECKING:
    from store.consume_queue_interface import ConsumeQueueInterface
    from store.message_store import MessageStore

DEFAULT_MAX_PROBLEMS = 200
_BLANK_UNIT_SIZE = 0x7FFFFFFF
_UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("code", ">i8")])
_PHYS = struct.Struct(">q")
_ALL_TIME = (0, 2**63 - 1)
_NARROW_MS = 2000


@dataclass(slots=True)
class _Queue:
    """Consumable records of one (topic, queue), in commitlog order."""

    qoffs: list[int] = field(default_factory=list)
    phys: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    """Queue offsets each record takes (INNER_NUM for an inner batch, else 1)."""


@dataclass(slots=True)
class _Walk:
    """What one pass over the commitlog found."""

    queues: dict[tuple[str, int], _Queue] = field(default_factory=dict)
    at: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # phys -> topic, qid, qoff
    keys: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)
    records: int = 0


class _Report:
    """Collects problem strings, keeping at most ``limit`` of them plus a count of the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.problems: list[str] = []
        self.dropped = 0

    def add(self, problem: str) -> None:
        if len(self.problems) < self.limit:
            self.problems.append(problem)
        else:
            self.dropped += 1

    def result(self) -> list[str]:
        if self.dropped:
            return [*self.problems, f"... and {self.dropped} more problems"]
        return list(self.problems)


def check_store(store: MessageStore, *, max_problems: int = DEFAULT_MAX_PROBLEMS) -> list[str]:
    """Check the invariant in the module docstring; return problems (empty when consistent).

    ``store`` must be open, and quiescent while this runs: call it after recovery, or after
    ``dispatch_pending()`` has returned 0 (records still pending are reported as a problem).
    Each problem is one readable sentence naming the topic/queue, the queue offset and the
    commitlog offset involved; at most ``max_problems`` are listed, then a count of the rest.
    """
    report = _Report(max_problems)
    behind = store.dispatch_behind
    if behind:
        report.add(f"{behind} appended records are not dispatched yet (drain dispatch_pending)")
    walk = _walk_commitlog(store, report)
    keys = set(walk.queues) | set(store.cq_table)
    for topic, queue_id in sorted(keys):
        _check_queue(store, topic, queue_id, walk, report)
    _check_queue_table(store, report)
    if store.config.message_index_enable:
        _check_index(store, walk, report)
    return report.result()


# -- commitlog ---------------------------------------------------------------------------------
def _walk_commitlog(store: MessageStore, report: _Report) -> _Walk:
    cl = store.commitlog
    start, end = cl.min_offset, cl.max_offset
    walk = _Walk()
    index = store.config.message_index_enable
    codes: dict[str, int] = {}
    rollback = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    stop = start
    for item in scan_records(cl, start, check_crc=True):
        if isinstance(item, int):
            stop = item
            break
        if item.offset >= end:
            stop = item.offset
            break
        if item.offset + item.size > end:
            report.add(
                f"commitlog: record at {item.offset} ({item.size} bytes) runs past the end {end}"
            )
        walk.records += 1
        if store.deleted_topics.is_dead(item.topic, item.offset):
            continue  # its topic was deleted: no unit, no index entries expected
        props = decode_properties(item.properties_raw) if item.properties_raw else {}
        if MessageSysFlag.is_consumable(item.sys_flag):
            key = (item.topic, item.queue_id)
            q = walk.queues.get(key)
            if q is None:
                walk.queues[key] = q = _Queue()
            tags = props.get(MessageConst.TAGS)
            code = 0
            if tags:
                code = codes.get(tags, 0) or codes.setdefault(tags, java_string_hash(tags))
            q.qoffs.append(item.queue_offset)
            q.phys.append(item.offset)
            q.sizes.append(item.size)
            q.codes.append(code)
            q.batches.append(record_batch_size(item.sys_flag, props))
            walk.at[item.offset] = (item.topic, item.queue_id, item.queue_offset)
        if index and item.sys_flag & MessageSysFlag.TRANSACTION_MASK != rollback:
            hit = (item.offset, item.store_timestamp)
            for k in _index_keys(props):
                walk.keys.setdefault((item.topic, k), []).append(hit)
    if stop < end:
        report.add(
            f"commitlog: no valid record at offset {stop} but the log ends at {end} "
            f"({_why_invalid(store, stop)})"
        )
    return walk


def _index_keys(props: dict[str, str]) -> list[str]:
    keys: list[str] = []
    uniq = props.get(MessageConst.UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    raw = props.get(MessageConst.KEYS)
    if raw:
        keys.extend(k for k in raw.split(MessageConst.KEY_SEPARATOR) if k and k not in keys)
    return keys


def _why_invalid(store: MessageStore, offset: int) -> str:
    mf = store.commitlog.queue.find(offset)
    if mf is None:
        return "no commitlog file holds it"
    try:
        decode_record(mf.mm, offset - mf.file_from_offset, check_crc=True, with_body=False)
    except RecordError as exc:
        return exc.reason
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        return f"undecodable: {exc}"
    return "the PHYSICALOFFSET field does not match its position"


# -- consume queues ----------------------------------------------------------------------------
def _read_units(
    cq: ConsumeQueueInterface, lo: int, hi: int
) -> tuple[npt.NDArray[np.void], int | None]:
    """Units [lo, hi) as a structured array; the second item is where reading failed, if it did."""
    chunks: list[bytes] = []
    pos = lo
    while pos < hi:
        raw = cq.read_units(pos, hi - pos)
        if not raw:
            break
        chunks.append(raw)
        pos += len(raw) // CQ_STORE_UNIT_SIZE
    units = np.frombuffer(b"".join(chunks), dtype=_UNIT_DTYPE)
    return units, (None if pos >= hi else pos)


def _check_queue(
    store: MessageStore, topic: str, queue_id: int, walk: _Walk, report: _Report
) -> None:
    name = f"{topic}/{queue_id}"
    recs = walk.queues.get((topic, queue_id)) or _Queue()
    cq = store.find_consume_queue(topic, queue_id)
    if cq is None:
        if recs.qoffs:
            report.add(
                f"{name}: {len(recs.qoffs)} records (queue offsets {recs.qoffs[0]}.."
                f"{recs.qoffs[-1]}, first at commitlog {recs.phys[0]}) but no consume queue"
            )
        return
    if isinstance(cq, BatchConsumeQueue):
        _check_batch_queue(name, recs, cq, walk, report)
        return
    lo, hi = cq.min_offset, cq.max_offset
    units, broken = _read_units(cq, lo, hi)
    if broken is not None:
        report.add(f"{name}: units from queue offset {broken} to {hi} cannot be read (no file)")
    q = np.array(recs.qoffs, dtype=np.int64)
    phys = np.array(recs.phys, dtype=np.int64)
    _check_record_sequence(name, q, phys, report)
    _check_records_to_units(name, recs, q, phys, units, lo, hi, report)
    _check_units_to_records(store, name, q, phys, units, lo, walk, report)


def _check_record_sequence(
    name: str, q: npt.NDArray[np.int64], phys: npt.NDArray[np.int64], report: _Report
) -> None:
    if len(q) < 2:
        return
    steps = np.diff(q)
    for i in np.flatnonzero(steps != 1)[:20]:
        a, b = int(q[i]), int(q[i + 1])
        kind = "repeats" if b <= a else "jumps"
        report.add(
            f"{name}: queue offset {kind} from {a} (commitlog {int(phys[i])}) to {b} "
            f"(commitlog {int(phys[i + 1])}) in commitlog order"
        )


def _check_records_to_units(
    name: str,
    recs: _Queue,
    q: npt.NDArray[np.int64],
    phys: npt.NDArray[np.int64],
    units: npt.NDArray[np.void],
    lo: int,
    hi: int,
    report: _Report,
) -> None:
    if not len(q):
        return
    below = np.flatnonzero(q < lo)
    if len(below):
        i = int(below[0])
        report.add(
            f"{name}: {len(below)} stored records lie below the queue's min offset {lo} "
            f"(unreachable), first queue offset {int(q[i])} at commitlog {int(phys[i])}"
        )
    beyond = np.flatnonzero(q >= hi)
    for i in beyond[:20]:
        report.add(
            f"{name}: record at commitlog {int(phys[i])} with queue offset {int(q[i])} has no "
            f"unit (queue max offset {hi})"
        )
    if len(beyond) > 20:
        report.add(f"{name}: {len(beyond) - 20} more records have no unit")
    inside = np.flatnonzero((q >= lo) & (q < lo + len(units)))
    if not len(inside):
        return
    at = q[inside] - lo
    sizes = np.array(recs.sizes, dtype=np.int64)[inside]
    codes = np.array(recs.codes, dtype=np.int64)[inside]
    got = units[at]
    bad = np.flatnonzero(
        (got["phys"] != phys[inside]) | (got["size"] != sizes) | (got["code"] != codes)
    )
    for j in bad[:20]:
        u = got[j]
        report.add(
            f"{name}: unit at queue offset {int(q[inside[j]])} is (offset {int(u['phys'])}, "
            f"size {int(u['size'])}, tags code {int(u['code'])}) but the record there is "
            f"(offset {int(phys[inside[j]])}, size {int(sizes[j])}, tags code {int(codes[j])})"
        )
    if len(bad) > 20:
        report.add(f"{name}: {len(bad) - 20} more units disagree with their records")


def _check_units_to_records(
    store: MessageStore,
    name: str,
    q: npt.NDArray[np.int64],
    phys: npt.NDArray[np.int64],
    units: npt.NDArray[np.void],
    lo: int,
    walk: _Walk,
    report: _Report,
) -> None:
    if not len(units):
        return
    u_phys = units["phys"].astype(np.int64)
    positions = np.arange(lo, lo + len(units), dtype=np.int64)
    j = np.searchsorted(phys, u_phys)
    j_ok = np.minimum(j, max(len(phys) - 1, 0))
    if len(phys):
        good = (j < len(phys)) & (phys[j_ok] == u_phys) & (q[j_ok] == positions)
    else:
        good = np.zeros(len(units), dtype=bool)
    bad = np.flatnonzero(~good)
    cl_min, cl_max = store.commitlog.min_offset, store.commitlog.max_offset
    for i in bad[:20]:
        off, size = int(u_phys[i]), int(units["size"][i])
        where = f"{name}: unit at queue offset {int(positions[i])} (commitlog {off})"
        if size == _BLANK_UNIT_SIZE:
            report.add(f"{where} is a blank filler inside the readable range")
        elif off >= cl_max:
            report.add(f"{where} points at or past the commitlog end {cl_max}")
        elif off < cl_min:
            report.add(f"{where} points below the commitlog start {cl_min} (deleted data)")
        elif off in walk.at:
            t, qid, qoff = walk.at[off]
            report.add(f"{where} points at the record of {t}/{qid} queue offset {qoff}")
        else:
            report.add(f"{where} points at no valid consumable record")
    if len(bad) > 20:
        report.add(f"{name}: {len(bad) - 20} more units point at the wrong place")


def _read_batch_units(
    cq: BatchConsumeQueue, lo: int, hi: int
) -> tuple[list[BatchUnit], int | None]:
    """The units of [lo, hi); the second item is where reading failed, if it did."""
    units: list[BatchUnit] = []
    pos = lo
    while pos < hi:
        got = cq.read_batch_units(pos, hi - pos)
        if not got:
            break
        units.extend(got)
        pos = got[-1].end
    return units, (None if pos >= hi else pos)


def _check_batch_queue(
    name: str,
    recs: _Queue,
    cq: BatchConsumeQueue,
    walk: _Walk,
    report: _Report,
) -> None:
    """The checks of :func:`_check_queue` for a BatchCQ queue (units by msgBaseOffset)."""
    lo, hi = cq.min_offset, cq.max_offset
    units, broken = _read_batch_units(cq, lo, hi)
    if broken is not None:
        report.add(f"{name}: units from queue offset {broken} to {hi} cannot be read (no file)")
    rows = list(zip(recs.qoffs, recs.phys, recs.sizes, recs.codes, recs.batches, strict=True))
    for (q0, p0, _, _, b0), (q1, p1, _, _, _) in pairwise(rows):
        if q1 != q0 + b0:
            report.add(
                f"{name}: queue offset goes from {q0} + {b0} (commitlog {p0}) to {q1} "
                f"(commitlog {p1}) in commitlog order"
            )
    by_base = {u.base: u for u in units}
    for q, phys, size, code, batch in rows:
        if q + batch <= lo:
            continue  # below the readable minimum: retention's doing
        if q >= hi or q < lo:
            report.add(f"{name}: record at commitlog {phys} (queue offset {q}) has no unit")
            continue
        u = by_base.get(q)
        if u is None or (u.phys, u.size, u.tags_code, u.batch_size) != (phys, size, code, batch):
            report.add(
                f"{name}: unit at queue offset {q} is {u} but the record there is (offset "
                f"{phys}, size {size}, tags code {code}, batch {batch})"
            )
    for prev, u in pairwise(units):
        if u.base != prev.end:
            report.add(f"{name}: unit at queue offset {u.base} does not follow {prev.end}")
    for u in units:
        if walk.at.get(u.phys, ("", -1, -1))[:3] != (cq.topic, cq.queue_id, u.base):
            report.add(
                f"{name}: unit at queue offset {u.base} (commitlog {u.phys}) points at no "
                "record of its queue with that offset"
            )


def _check_queue_table(store: MessageStore, report: _Report) -> None:
    table = store.commitlog.topic_queue_table
    for (topic, queue_id), cq in sorted(store.cq_table.items()):
        nxt = table.get((topic, queue_id), 0)
        if nxt != cq.max_offset:
            report.add(
                f"{topic}/{queue_id}: next queue offset is {nxt} but the consume queue ends at "
                f"{cq.max_offset}"
            )
    for (topic, queue_id), nxt in sorted(table.items()):
        if (topic, queue_id) not in store.cq_table and nxt:
            report.add(f"{topic}/{queue_id}: next queue offset is {nxt} but there is no queue")


# -- index -------------------------------------------------------------------------------------
def _found_offsets(store: MessageStore, topic: str, key: str, begin: int, end: int) -> list[int]:
    cap = store.config.max_msgs_num_batch
    raws = store.query_messages(topic, key, cap, begin, end).records
    return [_PHYS.unpack_from(raw, PHYSICAL_OFFSET_POSITION)[0] for raw in raws]


def _check_index(store: MessageStore, walk: _Walk, report: _Report) -> None:
    cap = store.config.max_msgs_num_batch
    for (topic, key), hits in walk.keys.items():
        found = _found_offsets(store, topic, key, *_ALL_TIME)
        missing = _missing(hits, found)
        if missing and len(found) >= cap:
            missing = [
                (off, ts) for off, ts in missing if _missing_in_window(store, topic, key, off, ts)
            ]
        for off, _ts in missing[:5]:
            report.add(f"index: key {key!r} of topic {topic} does not find commitlog {off}")
        if len(missing) > 5:
            report.add(f"index: key {key!r} of topic {topic}: {len(missing) - 5} more not found")


def _missing_in_window(store: MessageStore, topic: str, key: str, off: int, ts: int) -> bool:
    """Re-query a key with too many matches around one record's time; True if surely missing."""
    cap = store.config.max_msgs_num_batch
    found = _found_offsets(store, topic, key, ts - _NARROW_MS, ts + _NARROW_MS)
    return len(found) < cap and off not in found


def _missing(hits: Iterable[tuple[int, int]], found: list[int]) -> list[tuple[int, int]]:
    got = set(found)
    return [(off, ts) for off, ts in hits if off not in got]
