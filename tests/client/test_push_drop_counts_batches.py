"""A queue that a rebalance takes from a concurrent push consumer in the middle of a pull
records the pull's batches whose handler had already succeeded before its offset is persisted
(as a close does, and as RocketMQ, which records each batch as it ends): the next owner starts
after them. Before, only whole pulls counted: a drop while a pull's third message was in the
handler persisted the offset before the pull, and its first two messages were consumed again.
"""

from __future__ import annotations

from pathlib import Path

from client.aio import ConsumeFrom, MessageQueue, PushConsumer
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import cluster
from tests.client.test_push_close_abandon import StuckAt, send
from tests.client.test_push_close_bounds import committed


async def test_a_dropped_queue_records_the_batches_its_pull_finished(tmp_path: Path) -> None:
    topic, group = "DropMidPull", "cg_drop_mid_pull"
    mq = MessageQueue(topic, "broker-a", 0)
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=1)
        await send(c.namesrv, topic, 4)
        first = StuckAt(2)
        try:
            async with PushConsumer(
                group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=3600
            ) as consumer:
                consumer.subscribe(topic, "*", first)
                await wait_until(first.stuck.is_set, "the handler stuck at offset 2")
                consumer.unsubscribe(topic)  # the next rebalance drops the queue
                await wait_until(
                    lambda: mq not in consumer.assignment() and mq not in consumer._dropping,
                    "the queue dropped and its offset persisted",
                )
                assert first.seen == [0, 1, 2]  # one pull, its third batch in the handler
                # offsets 0 and 1 count (before, 0: the pull's start)
                assert await committed(c.namesrv, group, [mq]) == [2]
                first.gate.set()
        finally:
            first.gate.set()
        assert first.seen == [0, 1, 2]  # the rest of the pull was not started after the drop

        second = StuckAt(-1)
        async with PushConsumer(group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as again:
            again.subscribe(topic, "*", second)
            await wait_until(lambda: len(second.seen) == 2, "the rest consumed")
        assert second.seen == [2, 3]  # offsets 0 and 1 were not consumed twice
