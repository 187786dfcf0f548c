"""The benchmark worker processes: producers, consumers and the latency pair.

Each ``*_main(spec, conn)`` is the target of a spawned process: it connects to the cluster,
warms up (routes, connections), reports ready, waits for the parent's go and then runs its
timed part, reporting progress and finally a result dict (see :mod:`client.bench.protocol`).
Latencies are per request, measured with ``time.perf_counter_ns`` around each call.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

import trio

import client
from client import aio
from client.bench.account import NO_ACCOUNT, Account
from client.bench.protocol import QueueRanges, WorkerLink, now_ns, queue_key, run_worker
from client.errors import TopicRouteError
from common.benchkit import LatencyRecorder

SendMode = Literal["sync", "batch", "oneway", "tx"]
Api = Literal["aio", "blocking"]

STALL_LIMIT_S = 30.0
"""A consumer that receives nothing for this long gives up."""
EPOLL_GRAIN_S = 0.001
"""The kernel's timer grain as trio sees it: ``epoll_wait`` takes whole milliseconds, so a
trio sleep shorter than this ends up to a millisecond late."""


async def pace_until(deadline: float) -> None:
    """Return at ``deadline`` (trio time), to tens of microseconds rather than to the
    millisecond: a trio sleep while more than :data:`EPOLL_GRAIN_S` remains, then a blocking
    ``time.sleep`` of the rest (a high-resolution timer; the worker has nothing else to run
    between two paced sends). A plain ``sleep_until`` would wake up to 1 ms late, and a paced
    producer would then send in bursts to catch up."""
    if deadline - trio.current_time() > EPOLL_GRAIN_S:
        await trio.sleep_until(deadline - EPOLL_GRAIN_S)
    rest = deadline - trio.current_time()
    if rest > 0:
        time.sleep(rest)  # noqa: ASYNC251 -- on purpose: a timer finer than epoll's


@dataclass(frozen=True, slots=True)
class ProduceSpec:
    """What one producer worker does."""

    namesrv: str
    topic: str
    group: str
    body_size: int
    mode: SendMode
    batch: int
    inflight: int
    count: int | None
    duration_s: float | None
    api: Api
    warmup: int
    account: Account = NO_ACCOUNT


class _Quota:
    """Messages left to send, shared by a worker's concurrent senders."""

    def __init__(self, count: int | None, duration_s: float | None) -> None:
        self.left = count
        self.deadline = None if duration_s is None else time.monotonic() + duration_s
        self.sent = 0
        self.lock = threading.Lock()

    def take(self, want: int) -> int:
        """How many of ``want`` messages to send next (0 = stop)."""
        with self.lock:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return 0
            if self.left is None:
                return want
            n = min(want, self.left)
            self.left -= n
            return n

    def done(self, n: int) -> None:
        """Count ``n`` messages sent."""
        with self.lock:
            self.sent += n


def _per_request(spec: ProduceSpec) -> int:
    return spec.batch if spec.mode == "batch" else 1


def produce_main(spec: ProduceSpec, conn: Connection) -> None:
    """A producer worker process (``--api aio`` or ``blocking``)."""
    if spec.api == "aio":
        run_worker(conn, lambda link: trio.run(_produce_aio, spec, link))
    else:
        run_worker(conn, lambda link: _produce_blocking(spec, link))


def _result(quota: _Quota, start: int, end: int, lat: LatencyRecorder) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "msgs": quota.sent,
        "requests": len(lat.samples),
        "start_ns": start,
        "end_ns": end,
        "latency": lat.to_bytes(),
    }


def _commit(msg: object, arg: object) -> aio.LocalTransactionState:
    """The benchmark's local transaction: an immediate commit."""
    return aio.LocalTransactionState.COMMIT_MESSAGE


async def _commit_async(msg: object, arg: object) -> aio.LocalTransactionState:
    """:func:`_commit` for the trio-native producer (no worker-thread hop)."""
    return aio.LocalTransactionState.COMMIT_MESSAGE


@asynccontextmanager
async def _aio_producer(spec: ProduceSpec) -> AsyncIterator[aio.Producer]:
    """The worker's producer, on an instance signing with ``spec.account``."""
    async with spec.account.instance(spec.namesrv) as instance:
        producer = (
            aio.TransactionProducer(spec.group, instance=instance, checker=_check_commit)
            if spec.mode == "tx"
            else aio.Producer(group=spec.group, instance=instance)
        )
        async with producer:
            yield producer


def _check_commit(msg: object) -> aio.LocalTransactionState:
    return aio.LocalTransactionState.COMMIT_MESSAGE


async def _produce_aio(spec: ProduceSpec, link: WorkerLink) -> dict[str, Any]:
    body = os.urandom(spec.body_size)
    async with _aio_producer(spec) as p:

        def op(n: int) -> Callable[[], Awaitable[object]]:
            if isinstance(p, aio.TransactionProducer):
                return lambda: p.send_in_transaction(aio.Message(spec.topic, body), _commit_async)
            if spec.mode == "batch":
                return lambda: p.send_batch([aio.Message(spec.topic, body) for _ in range(n)])
            if spec.mode == "oneway":
                return lambda: p.send_oneway(aio.Message(spec.topic, body))
            return lambda: p.send(aio.Message(spec.topic, body))

        per = _per_request(spec)
        for _ in range(max(1, spec.warmup // per)):
            await op(per)()
        await link.ready_then_go()
        quota = _Quota(spec.count, spec.duration_s)
        lat = LatencyRecorder()

        async def sender() -> None:
            while n := quota.take(per):
                call = op(n)
                t0 = time.perf_counter_ns()
                await call()
                lat.add(time.perf_counter_ns() - t0)
                quota.done(n)

        start = now_ns()
        async with trio.open_nursery() as outer:
            outer.start_soon(link.report_progress, lambda: quota.sent)
            async with trio.open_nursery() as senders:
                for _ in range(spec.inflight):
                    senders.start_soon(sender)
            end = now_ns()
            outer.cancel_scope.cancel()
    return _result(quota, start, end, lat)


def _produce_blocking(spec: ProduceSpec, link: WorkerLink) -> dict[str, Any]:
    body = os.urandom(spec.body_size)
    config = spec.account.config(spec.namesrv)
    p = (
        client.TransactionProducer(spec.group, client_config=config, checker=_check_commit)
        if spec.mode == "tx"
        else client.Producer(group=spec.group, client_config=config)
    )
    with p:

        def call(n: int) -> None:
            if isinstance(p, client.TransactionProducer):
                p.send_in_transaction(client.Message(spec.topic, body), _commit)
            elif spec.mode == "batch":
                p.send_batch([client.Message(spec.topic, body) for _ in range(n)])
            elif spec.mode == "oneway":
                p.send_oneway(client.Message(spec.topic, body))
            else:
                p.send(client.Message(spec.topic, body))

        per = _per_request(spec)
        for _ in range(max(1, spec.warmup // per)):
            call(per)
        link.send("ready")
        kind, _ = link.conn.recv()
        if kind != "go":
            raise RuntimeError(f"expected go, got {kind}")
        quota = _Quota(spec.count, spec.duration_s)
        lats = [LatencyRecorder() for _ in range(spec.inflight)]
        errors: list[BaseException] = []

        def sender(lat: LatencyRecorder) -> None:
            try:
                while n := quota.take(per):
                    t0 = time.perf_counter_ns()
                    call(n)
                    lat.add(time.perf_counter_ns() - t0)
                    quota.done(n)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the worker's main
                errors.append(exc)

        start = now_ns()
        threads = [threading.Thread(target=sender, args=(lat,)) for lat in lats]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            threads[0].join(0.25)
            link.send("progress", quota.sent)
        end = now_ns()
        if errors:
            raise errors[0]
    merged = LatencyRecorder.merged(lat.to_bytes() for lat in lats)
    return _result(quota, start, end, merged)


# -- consumers ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumeSpec:
    """What one consumer worker reads: ``ranges`` maps queues to ``[begin, end)`` offsets
    (None: from the queues' first offset to their end when the worker starts, at most
    ``limit`` messages)."""

    namesrv: str
    topic: str
    group: str
    index: int
    clients: int
    pull_batch: int
    ranges: QueueRanges | None
    limit: int | None
    account: Account = NO_ACCOUNT


ROUTE_WAIT_S = 10.0


async def topic_queues(c: aio.PullConsumer, topic: str) -> list[aio.MessageQueue]:
    """The topic's queues, waiting up to ``ROUTE_WAIT_S`` for a just-created topic's route."""
    with trio.move_on_after(ROUTE_WAIT_S):
        while True:
            try:
                return await c.fetch_queues(topic)
            except TopicRouteError:
                await trio.sleep(0.1)
    return await c.fetch_queues(topic)


def consume_main(spec: ConsumeSpec, conn: Connection) -> None:
    """A consumer worker process."""
    run_worker(conn, lambda link: trio.run(_consume, spec, link))


async def _positions(
    c: aio.PullConsumer, queues: list[aio.MessageQueue]
) -> dict[aio.MessageQueue, int]:
    """The start positions of the assigned ``queues``, once every fetch task has found its
    start offset (within ``ROUTE_WAIT_S``)."""
    with trio.fail_after(ROUTE_WAIT_S):
        while True:
            pos = {mq: c.position(mq) for mq in queues}
            if all(v is not None for v in pos.values()):
                return {mq: v for mq, v in pos.items() if v is not None}
            await trio.sleep(0.01)


async def _start_offsets(
    spec: ConsumeSpec, group: str, queues: list[aio.MessageQueue], where: aio.ConsumeFromWhere
) -> dict[aio.MessageQueue, int]:
    """Where a fresh ``group`` starts reading ``queues`` from ``where`` (first or last offset).

    A throw-away consumer with its own connections is used rather than ``seek_to_begin`` /
    ``seek_to_end``: a seek right after ``assign`` may cancel a fetch task in the middle of a
    send, which closes the connection under the other requests.
    """
    async with (
        spec.account.instance(spec.namesrv) as instance,
        aio.PullConsumer(
            group=group, instance=instance, consume_from=where, auto_commit=False
        ) as probe,
    ):
        probe.assign(queues)
        return await _positions(probe, queues)


async def _ranges(spec: ConsumeSpec, mine: list[aio.MessageQueue]) -> QueueRanges:
    """Each queue's ``[first, end)`` offsets now."""
    first = await _start_offsets(
        spec, spec.group + "_first", mine, aio.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    last = await _start_offsets(
        spec, spec.group + "_last", mine, aio.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    )
    return {queue_key(mq): (first[mq], last[mq]) for mq in mine}


async def _consume(spec: ConsumeSpec, link: WorkerLink) -> dict[str, Any]:
    async with (
        spec.account.instance(spec.namesrv) as instance,
        aio.PullConsumer(
            group=spec.group,
            instance=instance,
            consume_from=aio.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            pull_batch_size=spec.pull_batch,
            auto_commit=False,
        ) as c,
    ):
        queues = await topic_queues(c, spec.topic)
        mine = queues[spec.index :: spec.clients]
        by_key = spec.ranges if spec.ranges is not None else await _ranges(spec, mine)
        ranges = {mq: by_key.get(queue_key(mq), (0, 0)) for mq in mine}
        # the (fresh) group starts where the ranges do: no seek after assign
        await c.commit({mq: begin for mq, (begin, _) in ranges.items()})
        target = sum(e - b for b, e in ranges.values())
        if spec.limit is not None:
            target = min(target, spec.limit)
        await link.ready_then_go()
        lat = LatencyRecorder()
        got = nbytes = 0
        start = now_ns()
        c.assign(mine)
        async with trio.open_nursery() as n:
            n.start_soon(link.report_progress, lambda: got)
            while got < target:
                t0 = time.perf_counter_ns()
                msgs = await c.poll_for(STALL_LIMIT_S)
                lat.add(time.perf_counter_ns() - t0)
                if not msgs:
                    raise RuntimeError(f"no message for {STALL_LIMIT_S:g} s at {got}/{target}")
                for m in msgs:
                    if m.queue_offset < ranges[m.queue][1] and got < target:
                        got += 1
                        nbytes += len(m.body)
            end = now_ns()
            n.cancel_scope.cancel()
    return {
        "pid": os.getpid(),
        "msgs": got,
        "bytes": nbytes,
        "queues": [mq.queue_id for mq in mine],
        "start_ns": start,
        "end_ns": end,
        "latency": lat.to_bytes(),
    }


# -- the latency pair ----------------------------------------------------------------------------
STAMP = struct.Struct("<q")
"""The send time (``time.time_ns()``) at the start of each latency message; 0 marks warm-up."""

Position = tuple[str, int, int]
"""Where a message was stored: (broker name, queue id, queue offset)."""


def position(queue: aio.MessageQueue, queue_offset: int) -> Position:
    """The :data:`Position` of the message at ``queue_offset`` of ``queue``."""
    return (queue.broker_name, queue.queue_id, queue_offset)


@dataclass(frozen=True, slots=True)
class LatencySpec:
    """The latency producer's pace or the consumer's topic (both use every field they need)."""

    namesrv: str
    topic: str
    group: str
    body_size: int
    rate: float
    duration_s: float
    warmup: int
    grace_s: float = 10.0
    account: Account = NO_ACCOUNT


def latency_producer_main(spec: LatencySpec, conn: Connection) -> None:
    """Send at ``spec.rate`` messages/s for ``spec.duration_s``, each stamped with its send
    time; record lateness against the schedule and per-send latency."""
    run_worker(conn, lambda link: trio.run(_latency_producer, spec, link))


async def _latency_producer(spec: LatencySpec, link: WorkerLink) -> dict[str, Any]:
    pad = os.urandom(max(0, spec.body_size - STAMP.size))
    async with (
        spec.account.instance(spec.namesrv) as instance,
        aio.Producer(group=spec.group, instance=instance) as p,
    ):
        for _ in range(spec.warmup):
            await p.send(aio.Message(spec.topic, STAMP.pack(0) + pad))
        await link.ready_then_go()
        late, sends = LatencyRecorder(), LatencyRecorder()
        interval = 1.0 / spec.rate
        total = int(spec.rate * spec.duration_s)
        sent = 0
        positions: list[Position] = []
        start = now_ns()
        async with trio.open_nursery() as n:
            n.start_soon(link.report_progress, lambda: sent)
            t0 = trio.current_time()
            for i in range(total):
                scheduled = t0 + i * interval
                await pace_until(scheduled)
                late.add(int((trio.current_time() - scheduled) * 1e9))
                msg = aio.Message(spec.topic, STAMP.pack(time.time_ns()) + pad)
                s0 = time.perf_counter_ns()
                r = await p.send(msg)
                sends.add(time.perf_counter_ns() - s0)
                positions.append(position(r.queue, r.queue_offset))
                sent += 1
            end = now_ns()
            n.cancel_scope.cancel()
    return {
        "pid": os.getpid(),
        "msgs": sent,
        "start_ns": start,
        "end_ns": end,
        "lateness": late.to_bytes(),
        "latency": sends.to_bytes(),
        "positions": positions,
    }


def latency_consumer_main(spec: LatencySpec, conn: Connection) -> None:
    """Long-poll every queue of the topic from its end; record receive time minus the stamped
    send time of each message, until the parent's ``stop`` (with the positions of the messages
    the producer sent) and every one of them has arrived (or ``grace_s`` more seconds)."""
    run_worker(conn, lambda link: trio.run(_latency_consumer, spec, link))


class Arrivals:
    """The stamped messages a latency consumer received, by position.

    Only the producer's messages count: the parent names their positions once it has stopped
    (:meth:`expect`); anything else on the topic (another benchmark's messages, whose first
    bytes are no send time of this run) is left out, and a position received again is a
    duplicate. Before that, messages whose stamp is no time since ``since_ns`` (the consumer's
    ready, before the producer could send) are dropped at once.
    """

    def __init__(self, since_ns: int) -> None:
        self.since_ns = since_ns
        self.first: dict[Position, tuple[int, int]] = {}
        """Position -> (latency ns, body bytes) of its first arrival."""
        self.repeats: dict[Position, int] = {}
        self.expected: frozenset[Position] | None = None
        self.missing: set[Position] = set()

    def add(self, msg: aio.ReceivedMessage, now: int) -> None:
        """Note ``msg``, received at ``now`` (``time.time_ns()``)."""
        (stamp,) = STAMP.unpack_from(msg.body)
        if not self.since_ns <= stamp <= now:
            return  # warm-up (0) or not a send time of this run
        pos = position(msg.queue, msg.queue_offset)
        if pos in self.first:
            self.repeats[pos] = self.repeats.get(pos, 0) + 1
            return
        self.first[pos] = (now - stamp, len(msg.body))
        self.missing.discard(pos)

    def expect(self, positions: list[Position]) -> None:
        """The producer sent the messages at ``positions``."""
        self.expected = frozenset(positions)
        self.missing = set(self.expected - self.first.keys())

    @property
    def complete(self) -> bool:
        """Every expected message has arrived."""
        return self.expected is not None and not self.missing

    def received(self) -> int:
        """How many of the producer's messages arrived (before :meth:`expect`: every one)."""
        if self.expected is None:
            return len(self.first)
        return len(self.expected) - len(self.missing)

    def result(self) -> dict[str, Any]:
        """Messages, bytes and latencies of the producer's messages; lost, duplicated and
        foreign (not the producer's) messages counted."""
        expected = self.expected if self.expected is not None else frozenset()
        lat = LatencyRecorder()
        nbytes = 0
        for pos, (latency_ns, size) in self.first.items():
            if pos in expected:
                lat.add(latency_ns)
                nbytes += size
        return {
            "msgs": len(lat.samples),
            "bytes": nbytes,
            "expected": len(expected),
            "lost": len(expected) - len(lat.samples),
            "duplicates": sum(n for pos, n in self.repeats.items() if pos in expected),
            "foreign": sum(1 for pos in self.first if pos not in expected),
            "latency": lat.to_bytes(),
        }


async def _latency_consumer(spec: LatencySpec, link: WorkerLink) -> dict[str, Any]:
    async with (
        spec.account.instance(spec.namesrv) as instance,
        aio.PullConsumer(group=spec.group, instance=instance, auto_commit=False) as c,
    ):
        queues = await topic_queues(c, spec.topic)
        c.assign(queues)  # a fresh group starts at the end (CONSUME_FROM_LAST_OFFSET)
        await _positions(c, queues)
        arrivals = Arrivals(now_ns())
        await link.ready_then_go()
        stop = trio.Event()

        async def wait_stop() -> None:
            kind, payload = await link.receive()
            if kind != "stop":
                raise RuntimeError(f"expected stop, got {kind}")
            arrivals.expect(payload)
            stop.set()

        start = now_ns()
        async with trio.open_nursery() as n:
            n.start_soon(wait_stop)
            n.start_soon(link.report_progress, arrivals.received)
            with trio.CancelScope() as grace:
                while not arrivals.complete:
                    if stop.is_set() and grace.deadline == float("inf"):
                        grace.deadline = trio.current_time() + spec.grace_s
                    for m in await c.poll_for(0.2):
                        arrivals.add(m, time.time_ns())
            end = now_ns()
            n.cancel_scope.cancel()
    return {"pid": os.getpid(), "start_ns": start, "end_ns": end, **arrivals.result()}
