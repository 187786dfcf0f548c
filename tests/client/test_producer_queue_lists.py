"""The queue lists a producer hands to user code are copies: changing one must not change
where the producer's own sends go (RocketMQ's ``sendSelectImpl`` passes a copy too)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from client.aio import Producer, TransactionProducer
from client.message import Message, MessageQueue
from client.transaction import LocalTransactionState
from tests.client.inproc_cluster import TOPIC, cluster

KEY = "order-42"


def greedy_selector(queues: Sequence[MessageQueue], msg: Message, arg: object) -> MessageQueue:
    """A selector that reorders and shortens the list it is given (a list method would)."""
    assert isinstance(queues, list)
    queues.reverse()
    del queues[1:3]
    return queues[0]


async def test_a_selector_changing_its_queue_list_moves_no_sharding_key(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c, Producer("pg", c.namesrv) as producer:
        before = await producer.send_orderly(Message(TOPIC, b"1"), sharding_key=KEY)
        queues = list(await producer.instance.publish_queues(TOPIC))
        await producer.send_orderly(Message(TOPIC, b"greedy"), selector=greedy_selector)
        after = await producer.send_orderly(Message(TOPIC, b"2"), sharding_key=KEY)
        assert after.queue == before.queue  # the key's order holds
        assert await producer.instance.publish_queues(TOPIC) == queues


async def test_changing_the_fetched_publish_queues_changes_no_send(tmp_path: Path) -> None:
    def check(msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async with (
        cluster(tmp_path) as c,
        TransactionProducer("tx-pg", c.namesrv, checker=check) as producer,
    ):
        queues = await producer.fetch_publish_queues(TOPIC)
        expected = list(queues)
        queues.clear()
        assert await producer.fetch_publish_queues(TOPIC) == expected
        assert (await producer.send(Message(TOPIC, b"x"))).queue in expected
