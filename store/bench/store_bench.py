"""The store workloads: put, read, recover and backlog, on real files with default sizes.

Every workload returns a result object with a ``to_dict()`` for JSON output. Timed sections
cover only store work: generating messages and updating the progress display happen between
timed sections, while nothing else runs (the event loop is blocked then, so the reput loop does
no work off the clock either).

The put workload's headline mode drives the store as the broker's send handler does: under
trio, with :class:`~store.services.StoreServices` running (reput, flush and retention loops),
each put made through ``StoreServices.put_messages_now`` (awaited only when it must wait for a
SYNC_FLUSH) and followed by ``trio.lowlevel.checkpoint()`` so the reput loop gets to dispatch.
The run ends only once every message is dispatched to its consume queue and the index.
"""

from __future__ import annotations

import gc
import shutil
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import trio

from common.record import MessageRecord
from store.bench.workload import (
    GIB,
    LatencyRecorder,
    MessageFactory,
    NullProgress,
    ProgressHook,
    check_disk_space,
    estimate_store_bytes,
    evict_from_page_cache,
    rss_anon_bytes,
)
from store.checkpoint import IndexMark, StoreCheckpoint
from store.config import FlushDiskType, StoreConfig
from store.index_file import HASH_SLOT_SIZE, HEADER_SIZE, INDEX_SIZE, index_file_size
from store.message_store import MessageStore
from store.services import StoreServices
from store.status import GetStatus, PutResult, PutStatus

PutMode = Literal["trio", "sync"]
RecoverVariant = Literal["clean", "crash", "crash-index", "crash-rescan", "crash-rebuild"]
RECOVER_VARIANTS: tuple[RecoverVariant, ...] = (
    "clean",
    "crash",
    "crash-index",
    "crash-rescan",
    "crash-rebuild",
)
INDEX_ENTRIES_LOST = 200_000
"""``crash-index``: index entries written after the last flush (about a second of traffic)."""
MB = 1_000_000


class BenchError(RuntimeError):
    """The store did not do what the workload needs (a failed put, a missing message)."""


def store_config(root: Path, commitlog_file_size: int = GIB) -> StoreConfig:
    """Default store settings (ASYNC_FLUSH) rooted at ``root``."""
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=commitlog_file_size,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
    )


def _needed_bytes(cfg: StoreConfig, messages: int, record_size: int, queues: int) -> int:
    return estimate_store_bytes(
        messages,
        record_size,
        commitlog_file_size=cfg.mapped_file_size_commit_log,
        queues=queues,
        cq_file_size=cfg.mapped_file_size_consume_queue,
        index_file_bytes=index_file_size(cfg.max_hash_slot_num, cfg.max_index_num),
        index_entries_per_file=cfg.max_index_num,
    )


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


# -- instrumentation -----------------------------------------------------------------------
class DispatchTimer:
    """The time and calls of a store's dispatch (reput) step since this was made, from the
    store's own counters (``MessageStore.dispatch_ns`` and ``dispatch_calls``)."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._ns0, self._calls0 = store.dispatch_ns, store.dispatch_calls

    @property
    def ns(self) -> int:
        """Nanoseconds spent dispatching since this timer was made."""
        return self._store.dispatch_ns - self._ns0

    @property
    def calls(self) -> int:
        """Dispatch calls that dispatched something since this timer was made."""
        return self._store.dispatch_calls - self._calls0


@dataclass(slots=True)
class PutParams:
    """How the put workload drives the store."""

    count: int = 1_000_000
    batch: int = 32
    body_size: int = 128
    queues: int = 4
    mode: PutMode = "trio"
    yield_every: int = 1
    commitlog_file_size: int = GIB
    chunk: int = 8_192


@dataclass(slots=True)
class PutRunResult:
    """Outcome of one put run; ``seconds`` is the timed total including the final dispatch."""

    params: PutParams
    messages: int = 0
    bytes: int = 0
    calls: int = 0
    seconds: float = 0.0
    put_call_seconds: float = 0.0
    yield_seconds: float = 0.0
    drain_seconds: float = 0.0
    dispatch_seconds: float = 0.0
    dispatch_calls: int = 0
    checkpoint_ns: float = 0.0
    latency_us: dict[str, float] = field(default_factory=dict)

    @property
    def msgs_per_s(self) -> float:
        """Messages stored and dispatched per second."""
        return _rate(self.messages, self.seconds)

    @property
    def mb_per_s(self) -> float:
        """Commitlog megabytes (10^6) written per second."""
        return _rate(self.bytes / MB, self.seconds)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view, with the time breakdown per message in microseconds."""
        per_msg = 1e6 / self.messages if self.messages else 0.0
        scheduler = self.yield_seconds - self.dispatch_seconds
        if self.params.mode == "sync":
            scheduler = 0.0
        return {
            "workload": "put",
            "params": asdict(self.params),
            "messages": self.messages,
            "bytes": self.bytes,
            "calls": self.calls,
            "seconds": round(self.seconds, 4),
            "msgs_per_s": round(self.msgs_per_s),
            "mb_per_s": round(self.mb_per_s, 2),
            "latency_us": self.latency_us,
            "breakdown_us_per_msg": {
                "put_call": round(self.put_call_seconds * per_msg, 3),
                "dispatch": round(self.dispatch_seconds * per_msg, 3),
                "scheduler": round(max(0.0, scheduler) * per_msg, 3),
                "loop_other": round(
                    max(
                        0.0,
                        self.seconds
                        - self.put_call_seconds
                        - self.dispatch_seconds
                        - max(0.0, scheduler),
                    )
                    * per_msg,
                    3,
                ),
            },
            "dispatch_calls": self.dispatch_calls,
            "msgs_per_dispatch": round(self.messages / self.dispatch_calls, 1)
            if self.dispatch_calls
            else 0,
            "checkpoint_ns_idle": round(self.checkpoint_ns, 1),
            "yield_seconds": round(self.yield_seconds, 4),
            "drain_seconds": round(self.drain_seconds, 4),
        }


ChunkHook = Callable[[MessageStore, int], None]
"""Called as ``hook(store, messages_done)`` between timed chunks."""


def run_put(
    root: Path,
    params: PutParams,
    progress: ProgressHook | None = None,
    *,
    on_chunk: ChunkHook | None = None,
    on_done: ChunkHook | None = None,
    label: str = "put",
) -> PutRunResult:
    """Put ``params.count`` messages into a fresh store at ``root`` and dispatch them all.

    ``on_chunk`` is called between timed chunks, ``on_done`` once everything is dispatched and
    checked, before the store is closed; both off the clock.
    """
    progress = progress or NullProgress()
    factory = MessageFactory(body_size=params.body_size, queues=params.queues)
    cfg = store_config(root, params.commitlog_file_size)
    check_disk_space(root, _needed_bytes(cfg, params.count, factory.record_size(), params.queues))
    result = PutRunResult(params)
    latency = LatencyRecorder()
    store = MessageStore(cfg).open()
    try:
        timer = DispatchTimer(store)
        chunks = factory.chunks(params.count, params.batch, params.chunk)
        progress.phase(f"{label}: batch {params.batch}, {params.mode}", params.count)
        if params.mode == "trio":
            trio.run(_drive_trio, store, chunks, params, result, latency, progress, on_chunk)
        else:
            _drive_sync(store, chunks, result, latency, progress, on_chunk)
        result.dispatch_seconds = timer.ns / 1e9
        result.dispatch_calls = timer.calls
        result.latency_us = latency.percentiles_us()
        result.put_call_seconds = sum(latency.samples) / 1e9
        _verify_puts(store, factory, params.count)
        if on_done is not None:
            on_done(store, result.messages)
    finally:
        store.close()
    return result


async def _checkpoint_cost(n: int = 20_000) -> float:
    """Nanoseconds one ``trio.lowlevel.checkpoint()`` takes when nothing else is runnable."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        await trio.lowlevel.checkpoint()
    return (time.perf_counter_ns() - t0) / n


async def _drive_trio(
    store: MessageStore,
    chunks: Iterable[list[list[MessageRecord]]],
    params: PutParams,
    result: PutRunResult,
    latency: LatencyRecorder,
    progress: ProgressHook,
    on_chunk: ChunkHook | None,
) -> None:
    services = StoreServices(store)
    every = max(1, params.yield_every)
    checkpoint = trio.lowlevel.checkpoint
    clock = time.perf_counter_ns
    add = latency.samples.append  # no method call per put: the run's clock covers the loop
    ok = PutStatus.PUT_OK
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        result.checkpoint_ns = await _checkpoint_cost()
        put = services.put_messages_now
        for chunk in chunks:  # making the chunk happens here, off the clock
            start = clock()
            yield_ns = 0
            wrote = 0
            for k, batch in enumerate(chunk, 1):
                t0 = clock()
                r = put(batch)
                if not isinstance(r, PutResult):  # SYNC_FLUSH: answered once flushed
                    r = await r
                t1 = clock()
                add(t1 - t0)
                if r.status is not ok:
                    raise BenchError(f"put failed: {r.status.name} {r.remark}")
                wrote += r.wrote_bytes
                if k % every == 0:
                    await checkpoint()
                    yield_ns += clock() - t1
            result.seconds += (clock() - start) / 1e9
            result.yield_seconds += yield_ns / 1e9
            result.bytes += wrote
            result.calls += len(chunk)
            result.messages += sum(len(b) for b in chunk)
            progress.advance(result.messages)
            if on_chunk is not None:
                on_chunk(store, result.messages)
        start = clock()
        while store.dispatch_behind or store.reput_offset < store.commitlog.max_offset:
            await checkpoint()
        drain = (clock() - start) / 1e9
        result.drain_seconds = drain
        result.seconds += drain
        result.yield_seconds += drain
        nursery.cancel_scope.cancel()


def _drive_sync(
    store: MessageStore,
    chunks: Iterable[list[list[MessageRecord]]],
    result: PutRunResult,
    latency: LatencyRecorder,
    progress: ProgressHook,
    on_chunk: ChunkHook | None,
) -> None:
    clock = time.perf_counter_ns
    add = latency.samples.append  # no method call per put: the run's clock covers the loop
    put = store.put_messages
    dispatch = store.dispatch_pending
    ok = PutStatus.PUT_OK
    for chunk in chunks:
        start = clock()
        wrote = 0
        for batch in chunk:
            t0 = clock()
            r = put(batch)
            add(clock() - t0)
            if r.status is not ok:
                raise BenchError(f"put failed: {r.status.name} {r.remark}")
            wrote += r.wrote_bytes
            dispatch()
        result.seconds += (clock() - start) / 1e9
        result.bytes += wrote
        result.calls += len(chunk)
        result.messages += sum(len(b) for b in chunk)
        progress.advance(result.messages)
        if on_chunk is not None:
            on_chunk(store, result.messages)
    start = clock()
    while dispatch():
        pass
    result.drain_seconds = (clock() - start) / 1e9
    result.seconds += result.drain_seconds


def _verify_puts(store: MessageStore, factory: MessageFactory, count: int) -> None:
    """Every message is in a consume queue and the first and last are found by key."""
    queued = sum(store.get_max_offset_in_queue(factory.topic, q) for q in range(factory.queues))
    if queued != count:
        raise BenchError(f"{queued} messages in consume queues, expected {count}")
    if not store.config.message_index_enable or count == 0:
        return
    for i in (0, count - 1):
        key = f"ORD{i:012d}"
        found = store.query_messages(factory.topic, key, 4, 0, 1 << 62)
        if len(found.records) != 1:
            raise BenchError(f"key {key} found {len(found.records)} times in the index")


def fill_store(
    store: MessageStore,
    factory: MessageFactory,
    count: int,
    *,
    batch: int = 32,
    progress: ProgressHook | None = None,
    description: str = "fill",
) -> int:
    """Put and dispatch ``count`` messages synchronously (untimed set-up); return bytes."""
    progress = progress or NullProgress()
    progress.phase(description, count)
    wrote = done = 0
    for chunk in factory.chunks(count, batch, 65_536):
        for b in chunk:
            r = store.put_messages(b)
            if r.status is not PutStatus.PUT_OK:
                raise BenchError(f"put failed: {r.status.name} {r.remark}")
            wrote += r.wrote_bytes
            store.dispatch_pending()
            done += len(b)
        progress.advance(done)
    while store.dispatch_pending():
        pass
    return wrote


# -- read ----------------------------------------------------------------------------------
@dataclass(slots=True)
class ReadResult:
    """Outcome of one sequential read of a pre-filled queue."""

    count: int
    body_size: int
    max_msgs: int
    messages: int = 0
    bytes: int = 0
    calls: int = 0
    seconds: float = 0.0
    latency_us: dict[str, float] = field(default_factory=dict)

    @property
    def msgs_per_s(self) -> float:
        """Messages read per second."""
        return _rate(self.messages, self.seconds)

    @property
    def mb_per_s(self) -> float:
        """Record megabytes (10^6) read per second."""
        return _rate(self.bytes / MB, self.seconds)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "workload": "read",
            "params": {"count": self.count, "body_size": self.body_size, "max": self.max_msgs},
            "messages": self.messages,
            "bytes": self.bytes,
            "calls": self.calls,
            "seconds": round(self.seconds, 4),
            "msgs_per_s": round(self.msgs_per_s),
            "mb_per_s": round(self.mb_per_s, 2),
            "latency_us": self.latency_us,
        }


def run_read(
    root: Path,
    count: int = 1_000_000,
    *,
    body_size: int = 128,
    max_msgs: int = 32,
    commitlog_file_size: int = GIB,
    progress: ProgressHook | None = None,
) -> ReadResult:
    """Fill one queue with ``count`` messages, then read it from offset 0 to the end."""
    progress = progress or NullProgress()
    factory = MessageFactory(body_size=body_size, queues=1)
    cfg = store_config(root, commitlog_file_size)
    check_disk_space(root, _needed_bytes(cfg, count, factory.record_size(), 1))
    result = ReadResult(count, body_size, max_msgs)
    latency = LatencyRecorder()
    with MessageStore(cfg) as store:
        fill_store(store, factory, count, progress=progress, description="read: fill")
        progress.phase(f"read: get_messages max {max_msgs}", count)
        get = store.get_messages
        topic = factory.topic
        clock = time.perf_counter_ns
        add = latency.add
        found = GetStatus.FOUND
        offset = 0
        segment = max(max_msgs, 32_768)
        while offset < count:
            mark = min(count, offset + segment)
            start = clock()
            n = nbytes = calls = 0
            while offset < mark:
                t0 = clock()
                g = get(topic, 0, offset, max_msgs)
                add(clock() - t0)
                if g.status is not found:
                    raise BenchError(f"read at {offset}: {g.status.name}")
                n += len(g.records)
                nbytes += g.total_size
                calls += 1
                offset = g.next_begin_offset
            result.seconds += (clock() - start) / 1e9
            result.messages += n
            result.bytes += nbytes
            result.calls += calls
            progress.advance(offset)
        if result.messages != count:
            raise BenchError(f"read {result.messages} messages, expected {count}")
    result.latency_us = latency.percentiles_us()
    return result


# -- recover -------------------------------------------------------------------------------
@dataclass(slots=True)
class RecoverTiming:
    """One timed ``MessageStore.open()``."""

    variant: RecoverVariant
    seconds: float
    scanned_bytes: int
    cold: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "variant": self.variant,
            "seconds": round(self.seconds, 4),
            "scanned_bytes": self.scanned_bytes,
            "scan_mb_per_s": round(_rate(self.scanned_bytes / MB, self.seconds), 1),
            "cold": self.cold,
        }


@dataclass(slots=True)
class RecoverResult:
    """Outcome of the recovery workload: the fill, then one timed open per variant."""

    size: int
    body_size: int
    messages: int = 0
    bytes: int = 0
    fill_seconds: float = 0.0
    timings: list[RecoverTiming] = field(default_factory=list)

    @property
    def crash_seconds(self) -> float:
        """The headline: the slower of the ``crash`` and ``crash-rescan`` recoveries.

        ``crash-rebuild`` (consume queues and index lost as well) is reported, not judged.
        """
        judged = ("crash", "crash-index", "crash-rescan")
        crash = [t.seconds for t in self.timings if t.variant in judged]
        return max(crash or [t.seconds for t in self.timings], default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "workload": "recover",
            "params": {"size": self.size, "body_size": self.body_size},
            "messages": self.messages,
            "bytes": self.bytes,
            "fill_seconds": round(self.fill_seconds, 3),
            "variants": [t.to_dict() for t in self.timings],
        }


def run_recover(
    root: Path,
    size: int = GIB,
    *,
    body_size: int = 128,
    variants: Sequence[RecoverVariant] = RECOVER_VARIANTS,
    cold: bool = False,
    commitlog_file_size: int = GIB,
    progress: ProgressHook | None = None,
) -> RecoverResult:
    """Fill a store to ``size`` commitlog bytes, then time ``open()`` after each simulated crash.

    Variants: ``clean`` (normal shutdown), ``crash`` (abort file left, checkpoint as last
    flushed), ``crash-index`` (also the index's last :data:`INDEX_ENTRIES_LOST` entries lost
    while write-back saved its header and slots: recovery cuts the index back to the
    checkpoint's mark and indexes those records again), ``crash-rescan`` (also the checkpoint's
    dispatched offset reset to 0: the whole commitlog is walked), ``crash-rebuild`` (also
    consume queues and index lost: everything is re-dispatched). ``cold`` drops the store's
    files from the page cache before each open.
    """
    progress = progress or NullProgress()
    factory = MessageFactory(body_size=body_size, queues=4)
    cfg = store_config(root, commitlog_file_size)
    rec_size = factory.record_size()
    count = (size - 8) // rec_size
    check_disk_space(root, _needed_bytes(cfg, count, rec_size, factory.queues))
    result = RecoverResult(size, body_size, messages=count)
    store = MessageStore(cfg).open()
    t0 = time.perf_counter()
    try:
        result.bytes = fill_store(
            store, factory, count, progress=progress, description="recover: fill"
        )
        end = store.commitlog.max_offset
    finally:
        store.close()
    result.fill_seconds = time.perf_counter() - t0
    progress.phase("recover: timed opens", len(variants))
    for i, variant in enumerate(variants):
        scanned = _prepare_crash(cfg, variant, end)
        if cold:
            evict_from_page_cache(root)
        t0 = time.perf_counter()
        store = MessageStore(cfg).open()
        seconds = time.perf_counter() - t0
        try:
            _verify_recovered(store, factory, count, end)
        finally:
            store.close()
        result.timings.append(RecoverTiming(variant, seconds, scanned, cold))
        progress.advance(i + 1)
    return result


def _prepare_crash(cfg: StoreConfig, variant: RecoverVariant, end: int) -> int:
    """Make the closed store at ``cfg`` look as ``variant`` says; return bytes recovery walks.

    Recovery walks from the start of the commitlog file holding the checkpoint's dispatched
    offset to ``end``, the end of the records.
    """
    if variant != "clean":
        cfg.abort_path.write_text("0")
    cp = StoreCheckpoint(cfg.checkpoint_path)
    try:
        if variant in ("crash-rescan", "crash-rebuild"):
            cp.dispatched_phy_offset = 0
        if variant == "crash-index":
            cp.index_mark = _lose_newest_index_entries(cfg, cp, INDEX_ENTRIES_LOST)
        dispatched = cp.dispatched_phy_offset
    finally:
        cp.close()
    if variant == "crash-rebuild":
        shutil.rmtree(cfg.consume_queue_dir, ignore_errors=True)
        shutil.rmtree(cfg.index_dir, ignore_errors=True)
    start = dispatched - dispatched % cfg.mapped_file_size_commit_log
    return max(0, end - start)


def _lose_newest_index_entries(cfg: StoreConfig, cp: StoreCheckpoint, lost: int) -> IndexMark:
    """Zero the newest ``lost`` entries of the index file the checkpoint marks (its header and
    slots stay, as write-back saved them); return the mark from before those entries."""
    mark = cp.index_mark
    if mark is None or mark.index_count <= 1:
        raise BenchError("the checkpoint marks no index entries")
    path = cfg.index_dir / f"{mark.file_name:017d}"
    keep = max(1, mark.index_count - lost)
    entries_at = HEADER_SIZE + cfg.max_hash_slot_num * HASH_SLOT_SIZE
    with open(path, "r+b") as f:
        f.seek(entries_at + (keep - 1) * INDEX_SIZE + 4)
        (end_phy,) = struct.unpack(">q", f.read(8)) if keep > 1 else (-1,)
        f.seek(entries_at + keep * INDEX_SIZE)
        f.write(bytes((mark.index_count - keep) * INDEX_SIZE))
    return IndexMark(mark.file_name, keep, end_phy)


def _verify_recovered(store: MessageStore, factory: MessageFactory, count: int, end: int) -> None:
    if store.commitlog.max_offset != end:
        raise BenchError(
            f"commitlog ends at {store.commitlog.max_offset} after recovery, not {end}"
        )
    queued = sum(store.get_max_offset_in_queue(factory.topic, q) for q in range(factory.queues))
    if queued != count:
        raise BenchError(f"{queued} messages in consume queues after recovery, expected {count}")


# -- backlog -------------------------------------------------------------------------------
@dataclass(slots=True)
class BacklogResult:
    """Anonymous memory while a backlog of ``messages`` is written and after."""

    put: PutRunResult
    rss_anon_start: int = 0
    rss_anon_peak: int = 0
    rss_anon_after: int = 0
    rss_anon_after_gc: int = 0
    max_pending_dispatch: int = 0
    samples: list[tuple[int, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (memory in MiB)."""
        mib = 1 << 20
        put = self.put.to_dict()
        return {
            "workload": "backlog",
            "params": put["params"],
            "messages": self.put.messages,
            "bytes": self.put.bytes,
            "seconds": put["seconds"],
            "msgs_per_s": put["msgs_per_s"],
            "mb_per_s": put["mb_per_s"],
            "rss_anon_mib": {
                "start": round(self.rss_anon_start / mib, 1),
                "peak": round(self.rss_anon_peak / mib, 1),
                "after": round(self.rss_anon_after / mib, 1),
                "after_gc": round(self.rss_anon_after_gc / mib, 1),
                "growth": round((self.rss_anon_peak - self.rss_anon_start) / mib, 1),
            },
            "max_pending_dispatch": self.max_pending_dispatch,
            "samples_mib": [(n, round(b / mib, 1)) for n, b in self.samples],
        }


def run_backlog(
    root: Path,
    params: PutParams,
    progress: ProgressHook | None = None,
    *,
    samples: int = 50,
) -> BacklogResult:
    """Put ``params.count`` messages with no consumer, sampling RssAnon between chunks.

    "After" is measured once everything is dispatched, with the store still open (a broker
    holding a backlog), then again after a full garbage collection.
    """
    gc.collect()
    result = BacklogResult(PutRunResult(params))
    result.rss_anon_start = rss_anon_bytes()
    result.rss_anon_peak = result.rss_anon_start
    every = max(1, params.count // samples)
    next_sample = every

    def sample(store: MessageStore, done: int) -> None:
        nonlocal next_sample
        rss = rss_anon_bytes()
        result.rss_anon_peak = max(result.rss_anon_peak, rss)
        result.max_pending_dispatch = max(result.max_pending_dispatch, store.dispatch_behind)
        if done >= next_sample:
            result.samples.append((done, rss))
            next_sample += every

    def after(store: MessageStore, done: int) -> None:
        result.rss_anon_after = rss_anon_bytes()
        result.rss_anon_peak = max(result.rss_anon_peak, result.rss_anon_after)
        gc.collect()
        result.rss_anon_after_gc = rss_anon_bytes()

    result.put = run_put(root, params, progress, on_chunk=sample, on_done=after, label="backlog")
    return result
