"""Reads of a BatchCQ queue: ``MessageStore.get_messages`` once it found a batch consume queue.

Offsets are message offsets; a read returns whole records, starting with the one holding the
offset asked for (so the first may start below it: the reader drops inner messages below what
it asked for). As RocketMQ's ``DefaultMessageStore.getMessage`` with ``isTheBatchFull``:

- ``max_msgs`` counts messages: a record is added while the messages so far plus its batch size
  stay within ``max_msgs`` and the messages so far are fewer than
  ``maxTransferCountOnMessageInMemory``; the bytes so far plus its size stay within
  ``max_bytes`` and ``maxTransferBytesOnMessageInMemory``. The first record always goes.
- Tag codes: a unit whose batch holds more than one message always passes (the reader filters
  the inner messages by their tags); a batch of one is filtered by its code, as in a SimpleCQ.
- ``record_filter`` (SQL92) is asked about the outer record.
- ``next_begin_offset`` is the end of the last batch looked at; ``queue_offsets`` holds each
  record's base offset. As in the SimpleCQ read, an answer never mixes found records with
  records whose data is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from store.batch_consume_queue import BCQ_STORE_UNIT_SIZE, BatchConsumeQueue
from store.status import GetResult, GetStatus

if TYPE_CHECKING:
    from store.message_store import MessageStore

_UNITS_PER_READ = 16000 // BCQ_STORE_UNIT_SIZE


def read_batch_queue(
    store: MessageStore,
    cq: BatchConsumeQueue,
    offset: int,
    max_msgs: int,
    max_bytes: int | None,
    tag_codes: Iterable[int] | None,
    record_filter: Callable[[bytes], bool] | None,
) -> GetResult:
    """Read whole records of ``cq`` from the one holding ``offset`` (``min_offset <= offset <
    max_offset``, checked by the caller); see the module docstring."""
    lo, hi = cq.min_offset, cq.max_offset
    units = cq.read_batch_units(offset, max(_UNITS_PER_READ, max_msgs))
    if units is None:  # retention moved the minimum meanwhile
        return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
    cfg = store.config
    max_msgs = max(1, max_msgs)
    transfer_count = cfg.max_transfer_count_on_message_in_memory
    byte_limit = cfg.max_transfer_bytes_on_message_in_memory
    if max_bytes is not None:
        byte_limit = min(byte_limit, max_bytes)
    codes = None if tag_codes is None else frozenset(tag_codes)
    records: list[bytes] = []
    queue_offsets: list[int] = []
    count = total = 0
    next_offset = offset
    cl_min = store.commitlog.min_offset
    removed = False
    read = store._record_reader()
    for phys, size, code, _, base, batch in units:
        if records and (
            count + batch > max_msgs or count >= transfer_count or total + size > byte_limit
        ):
            break
        if batch == 1 and codes is not None and code not in codes:
            next_offset = base + 1
            continue
        data = read(phys, size) if phys >= cl_min else None
        if data is None:
            if records:  # never FOUND with gone records skipped (see get_messages)
                break
            removed = True
        elif removed:
            break
        elif record_filter is None or record_filter(data):
            records.append(data)
            queue_offsets.append(base)
            count += batch
            total += size
        next_offset = base + batch
    return store._read_result(records, queue_offsets, total, removed, next_offset, lo, hi, count)
