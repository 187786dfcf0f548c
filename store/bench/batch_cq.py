"""``mqbench store batchcq``: what a 32-message batch costs the store as one inner-batch record
(a BatchCQ topic) against 32 ordinary records (a SimpleCQ topic), per message.

Both sides put ``batches`` batches of ``batch`` messages of ``body_size`` bytes into a fresh
store (default sizes, ASYNC_FLUSH, no services), then dispatch everything. Put and dispatch are
timed apart. The ordinary side puts each batch with one ``put_messages`` call (the broker's
SEND_BATCH_MESSAGE); the BatchCQ side puts one record whose body stands for the batch (the
broker's msgpack list, built here once per batch, outside the timing) with ``put_message``.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common.batch_body import encode_batch_entries
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord
from common.topic_attributes import CQType
from store.bench.store_bench import BenchError, store_config
from store.message_store import MessageStore
from store.status import PutStatus

_INNER = MessageSysFlag.INNER_BATCH_FLAG | MessageSysFlag.NEED_UNWRAP_FLAG


@dataclass(frozen=True, slots=True)
class BatchCqResult:
    """Microseconds per message of one side."""

    kind: str
    messages: int
    put_us_per_msg: float
    dispatch_us_per_msg: float


def _ordinary_batch(topic: str, batch: int, body: bytes, n: int) -> list[MessageRecord]:
    return [
        MessageRecord(topic, body, properties={MessageConst.UNIQ_KEY: f"u{n}-{i}"})
        for i in range(batch)
    ]


def _inner_batch(topic: str, batch: int, body: bytes, n: int) -> MessageRecord:
    packed = encode_batch_entries(
        (body, {MessageConst.UNIQ_KEY: f"u{n}-{i}"}, None) for i in range(batch)
    )
    props = {MessageConst.PROPERTY_INNER_NUM: str(batch), MessageConst.UNIQ_KEY: f"b{n}"}
    return MessageRecord(topic, packed, properties=props, sys_flag=_INNER)


def _run_side(
    root: Path, *, inner: bool, batches: int, batch: int, body_size: int
) -> BatchCqResult:
    """Put then dispatch one side into a fresh store under ``root``."""
    body = b"x" * body_size
    topic = "BenchBatchCQ" if inner else "BenchSimpleCQ"
    store = MessageStore(store_config(root))
    store.set_queue_type(topic, CQType.BATCH_CQ if inner else CQType.SIMPLE_CQ)
    store.open()
    try:
        if inner:
            records = [_inner_batch(topic, batch, body, n) for n in range(batches)]
            started = time.perf_counter()
            for record in records:
                if store.put_message(record).status is not PutStatus.PUT_OK:
                    raise BenchError("an inner-batch put failed")
        else:
            lists = [_ordinary_batch(topic, batch, body, n) for n in range(batches)]
            started = time.perf_counter()
            for msgs in lists:
                if store.put_messages(msgs).status is not PutStatus.PUT_OK:
                    raise BenchError("a batch put failed")
        put_s = time.perf_counter() - started
        started = time.perf_counter()
        while store.dispatch_pending():
            pass
        dispatch_s = time.perf_counter() - started
        if store.get_max_offset_in_queue(topic, 0) != batches * batch:
            raise BenchError("the queue does not hold every message")
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    messages = batches * batch
    return BatchCqResult(
        "BatchCQ inner batch" if inner else "SimpleCQ batch",
        messages,
        put_s * 1e6 / messages,
        dispatch_s * 1e6 / messages,
    )


def run_batch_cq(
    directory: Path, *, batches: int = 20_000, batch: int = 32, body_size: int = 128
) -> list[BatchCqResult]:
    """Both sides, ordinary first; each in its own store under ``directory``."""
    sizes = {"batches": batches, "batch": batch, "body_size": body_size}
    return [
        _run_side(directory / f"side-{i}", inner=inner, **sizes)
        for i, inner in enumerate((False, True))
    ]


def as_rows(results: list[BatchCqResult]) -> list[dict[str, object]]:
    """The results as plain dicts (for ``--json``)."""
    return [asdict(r) for r in results]
