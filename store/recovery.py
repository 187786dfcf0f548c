"""Recovery: bring the commitlog, consume queues and index back into agreement after open.

Steps (both after a clean shutdown and after a crash):
1. Consume queues: keep each file's valid prefix, cut what follows; a queue with a gap in its
   files, or with no files at all, marks the store *damaged*.
2. Pick where to re-dispatch from: the start of the commitlog file holding the checkpoint's
   dispatched offset (below it, queues and index were flushed), or the whole log when damaged.
3. Walk records from there, checking magic, lengths, CRC and physical offset; give every record
   whose consume-queue unit or index entries are missing to the dispatcher (dispatch is
   idempotent). A dispatch that finds a hole in a queue restarts the walk from the first file.
4. The end of the walk is the end of the log: cut the torn or corrupt tail, and cut consume-queue
   units that point at or past it. Then rebuild the next queue offsets from the consume queues.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from common.message import MessageConst, MessageSysFlag
from common.record import decode_properties
from store.commitlog import ScannedRecord, scan_records
from store.consume_queue import ConsumeQueueGapError
from store.dispatch_request import DispatchRequest
from store.tags import tags_code

if TYPE_CHECKING:
    from store.message_store import MessageStore

log = logging.getLogger(__name__)
DISPATCH_BATCH = 4096


def recover(store: MessageStore, *, last_exit_ok: bool) -> None:
    """Run the recovery steps in the module docstring."""
    damaged = _recover_consume_queues(store)
    commitlog = store.commitlog
    if not commitlog.queue.files:
        _finish(store, 0)
        return
    first = commitlog.min_offset
    start = first if damaged else _dispatch_start(store)
    log.info(
        "recovering store %s (%s exit) from commitlog offset %d",
        store.config.store_path_root_dir,
        "clean" if last_exit_ok else "abnormal",
        start,
    )
    try:
        end = _redispatch(store, start, allow_gap=False)
    except ConsumeQueueGapError as gap:
        log.warning("consume queue hole (%s); re-dispatching the whole commitlog", gap)
        end = _redispatch(store, first, allow_gap=True)
    _finish(store, end)


def _recover_consume_queues(store: MessageStore) -> bool:
    damaged = False
    for cq in store.consume_queues():
        cq.recover()
        if not cq.contiguous or not cq.queue.files:
            damaged = True
    return damaged


def _dispatch_start(store: MessageStore) -> int:
    cl = store.commitlog
    target = store.checkpoint.dispatched_phy_offset
    target = max(cl.min_offset, min(target, cl.max_offset))
    return cl.queue.file_start(target)


def _redispatch(store: MessageStore, start: int, *, allow_gap: bool) -> int:
    """Walk from ``start``, dispatching what is missing; return the end of the valid log."""
    check_crc = store.config.check_crc_on_recover
    index_floor = store.index.indexed_up_to if store.config.message_index_enable else 1 << 62
    batch: list[DispatchRequest] = []
    end = start
    for item in scan_records(store.commitlog, start, check_crc=check_crc):
        if isinstance(item, int):
            end = item
            break
        if _needs_dispatch(store, item, index_floor):
            batch.append(_to_request(item))
            if len(batch) >= DISPATCH_BATCH:
                store.dispatch(batch, allow_gap=allow_gap)
                batch = []
    if batch:
        store.dispatch(batch, allow_gap=allow_gap)
    return end


def _needs_dispatch(store: MessageStore, rec: ScannedRecord, index_floor: int) -> bool:
    if rec.offset > index_floor:
        return True
    if not MessageSysFlag.is_consumable(rec.sys_flag):
        return False
    cq = store.find_consume_queue(rec.topic, rec.queue_id)
    return cq is None or cq.max_offset <= rec.queue_offset


def _to_request(rec: ScannedRecord) -> DispatchRequest:
    props = decode_properties(rec.properties_raw) if rec.properties_raw else {}
    return DispatchRequest(
        rec.topic,
        rec.queue_id,
        rec.offset,
        rec.size,
        tags_code(props.get(MessageConst.TAGS)),
        rec.store_timestamp,
        rec.queue_offset,
        rec.sys_flag,
        props,
    )


def _finish(store: MessageStore, end: int) -> None:
    store.commitlog.set_end(end)
    for cq in store.consume_queues():
        if cq.max_physic_offset > end:
            cq.truncate_dirty(end)
    table = store.commitlog.topic_queue_table
    table.clear()
    for cq in store.consume_queues():
        table[(cq.topic, cq.queue_id)] = cq.max_offset
    store.reput_offset = end
