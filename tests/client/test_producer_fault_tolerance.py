"""With ``latency_fault_tolerance`` the producer records every send attempt, a batch's too, as
RocketMQ 5's ``sendDefaultImpl`` (``updateFaultItem``) does, with RocketMQ 5's flags: a broker
that refused is isolated and unreachable, one that could not be reached is only isolated."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from client.aio import ClientInstance, Producer
from client.config import ClientConfig
from client.errors import MQClientError
from client.message import Message
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req
from tests.client.inproc_cluster import TOPIC, Cluster, cluster

QUEUES_PER_BROKER = 4


@asynccontextmanager
async def fault_tolerant_producer(c: Cluster, retry_times: int) -> AsyncIterator[Producer]:
    """A producer whose route of TOPIC (both brokers writable) is cached for the test (an
    hour between route polls); isolation lasts 10 s, far longer than the test's sends."""
    config = ClientConfig.create(c.namesrv, poll_name_server_interval_s=3600)
    async with (
        ClientInstance(config) as instance,
        Producer(
            "pg", instance=instance, retry_times=retry_times, latency_fault_tolerance=True
        ) as p,
    ):
        await p.send(Message(TOPIC, b"warm"))
        yield p


async def set_perm(c: Cluster, broker: str, perm: int, topic: str = TOPIC) -> None:
    """Create or update ``topic`` on ``broker`` (4 queues) with permission ``perm``."""
    update = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=topic, perm=str(perm),
                 readQueueNums="4", writeQueueNums="4")  # fmt: skip
    async with RemotingClient() as admin:
        resp = await admin.invoke(c.brokers[broker], update)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def refuse_writes(c: Cluster, broker: str, topic: str = TOPIC) -> None:
    """Make ``topic`` read-only on ``broker``: it answers sends with NO_PERMISSION (retriable)."""
    await set_perm(c, broker, 4, topic)


def batch() -> list[Message]:
    return [Message(TOPIC, b"b1"), Message(TOPIC, b"b2")]


async def test_a_broker_refusing_batches_is_isolated(tmp_path: Path) -> None:
    refused: list[int] = []
    async with (
        cluster(tmp_path, queues=QUEUES_PER_BROKER) as c,
        fault_tolerant_producer(c, retry_times=0) as p,
    ):
        await refuse_writes(c, "broker-a")
        # round robin over the 8 queues: one of the first 8 batches goes to broker-a
        for _ in range(2 * QUEUES_PER_BROKER):
            try:
                await p.send_batch(batch())
            except MQClientError as exc:
                refused.append(exc.code)
                break
        # isolated: a whole round robin cycle of batches goes to broker-b
        brokers = [(await p.send_batch(batch())).queue.broker_name for _ in range(8)]
    assert refused == [ResponseCode.NO_PERMISSION]
    assert set(brokers) == {"broker-b"}


async def test_with_every_broker_isolated_one_that_refused_is_tried_last(
    tmp_path: Path,
) -> None:
    """RocketMQ 5 without its detector: a RemotingException isolates the broker as reachable,
    an MQBrokerException as unreachable; with nothing available the reachable one goes first."""
    async with (
        cluster(tmp_path, queues=QUEUES_PER_BROKER) as c,
        fault_tolerant_producer(c, retry_times=1) as p,
    ):
        await refuse_writes(c, "broker-a")
        await c.stop_broker("broker-b")  # its address stays cached: connection refused
        with pytest.raises(MQClientError) as first:
            await p.send(Message(TOPIC, b"x"))  # one attempt on each: both isolated
        with pytest.raises(MQClientError) as second:
            await p.send(Message(TOPIC, b"y"))
    assert "broker-a: " in str(first.value)
    assert "broker-b: " in str(first.value)
    assert "errors: broker-b: " in str(second.value)  # the first attempt went there


async def test_a_fast_send_to_an_isolated_broker_does_not_end_its_isolation(
    tmp_path: Path,
) -> None:
    """RocketMQ 5's ``updateNotAvailableDuration`` only lengthens an isolation. broker-a
    refuses a send of a topic only it serves (isolated for 10 s), then takes the next one at
    once (its only broker: the last choice is still broker-a); TOPIC's sends keep avoiding it.
    Before, that fast success ended the isolation and TOPIC's sends went to broker-a again."""
    only_a = "OnlyOnBrokerA"
    async with cluster(tmp_path, queues=QUEUES_PER_BROKER) as c:
        await set_perm(c, "broker-a", 6, only_a)
        async with fault_tolerant_producer(c, retry_times=0) as p:
            await p.send(Message(only_a, b"warm"))  # its route cached too
            await refuse_writes(c, "broker-a", only_a)
            with pytest.raises(MQClientError) as refused:
                await p.send(Message(only_a, b"refused"))
            await set_perm(c, "broker-a", 6, only_a)
            taken = await p.send(Message(only_a, b"taken"))
            # still isolated: a whole round robin cycle of TOPIC goes to broker-b
            brokers = [(await p.send(Message(TOPIC, b"x"))).queue.broker_name for _ in range(8)]
    assert refused.value.code == ResponseCode.NO_PERMISSION
    assert taken.queue.broker_name == "broker-a"
    assert set(brokers) == {"broker-b"}
