"""Closing a push consumer is bounded by its handlers' current calls, not by what it pulled,
and a rebalance round in progress cannot spend the close's time.

- Concurrent: a worker stops a pull between batches once closing starts; what ran counts
  (RocketMQ's ``ConsumeRequest`` checks before each batch). Before, a pull's every remaining
  message went to the handler (32 handler calls: 28 s with a 1 s handler).
- Orderly: a close that starts while a round drops busy queues (each waits up to
  ``DROP_WAIT_S`` for its handler) cancels the round. Before, close waited for the round, and
  its 5 s ran out before any offset was persisted: the queues it kept were consumed again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import trio

from client.aio import ConsumeFrom, Message, MessageQueue, Producer, PushConsumer
from client.config import ClientConfig
from client.consume_service import ConsumeResult
from client.instance import ClientInstance
from client.message import ReceivedMessage
from client.offset_store import RemoteOffsetStore
from remoting.client_bodies import LockedQueue
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import cluster

GATE_S = 20.0
"""Longest a gated handler waits (the test always opens the gate first)."""


async def send(namesrv: str, topic: str, n: int) -> None:
    async with Producer("pg", namesrv) as producer:
        for i in range(n):
            await producer.send(Message(topic, b"m%d" % i))


async def committed(namesrv: str, group: str, mqs: list[MessageQueue]) -> list[int | None]:
    """The group's offsets of ``mqs`` on their brokers."""
    async with ClientInstance(ClientConfig.create(namesrv)) as instance:
        await instance.topic_route(mqs[0].topic)
        store = RemoteOffsetStore(instance, group)
        return [await store.read(mq) for mq in mqs]


class BusyAfterTwo:
    """An orderly handler that consumes two messages of every queue, then waits in the third
    until :attr:`gate` opens (each queue busy, its offset 2)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.done: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            if m.queue_offset == 2:
                self.gate.wait(GATE_S)
            with self._lock:
                self.done[m.queue.queue_id] = m.queue_offset + 1
        return ConsumeResult.SUCCESS

    def all_busy(self, queues: int) -> bool:
        """Every one of ``queues`` queues consumed two messages and waits in the third."""
        return len(self.done) == queues and set(self.done.values()) == {2}


def orderly_member(group: str, namesrv: str, topic: str, handler: BusyAfterTwo) -> PushConsumer:
    """An orderly member whose offsets only releasing a queue and closing persist."""
    consumer = PushConsumer(
        group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=True, persist_interval=3600
    )
    consumer.subscribe(topic, "*", handler)
    return consumer


async def test_closing_stops_a_pull_between_batches(tmp_path: Path) -> None:
    topic, group = "CloseMid", "cg_close_mid"
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=1)
        await send(c.namesrv, topic, 10)
        gate = threading.Event()
        handled: list[int] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            if msgs[0].queue_offset == 2:
                gate.wait(GATE_S)
            handled.extend(m.queue_offset for m in msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=3600
        )
        consumer.subscribe(topic, "*", handle)
        try:
            async with trio.open_nursery() as nursery:
                entered = trio.Event()
                leave = trio.Event()

                async def run() -> None:
                    async with consumer:
                        entered.set()
                        await leave.wait()

                nursery.start_soon(run)
                await entered.wait()
                await wait_until(lambda: handled == [0, 1], "two handled, the third in the handler")
                leave.set()  # close: it waits for the handler in flight
                service = consumer._concurrent
                assert service is not None
                await wait_until(lambda: service._stopping, "closing started")
                gate.set()
        finally:
            gate.set()
        assert handled == [0, 1, 2]  # the rest of the pull was not started
        assert await committed(c.namesrv, group, [MessageQueue(topic, "broker-a", 0)]) == [3]


@pytest.mark.parametrize("close_by", ["leaving the block", "cancelling"])
async def test_an_orderly_close_during_a_rebalance_persists_every_queue(
    tmp_path: Path, close_by: str
) -> None:
    """Leaving the block: before, close waited for the round and ran out of time before
    persisting the queues it kept. Cancelling (as the blocking ``close()``): before, the queue
    the round was dropping was neither persisted nor unlocked."""
    topic, group, queues = "CloseRound", "cg_close_round", 8
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=queues)
        await send(c.namesrv, topic, queues * 5)
        handle = BusyAfterTwo()
        gate = handle.gate

        def mine(consumer: PushConsumer) -> list[MessageQueue]:
            return [q for q in consumer.assignment() if q.topic == topic]

        c1 = orderly_member(group, c.namesrv, topic, handle)
        c2 = PushConsumer(group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=True)
        c2.subscribe(topic, "*", lambda msgs: ConsumeResult.SUCCESS)
        every = [MessageQueue(topic, "broker-a", i) for i in range(queues)]
        leave = trio.Event()

        async def run_c1(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                async with c1:
                    task_status.started(scope)
                    await leave.wait()

        try:
            async with (
                ClientInstance(ClientConfig.create(c.namesrv)) as instance,
                trio.open_nursery() as nursery,
            ):
                await instance.topic_route(topic)
                store = RemoteOffsetStore(instance, group)

                async def all_persisted() -> bool:
                    return [await store.read(mq) for mq in every] == [2] * queues

                c1_scope = await nursery.start(run_c1)
                await wait_until(lambda: handle.all_busy(queues), "every queue busy")
                c2_scope = await nursery.start(c2.run)
                # c1's round drops four busy queues, waiting up to 1 s for each one's handler
                await wait_until(lambda: len(mine(c1)) < queues, "c1 dropping queues")
                if close_by == "cancelling":
                    c1_scope.cancel()
                else:
                    leave.set()
                # while the handlers are still busy: the close persists what it had
                await wait_until(all_persisted, "every queue's offset persisted")
                gate.set()
                await c1.closed.wait()
                c2_scope.cancel()
        finally:
            gate.set()


async def test_a_close_during_an_offset_reset_keeps_the_reset(tmp_path: Path) -> None:
    """The reset's offsets are taken locally before its first request, and a close does not
    cancel it: before, the close persisted the old offsets over the broker's reset ones, so
    the messages the reset was to replay were skipped. (Orderly, with busy handlers: the reset
    waits for the first queue's handler, so the close lands inside it.)"""
    topic, group, queues = "CloseReset", "cg_close_reset", 4
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=queues)
        await send(c.namesrv, topic, queues * 10)
        handle = BusyAfterTwo()
        gate = handle.gate
        consumer = orderly_member(group, c.namesrv, topic, handle)
        every = [MessageQueue(topic, "broker-a", i) for i in range(queues)]
        try:
            async with trio.open_nursery() as nursery, consumer:
                await wait_until(lambda: handle.all_busy(queues), "every queue busy")
                slots = [consumer._queues[mq].slot.pq for mq in every]
                nursery.start_soon(consumer.reset_offsets, dict.fromkeys(every, 0))
                await wait_until(lambda: any(pq.dropped for pq in slots), "the reset started")
                nursery.start_soon(_open_when_closing, consumer, gate)
                # closed while the reset waited for a busy queue
        finally:
            gate.set()
        assert await committed(c.namesrv, group, every) == [0] * queues


async def _open_when_closing(consumer: PushConsumer, gate: threading.Event) -> None:
    await wait_until(lambda: not consumer._running, "closing")
    gate.set()


async def test_an_orderly_close_unlocks_the_queue_a_round_was_dropping(tmp_path: Path) -> None:
    """The close waits for the handler of the queue a cancelled round was dropping, as for the
    others, then unlocks it: before, it stayed locked at the broker for 60 s."""
    topic, group, queues = "CloseUnlock", "cg_close_unlock", 8
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=queues)
        await send(c.namesrv, topic, queues * 5)
        gate = threading.Event()
        busy: set[int] = set()
        slow: set[int] = set()

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            qid = msgs[0].queue.queue_id
            busy.add(qid)
            gate.wait(GATE_S)
            if qid in slow:
                time.sleep(0.3)  # returns after the kept queues' handlers
            return ConsumeResult.SUCCESS

        c1 = PushConsumer(group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=True)
        c1.subscribe(topic, "*", handle)
        c2 = PushConsumer(group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=True)
        c2.subscribe(topic, "*", lambda msgs: ConsumeResult.SUCCESS)
        locks = c.controllers["broker-a"].locks
        try:
            async with trio.open_nursery() as nursery:
                c1_scope = await nursery.start(c1.run)
                await wait_until(lambda: len(busy) == queues, "every queue busy")
                c1_id = c1.instance.client_id
                c2_scope = await nursery.start(c2.run)

                def kept() -> set[int]:
                    return {q.queue_id for q in c1.assignment() if q.topic == topic}

                await wait_until(lambda: len(kept()) < queues, "c1 dropping queues")
                slow.update(set(range(queues)) - kept())  # the one being dropped now
                c1_scope.cancel()
                await wait_until(lambda: not c1._running, "c1 closing")
                gate.set()  # the handlers return within the close's drain
                await c1.closed.wait()
                held = [
                    i
                    for i in range(queues)
                    if locks.holder(group, LockedQueue(topic, "broker-a", i)) == c1_id
                ]
                assert held == []
                c2_scope.cancel()
        finally:
            gate.set()
