"""Recovery: bring the commitlog, consume queues and index back into agreement after open.

Steps (both after a clean shutdown and after a crash):
1. Consume queues: keep each queue's units up to the first invalid one (looking at every unit
   past the checkpoint's dispatched offset), cut what follows, and cut the last unit if it
   disagrees with its record (torn); a queue with a gap in its files, or with no files at all,
   marks the store *damaged*, and so do queues holding fewer units in all than the checkpoint
   says were flushed (a queue's newest file, or its whole directory, was lost).
2. Pick where to re-dispatch from: the start of the commitlog file holding the checkpoint's
   dispatched offset (below it, queues and index were flushed), but no later than the newest
   consume-queue unit and the newest index entry (a damaged checkpoint or lost index files);
   the whole log when damaged.
3. Walk records from there, checking magic, lengths, CRC, physical offset and the properties'
   terminator; give every record whose consume-queue unit or index entries are missing to the
   dispatcher (dispatch is idempotent). A dispatch that finds a hole in a queue, or a record
   past queue offset 0 of a queue without files (a lost directory), restarts the walk from the
   first file.
4. The end of the walk is the end of the log: cut the torn or corrupt tail, cut consume-queue
   units and index entries that point at or past it (records from there on get indexed), move
   deleted topics' cuts back to it (records written there later are the new topic's). Then
   rebuild the next queue offsets and readable minimums from the consume queues.
5. Index files lost before or between others (a file deleted by hand, or dropped for a bad
   size) leave stretches of the log no file vouches for; their keyed records are indexed into
   new files named to sort where the lost ones did, and so are the keys the surviving
   neighbours lack of the two records at the stretch's ends (a record's keys can straddle
   two files).
6. After a crash, flush the consume queues and the index and write the checkpoint, so that
   what recovery did is durable before new records go past the end. (Cuts of the commitlog
   and the consume queues are synced where they are made.)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from common.message import MessageConst, MessageSysFlag
from common.record import decode_properties
from store.batch_consume_queue import record_batch_size
from store.commitlog import ScannedRecord, scan_records
from store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueueGapError
from store.consume_queue_interface import ConsumeQueueInterface
from store.dispatch_request import DispatchRequest, key_suffixes
from store.index_service import LostIndexRecord
from store.recovery_scan import verify_until
from store.tags import tags_code

if TYPE_CHECKING:
    from store.message_store import MessageStore

log = logging.getLogger(__name__)
DISPATCH_BATCH = 4096


def recover(store: MessageStore, *, last_exit_ok: bool) -> None:
    """Run the recovery steps in the module docstring."""
    damaged = _recover_consume_queues(store)
    if store.commitlog.queue.files:
        _recover_log(store, damaged=damaged, last_exit_ok=last_exit_ok)
    else:
        _finish(store, 0)
    if not last_exit_ok:
        # What recovery changed becomes durable before anything new is written: otherwise a
        # power cut could bring back an index claiming records past the cut, or a checkpoint
        # counting units recovery cut (which would make the next recovery rebuild everything).
        store.flush_logics()


def _recover_log(store: MessageStore, *, damaged: bool, last_exit_ok: bool) -> None:
    """Steps 2 to 5: walk the log from where durable state vouches for, then finish."""
    first = store.commitlog.min_offset
    start = first if damaged else _dispatch_start(store)
    log.info(
        "recovering store %s (%s exit) from commitlog offset %d",
        store.config.store_path_root_dir,
        "clean" if last_exit_ok else "abnormal",
        start,
    )
    try:
        end = _redispatch(store, start, allow_gap=False, damaged=damaged)
    except ConsumeQueueGapError as gap:
        log.warning("consume queue hole (%s); re-dispatching the whole commitlog", gap)
        start = first
        end = _redispatch(store, first, allow_gap=True)
    _finish(store, end)
    if store.config.message_index_enable:
        _rebuild_lost_index_files(store)
    store.recovered_range = (start, end)


def _recover_consume_queues(store: MessageStore) -> bool:
    damaged = store.dropped_unreadable_queue
    found = store.dead_units_dropped  # stale queues of deleted topics, removed at open
    flushed_below = store.checkpoint.dispatched_phy_offset
    for cq in store.consume_queues():
        cq.recover(flushed_below)
        found += cq.max_offset  # before a torn last unit is cut: flushed units are whole
        _verify_last_unit(store, cq)
        if not cq.contiguous or not cq.queue.files:
            damaged = True
    vouched = store.checkpoint.logics_unit_count
    if found < vouched:
        log.warning(
            "consume queues hold %d units, the checkpoint vouches for %d: files were lost; "
            "re-dispatching the whole commitlog",
            found,
            vouched,
        )
        damaged = True
    return damaged


def _verify_last_unit(store: MessageStore, cq: ConsumeQueueInterface) -> None:
    """Cut a queue's last unit when it disagrees with its record, so that it is dispatched again.

    Units (20 or 46 bytes) straddle pages: a crash inside a dispatch can leave the last unit
    with its offset but a cut-short size or tags code, which the shape check cannot see.
    """
    cl = store.commitlog
    unit = cq.last_unit()
    if unit is None or unit[1] == BLANK_UNIT_SIZE or unit[0] < cl.min_offset:
        return
    offset, size, code, queue_offset = unit
    rec = next(scan_records(cl, offset, check_crc=store.config.check_crc_on_recover))
    if (
        isinstance(rec, ScannedRecord)
        and (rec.offset, rec.size, rec.topic, rec.queue_id, rec.queue_offset)
        == (offset, size, cq.topic, cq.queue_id, queue_offset)
        and _tags_code_of(rec) == code
    ):
        return
    log.warning(
        "%s/%d: last unit (queue offset %d) does not match its record; cut",
        cq.topic,
        cq.queue_id,
        queue_offset,
    )
    cq.drop_last_unit(store.checkpoint.dispatched_phy_offset)


def _dispatch_start(store: MessageStore) -> int:
    """The record to re-dispatch from: the oldest point any durable state vouches for.

    That is the lowest of the checkpoint's dispatched and flushed offsets, the newest
    consume-queue unit and the newest index entry (so a damaged checkpoint, or deleted queue or
    index files, cannot make recovery skip records). The first three are ends of records; if
    the bytes there are neither a valid record nor the clean end of the log (zeros in its last
    file), the walk starts at the beginning of that commitlog file instead.
    """
    cl = store.commitlog
    cp = store.checkpoint
    newest_unit = max((cq.max_physic_offset for cq in store.consume_queues()), default=-1)
    target = max(
        cl.min_offset, min(cp.dispatched_phy_offset, cp.master_flushed_offset, newest_unit)
    )
    indexed = store.index.indexed_up_to if store.config.message_index_enable else target
    if indexed < target:
        return _index_start(store, max(cl.min_offset, indexed))
    if cl.queue.find(target) is None:
        return cl.queue.file_start(min(target, cl.queue.files[-1].file_from_offset))
    if _is_record(store, target) or (
        cl.is_clean_end(target) and cl.queue.find(target) is cl.queue.files[-1]
    ):
        return target
    return cl.queue.file_start(target)


def _index_start(store: MessageStore, indexed: int) -> int:
    """Where to walk from for the index: its newest record, if that is one. A recovery that cut
    the log at ``E`` leaves it at ``E - 1``, which is no record, and may even lie in the zeros
    that pad the previous file's end: then the walk starts at the file holding the next byte."""
    cl = store.commitlog
    if cl.queue.find(indexed) is not None and _is_record(store, indexed):
        return indexed
    return cl.queue.file_start(min(indexed + 1, cl.queue.files[-1].file_from_offset))


def _is_record(store: MessageStore, offset: int) -> bool:
    first = next(scan_records(store.commitlog, offset, check_crc=store.config.check_crc_on_recover))
    return isinstance(first, ScannedRecord)


def _covered_until(store: MessageStore) -> int:
    """Commitlog offset below which every consume queue and the index hold every record."""
    floor = store.index.indexed_up_to if store.config.message_index_enable else 1 << 62
    for cq in store.consume_queues():
        floor = min(floor, cq.max_physic_offset)
    return floor


def _redispatch(store: MessageStore, start: int, *, allow_gap: bool, damaged: bool = False) -> int:
    """Walk from ``start``, dispatching what is missing; return the end of the valid log.

    Below what every consume queue and the index cover, records are only verified, in bulk;
    not when ``damaged``: a queue whose directory was lost is not among the queues.
    """
    check_crc = store.config.check_crc_on_recover
    index_floor = store.index.indexed_up_to if store.config.message_index_enable else 1 << 62
    covered = _covered_until(store) if not (allow_gap or damaged) else -1
    if covered > start:
        # nothing below ``covered`` needs dispatch: verify that stretch in bulk
        start = verify_until(store.commitlog, start, covered, check_crc=check_crc)
    runs = _RunCollector()
    seen: set[tuple[str, int]] = set()
    end = start
    for item in scan_records(store.commitlog, start, check_crc=check_crc):
        if isinstance(item, int):
            end = item
            break
        if not allow_gap:
            _check_queue_exists(store, item, seen)
        if _needs_dispatch(store, item, index_floor):
            runs.add(item)
            if runs.records >= DISPATCH_BATCH:
                store.dispatch(runs.take(), allow_gap=allow_gap)
    if runs.records:
        store.dispatch(runs.take(), allow_gap=allow_gap)
    return end


class _RunCollector:
    """Scanned records grouped back into dispatch runs (see :mod:`store.dispatch_request`):
    consecutive records of one topic, queue, sys flag and store time, contiguous in the log
    and, when consumable, in their queue (the records of one put)."""

    def __init__(self) -> None:
        self.done: list[DispatchRequest] = []
        self.records = 0
        self._key: tuple[str, int, int, int] | None = None
        self._first = (0, 0)  # phys offset and queue offset of the open run's first record
        self._end = -1  # commitlog offset just past the open run
        self._next_queue_offset = -1  # what the next record's must be to continue the run
        self._step = 0
        self._sizes: list[int] = []
        self._codes: list[int] = []
        self._props: list[dict[str, str]] = []

    def add(self, rec: ScannedRecord) -> None:
        """Append one record, to the open run if it continues it."""
        props = decode_properties(rec.properties_raw) if rec.properties_raw else {}
        key = (rec.topic, rec.queue_id, rec.sys_flag, rec.store_timestamp)
        if (
            key != self._key
            or rec.offset != self._end
            or (self._step and rec.queue_offset != self._next_queue_offset)
        ):
            self._close()
            self._key = key
            self._first = (rec.offset, rec.queue_offset)
            self._step = 1 if MessageSysFlag.is_consumable(rec.sys_flag) else 0
            self._next_queue_offset = rec.queue_offset
        self._sizes.append(rec.size)
        self._codes.append(tags_code(props.get(MessageConst.TAGS)))
        self._props.append(props)
        self._end = rec.offset + rec.size
        if self._step:  # an inner batch (BatchCQ) takes INNER_NUM queue offsets
            self._next_queue_offset += record_batch_size(rec.sys_flag, props)
        self.records += 1

    def take(self) -> list[DispatchRequest]:
        """The runs so far (the open one closed); the collector starts empty again."""
        self._close()
        runs, self.done, self.records = self.done, [], 0
        return runs

    def _close(self) -> None:
        if self._key is None:
            return
        topic, queue_id, sys_flag, stamp = self._key
        phys, queue_offset = self._first
        self.done.append(
            DispatchRequest(
                topic, queue_id, sys_flag, stamp, phys, self._end, queue_offset,
                self._sizes, self._codes, self._props,
            )
        )  # fmt: skip
        self._key = None
        self._end = -1
        self._sizes, self._codes, self._props = [], [], []


def _check_queue_exists(
    store: MessageStore, rec: ScannedRecord, seen: set[tuple[str, int]]
) -> None:
    """Raise a gap when a queue without files would start past 0: its directory was lost."""
    key = (rec.topic, rec.queue_id)
    if key in seen or not MessageSysFlag.is_consumable(rec.sys_flag):
        return
    if store.deleted_topics.is_dead(rec.topic, rec.offset):
        return
    seen.add(key)
    cq = store.find_consume_queue(rec.topic, rec.queue_id)
    if rec.queue_offset > 0 and (cq is None or not cq.queue.files):
        raise ConsumeQueueGapError(rec.topic, rec.queue_id, 0, rec.queue_offset)


def _needs_dispatch(store: MessageStore, rec: ScannedRecord, index_floor: int) -> bool:
    if store.deleted_topics.is_dead(rec.topic, rec.offset):
        return False
    if rec.offset >= index_floor:  # the newest indexed record may be only partly indexed
        return True
    if not MessageSysFlag.is_consumable(rec.sys_flag):
        return False
    cq = store.find_consume_queue(rec.topic, rec.queue_id)
    return cq is None or cq.max_offset <= rec.queue_offset


_KEY_MARKERS = (
    f"{MessageConst.UNIQ_KEY}\x01".encode(),
    f"{MessageConst.KEYS}\x01".encode(),
)


def _rebuild_lost_index_files(store: MessageStore) -> None:
    """Step 5: index the keyed records of every stretch no index file vouches for."""
    cl = store.commitlog
    index = store.index
    for after, before, position in reversed(index.uncovered(cl.min_offset, cl.max_offset)):
        end = before + cl.record_size_at(before)  # the boundary record at ``before`` included
        if not _may_hold_keys(store, max(after, cl.min_offset), end):
            continue  # keyless records only (or none): nothing was lost
        records = _keyed_records_between(store, after, before)
        done = index.backfill(records, position) if records else 0
        if done:
            log.warning(
                "index: rebuilt %d entries of a lost index file (commitlog %d..%d)",
                done,
                records[0].phys_offset,
                records[-1].phys_offset,
            )


def _may_hold_keys(store: MessageStore, start: int, end: int) -> bool:
    """False when no byte string of a key property occurs in ``[start, end)`` of the log (a
    C-speed search, so a stretch of keyless records costs no record walk)."""
    queue = store.commitlog.queue
    for mf in queue.files:
        lo = max(start, mf.file_from_offset) - mf.file_from_offset
        hi = min(end, mf.file_from_offset + mf.file_size) - mf.file_from_offset
        if lo < hi and any(mf.mm.find(marker, lo, hi) >= 0 for marker in _KEY_MARKERS):
            return True
    return False


def _keyed_records_between(store: MessageStore, after: int, before: int) -> list[LostIndexRecord]:
    """The records with ``after <= offset <= before`` that have index keys, commitlog order
    (the boundary records too: see :meth:`IndexService.uncovered`)."""
    cl = store.commitlog
    check_crc = store.config.check_crc_on_recover
    start = max(after, cl.min_offset)
    first = next(scan_records(cl, start, check_crc=check_crc))
    if not isinstance(first, ScannedRecord) or first.offset != start:
        start = max(cl.queue.file_start(start), cl.min_offset)  # not a record boundary
    rollback = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    out = []
    for item in scan_records(cl, start, check_crc=check_crc):
        if isinstance(item, int) or item.offset > before:
            break
        if item.offset < after or not item.properties_raw:
            continue
        if store.deleted_topics.is_dead(item.topic, item.offset):
            continue  # never indexed on purpose: its topic was deleted before dispatch
        if item.sys_flag & MessageSysFlag.TRANSACTION_MASK == rollback:
            continue
        props = decode_properties(item.properties_raw)
        if key_suffixes(props):
            out.append(LostIndexRecord(item.topic, props, item.offset, item.store_timestamp))
    return out


def _tags_code_of(rec: ScannedRecord) -> int:
    props = decode_properties(rec.properties_raw) if rec.properties_raw else {}
    return tags_code(props.get(MessageConst.TAGS))


def _finish(store: MessageStore, end: int) -> None:
    store.commitlog.set_end(end)
    if moved := store.deleted_topics.clamp_to(end):
        log.warning("%d deleted topics' cuts moved back to the commitlog's end %d", moved, end)
    if store.config.message_index_enable:
        store.index.cut_past(end)
    for cq in store.consume_queues():
        if cq.max_physic_offset > end:
            cq.truncate_dirty(end)
    table = store.commitlog.topic_queue_table
    table.clear()
    for cq in store.consume_queues():
        # units below the commitlog's start (retention) are not readable (RocketMQ's
        # correctMinOffset in recoverTopicQueueTable)
        cq.correct_min_offset(store.commitlog.min_offset)
        table[(cq.topic, cq.queue_id)] = cq.max_offset
    store.reput_offset = end
