"""The push-consumer benchmark worker (``mqbench push``).

Each worker process starts a push consumer of the run's (fresh) group with no subscription yet
and fetches the topic's route, so that its client instance heartbeats the topic's broker and
joins the group (``--api blocking``: through a pull consumer of another group sharing the
process's instance, as the blocking push consumer has no route call); it reports ready and
waits for the parent's go. The parent goes once the broker lists every worker in the group,
so every member's first allocation already sees them all and no queue changes hands during
the timed part. On go the worker subscribes the topic with a no-op handler that only counts
the filled messages it sees and notes when it saw the last one; it reports progress until the
parent says stop.

``--api aio`` uses :class:`client.aio.PushConsumer` with an ``async def`` handler (run in the
loop); ``--api blocking`` uses :class:`client.PushConsumer` with a sync handler (run in its
pool of worker threads).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import trio

import client
from client import aio
from client.bench.account import NO_ACCOUNT, Account
from client.bench.protocol import (
    PROGRESS_EVERY_S,
    QueueRanges,
    WorkerLink,
    now_ns,
    queue_key,
    run_worker,
)
from client.bench.workers import Api

FIRST = aio.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@dataclass(frozen=True, slots=True)
class PushSpec:
    """What one push-consumer worker does; ``ranges`` maps queues to the ``[begin, end)``
    offsets of the filled messages (only those are counted)."""

    namesrv: str
    topic: str
    group: str
    orderly: bool
    batch_size: int
    threads: int
    api: Api
    ranges: QueueRanges
    account: Account = NO_ACCOUNT

    def options(self) -> dict[str, Any]:
        """The push consumer's options."""
        return {
            "consume_from": FIRST,
            "orderly": self.orderly,
            "consume_thread_max": self.threads,
            "consume_message_batch_max_size": self.batch_size,
        }


class Tally:
    """The filled messages consumed so far, their body bytes and when the last one came."""

    def __init__(self, spec: PushSpec, *, threaded: bool) -> None:
        self.topic = spec.topic
        self.ranges = spec.ranges
        self.msgs = 0
        self.nbytes = 0
        self.last_ns = 0
        self.lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if threaded else contextlib.nullcontext()
        )

    def add(self, msgs: Sequence[aio.ReceivedMessage]) -> None:
        """Count the messages of ``msgs`` that the fill wrote."""
        n = nbytes = 0
        for m in msgs:
            r = self.ranges.get(queue_key(m.queue))
            if m.topic == self.topic and r is not None and r[0] <= m.queue_offset < r[1]:
                n += 1
                nbytes += len(m.body)
        if n:
            with self.lock:
                self.msgs += n
                self.nbytes += nbytes
                self.last_ns = now_ns()

    def result(self, start_ns: int, queues: list[int]) -> dict[str, Any]:
        """The worker's result: the span ends with the last counted message."""
        return {
            "pid": os.getpid(),
            "msgs": self.msgs,
            "bytes": self.nbytes,
            "queues": queues,
            "start_ns": start_ns,
            "end_ns": max(self.last_ns, start_ns),
            "latency": b"",  # no per-request latency: the handler is a no-op
        }


def _queue_ids(assignment: Sequence[aio.MessageQueue], topic: str) -> list[int]:
    return sorted(mq.queue_id for mq in assignment if mq.topic == topic)


def push_main(spec: PushSpec, conn: Connection) -> None:
    """A push-consumer worker process (``--api aio`` or ``blocking``)."""
    if spec.api == "aio":
        run_worker(conn, lambda link: trio.run(_push_aio, spec, link))
    else:
        run_worker(conn, lambda link: _push_blocking(spec, link))


async def _push_aio(spec: PushSpec, link: WorkerLink) -> dict[str, Any]:
    tally = Tally(spec, threaded=False)

    async def handle(msgs: list[aio.ReceivedMessage]) -> aio.ConsumeResult:
        tally.add(msgs)
        return aio.ConsumeResult.SUCCESS

    async with (
        spec.account.instance(spec.namesrv) as instance,
        aio.PushConsumer(spec.group, instance=instance, **spec.options()) as consumer,
    ):
        # knowing the topic's broker makes the instance heartbeat there: the group gains us
        await consumer.instance.topic_route(spec.topic)
        await link.ready_then_go()
        start = now_ns()
        consumer.subscribe(spec.topic, "*", handle)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.report_progress, lambda: tally.msgs)
            kind, _ = await link.receive()
            if kind != "stop":
                raise RuntimeError(f"expected stop, got {kind}")
            nursery.cancel_scope.cancel()
        queues = _queue_ids(consumer.assignment(), spec.topic)
    return tally.result(start, queues)


def _push_blocking(spec: PushSpec, link: WorkerLink) -> dict[str, Any]:
    tally = Tally(spec, threaded=True)

    def handle(msgs: list[client.ReceivedMessage]) -> client.ConsumeResult:
        tally.add(msgs)
        return client.ConsumeResult.SUCCESS

    config = spec.account.config(spec.namesrv)
    with (
        client.PushConsumer(spec.group, client_config=config, **spec.options()) as consumer,
        client.PullConsumer(group=spec.group + "_route", client_config=config) as probe,
    ):
        # the shared instance learns the topic's broker and heartbeats there: the group gains us
        probe.fetch_queues(spec.topic)
        link.send("ready")
        kind, _ = link.conn.recv()
        if kind != "go":
            raise RuntimeError(f"expected go, got {kind}")
        start = now_ns()
        consumer.subscribe(spec.topic, "*", handle)
        while not link.conn.poll(PROGRESS_EVERY_S):
            link.send("progress", tally.msgs)
        kind, _ = link.conn.recv()
        if kind != "stop":
            raise RuntimeError(f"expected stop, got {kind}")
        queues = _queue_ids(consumer.assignment(), spec.topic)
    return tally.result(start, queues)
