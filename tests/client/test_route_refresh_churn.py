"""A long-lived client instance whose producers and consumers come and go: the periodic route
refresh asks only for the topics its running clients use (RocketMQ's
``MQClientInstance#updateTopicRouteInfoFromNameServer``: the consumers' subscriptions and the
producers' topics). The routes of the others are forgotten, not asked for every 30 s for the
instance's lifetime, one more for every consumer group that was ever started in the process."""

from __future__ import annotations

from pathlib import Path

import trio

from client.aio import ConsumeResult, Producer, PushConsumer
from client.message import Message, ReceivedMessage
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import TOPIC, cluster

GROUPS = 5
OTHER = "OtherTopic"


async def consume(msgs: list[ReceivedMessage]) -> ConsumeResult:
    """Accept everything."""
    return ConsumeResult.SUCCESS


async def churn_consumer(producer: Producer, group: str) -> None:
    """A push consumer of ``group`` on the producer's instance, up until it holds queues."""
    push = PushConsumer(group, instance=producer.instance)
    push.subscribe(TOPIC, "*", consume)
    async with push:
        await wait_until(lambda: bool(push.assignment()), f"{group} holding queues")


async def test_routes_of_closed_clients_are_forgotten_by_the_refresh(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(OTHER, 1)
        async with Producer("keeps-instance", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"stays in use"))
            instance = producer.instance
            async with Producer("comes-and-goes", instance=instance) as passing:
                await passing.send(Message(OTHER, b"once"))
            for i in range(GROUPS):
                await churn_consumer(producer, f"churn-{i}")
            retry_topics = [f"%RETRY%churn-{i}" for i in range(GROUPS)]
            assert {*retry_topics, OTHER} <= set(instance.cached_topics())

            await instance.refresh_routes()

            assert instance.cached_topics() == [TOPIC]
            with trio.fail_after(10):  # a forgotten route is fetched again when needed
                await producer.send(Message(OTHER, b"again"))
            assert OTHER in instance.cached_topics()
