"""A push consumer stops handing a pull's messages to its handler once their queue is dropped
(here by ``mqadmin resetOffsetByTime -s -1``, "skip everything"): at most the batch already in
the handler finishes, as RocketMQ's ``ConsumeRequest`` checks ``isDropped`` before each batch.
Before, a worker handed every remaining message of its pull (up to 32) to the handler."""

from __future__ import annotations

import threading
from pathlib import Path

import trio
import trio.lowlevel

from client.aio import ConsumeFrom, Message, Producer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from tests.admin.harness import ok
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import cluster

TOPIC = "SkipAll"
SENT = 64


async def test_a_dropped_queue_gets_no_more_of_its_pull(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(TOPIC, queues=1)
        async with Producer("pg", c.namesrv) as producer:
            for i in range(SENT):
                await producer.send(Message(TOPIC, b"m%d" % i))
        release = threading.Event()
        handed: list[int] = []
        after_release: list[int] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            (after_release if release.is_set() else handed).extend(m.queue_offset for m in msgs)
            release.wait(20)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("cg_skip", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", handle)
        try:
            async with consumer:
                await wait_until(lambda: len(handed) >= 1, "a message in the handler")
                (mq,) = [q for q in consumer.assignment() if q.topic == TOPIC]
                pq = consumer._queues[mq].slot.pq
                await ok(
                    "resetOffsetByTime", "-n", c.namesrv, "-g", "cg_skip", "-t", TOPIC, "-s", "-1"
                )
                await wait_until(lambda: pq.dropped, "the queue dropped by the reset")
                release.set()
                await trio.lowlevel.checkpoint()
            # closing waits for the handlers in flight: a stale worker has finished by now
        finally:
            release.set()
        assert len(handed) <= 2  # the first batch of each pull in flight, blocked in the handler
        assert after_release == []  # nothing of the old pulls after the drop; nothing new to read
