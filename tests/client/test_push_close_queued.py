"""Closing an orderly push consumer whose handler threads are all busy: a queue's batch still
waiting for a worker thread when the close drops its queue is not handed to the handler (its
queue is no longer this member's: RocketMQ's ``ConsumeRequest`` returns at once for a dropped
process queue). It used to run once a thread freed up, after the offsets were persisted, its
outcome dropped: consumed here and again by the next owner."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from client.aio import ConsumeFrom, Message, MessageQueue, Producer, PushConsumer
from client.consume_service import ConsumeResult, QueueSlot
from client.message import ReceivedMessage
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import cluster

GATE_S = 60.0
"""Longest the stuck handler waits (the test opens the gate when it ends)."""


class FirstCallStuck:
    """Blocks in its first call until ``gate``; records the queue of every call."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.stuck = threading.Event()
        self.queues: list[int] = []

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.queues.append(msgs[0].queue.queue_id)
        if not self.stuck.is_set():
            self.stuck.set()
            self.gate.wait(GATE_S)
        return ConsumeResult.SUCCESS


def by_id(mqs: Sequence[MessageQueue], msg: Message, qid: Any) -> MessageQueue:
    """The queue numbered ``qid``."""
    return next(mq for mq in mqs if mq.queue_id == qid)


async def test_a_dropped_queue_waiting_for_a_thread_is_not_consumed(tmp_path: Path) -> None:
    topic, group = "QueuedAtClose", "cg_queued_at_close"
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=2)
        async with Producer("pg", c.namesrv) as producer:
            for qid in (0, 1):
                await producer.send_orderly(Message(topic, b"m"), selector=by_id, arg=qid)
        handle = FirstCallStuck()
        consumer = PushConsumer(
            group,
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            orderly=True,
            consume_thread_max=1,
            persist_interval=3600,
            await_termination_ms=60_000,
        )
        consumer.subscribe(topic, "*", handle)
        closed = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def serve() -> None:
                    with scope:
                        async with consumer:
                            await trio.sleep_forever()
                    closed.set()

                nursery.start_soon(serve)
                await wait_until(handle.stuck.is_set, "one queue's handler stuck")

                def slots() -> list[QueueSlot]:
                    return [q.slot for mq, q in consumer._queues.items() if mq.topic == topic]

                await wait_until(
                    lambda: len(slots()) == 2 and all(s.consuming.locked() for s in slots()),
                    "the other queue's batch waits for the thread",
                )
                taken = slots()
                scope.cancel()
                await wait_until(
                    lambda: all(s.pq.dropped for s in taken), "the close dropped both queues"
                )
                handle.gate.set()
                await closed.wait()
            assert len(handle.queues) == 1, handle.queues
        finally:
            handle.gate.set()
