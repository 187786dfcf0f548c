"""A handler that never returns cannot hold a push consumer's close: after
``await_termination_ms`` (RocketMQ's ``awaitTerminationMillisWhenShutdown``) the close abandons
it, with a WARNING naming the group. Its message was not acknowledged, so the persisted offset
stops before it and the group consumes it again; an orderly queue it held is unlocked at once.

Before, the trio close waited for the handler's thread for ever (the blocking ``close()`` gave
up after 10 s, leaving the loop thread running).

Closing counts what a pull's handler calls finished before the one still running: a pull's
messages used to count only together, so a close during a pull's long handler call persisted
none of it (all consumed again). And a handler may close its own blocking consumer: the close
used to wait for that very handler (15 s, an ERROR, the loop thread abandoned).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import trio

from client import PushConsumer as BlockingPushConsumer
from client.aio import ConsumeFrom, Message, MessageQueue, Producer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from remoting.client_bodies import LockedQueue
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, cluster
from tests.client.test_push_close_bounds import committed

GATE_S = 60.0
"""Longest the stuck handler waits (the test opens the gate when it ends)."""


class StuckAt:
    """Consumes the offsets before ``stuck_at`` of each queue, then never returns from that
    one (until ``gate``)."""

    def __init__(self, stuck_at: int = 1) -> None:
        self.stuck_at = stuck_at
        self.gate = threading.Event()
        self.stuck = threading.Event()
        self.seen: list[int] = []

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            self.seen.append(m.queue_offset)
            if m.queue_offset == self.stuck_at:
                self.stuck.set()
                self.gate.wait(GATE_S)
        return ConsumeResult.SUCCESS


async def send(namesrv: str, topic: str, n: int) -> None:
    async with Producer("pg", namesrv) as producer:
        for i in range(n):
            await producer.send(Message(topic, b"m%d" % i))


def member(group: str, namesrv: str, topic: str, handler: StuckAt, orderly: bool) -> PushConsumer:
    consumer = PushConsumer(
        group,
        namesrv,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        orderly=orderly,
        persist_interval=3600,
        await_termination_ms=300,
    )
    consumer.subscribe(topic, "*", handler)
    return consumer


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_close_abandons_a_handler_that_never_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, orderly: bool
) -> None:
    topic, group = "Abandon", f"cg_abandon_{int(orderly)}"
    mq = MessageQueue(topic, "broker-a", 0)
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=1)
        await send(c.namesrv, topic, 3)
        handle = StuckAt()
        consumer = member(group, c.namesrv, topic, handle, orderly)
        try:
            with caplog.at_level(logging.WARNING, logger="client.push_consumer"):
                async with consumer:
                    await wait_until(handle.stuck.is_set, "the handler stuck at offset 1")
                    client_id = consumer.instance.client_id
            assert not handle.gate.is_set()  # the close returned with the handler still in it
            assert f"{group}: 1 message handler(s)" in caplog.text
            assert handle.seen == [0, 1]
            # offset 1 was never acknowledged: the group goes on from there
            assert await committed(c.namesrv, group, [mq]) == [1]
            locks = c.controllers["broker-a"].locks
            assert locks.holder(group, LockedQueue(topic, "broker-a", 0)) != client_id

            again = StuckAt()
            again.gate.set()
            async with member(group, c.namesrv, topic, again, orderly):
                await wait_until(lambda: again.seen == [1, 2], "offsets 1 and 2 consumed again")
        finally:
            handle.gate.set()


async def test_close_counts_the_batches_a_pull_finished_before_a_stuck_one(
    tmp_path: Path,
) -> None:
    topic, group = "AbandonPull", "cg_abandon_pull"
    mq = MessageQueue(topic, "broker-a", 0)
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=1)
        await send(c.namesrv, topic, 4)
        handle = StuckAt(2)
        try:
            async with member(group, c.namesrv, topic, handle, orderly=False):
                await wait_until(handle.stuck.is_set, "the handler stuck at offset 2")
            assert handle.seen == [0, 1, 2]  # one pull, its third batch stuck
            assert await committed(c.namesrv, group, [mq]) == [2]
        finally:
            handle.gate.set()


def close_from_the_handler(namesrv: str, topic: str, group: str) -> list[int]:
    """A blocking consumer whose handler closes it at offset 1; the offsets it saw."""
    returned = threading.Event()
    seen: list[int] = []
    consumer = BlockingPushConsumer(
        group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=3600
    )

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.append(msgs[0].queue_offset)
        if msgs[0].queue_offset == 1:
            consumer.close()
            returned.set()
        return ConsumeResult.SUCCESS

    with consumer:
        consumer.subscribe(topic, "*", handle)
        assert returned.wait(LIMIT)
    return seen


async def test_a_handler_may_close_its_own_blocking_consumer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its own call is not waited for (nor counted: offset 1 is consumed again)."""
    topic, group = "CloseInHandler", "cg_close_in_handler"
    mq = MessageQueue(topic, "broker-a", 0)
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=1)
        await send(c.namesrv, topic, 3)
        with caplog.at_level(logging.WARNING):
            seen = await trio.to_thread.run_sync(close_from_the_handler, c.namesrv, topic, group)
        assert seen == [0, 1]
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert "abandoned" not in caplog.text  # not even after await_termination_ms
        assert await committed(c.namesrv, group, [mq]) == [1]
