"""A producer's topic deleted meanwhile (``mqadmin deleteTopic``): the route refresh keeps
asking for it, as RocketMQ's client does, but warns once, not every round; a send to it fails
with the broker's TOPIC_NOT_EXIST."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from client import Message, MQClientError
from client.aio import Producer
from client.config import ClientConfig
from client.instance import ClientInstance
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req
from tests.client.inproc_cluster import TOPIC, Cluster, cluster

ROUNDS = 5


async def delete_topic(c: Cluster) -> None:
    """Delete TOPIC in every broker and in the name server, as ``mqadmin deleteTopic`` does."""
    async with RemotingClient() as client:
        targets = [(addr, RequestCode.DELETE_TOPIC_IN_BROKER) for addr in c.brokers.values()]
        for target, code in [*targets, (c.namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV)]:
            assert (await client.invoke(target, req(code, topic=TOPIC))).code == 0


def route_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings logged about TOPIC's route so far."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and TOPIC in r.getMessage() and "route" in r.getMessage()
    ]


async def test_a_deleted_topic_is_warned_about_once_and_its_route_comes_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It used to be warned about at every refresh round (every 30 s), for ever."""
    overrides = {"autoCreateTopicEnable": "false"}
    async with (
        cluster(tmp_path, brokers=("broker-a",), queues=1, overrides=overrides) as c,
        ClientInstance(ClientConfig.create(c.namesrv)) as instance,
        Producer("pg", instance=instance) as producer,
    ):
        await producer.send(Message(TOPIC, b"before"))
        await delete_topic(c)
        with caplog.at_level(logging.INFO, logger="client.instance"):
            for _ in range(ROUNDS):
                await instance.refresh_routes()
            assert len(route_warnings(caplog)) == 1, route_warnings(caplog)
            assert TOPIC in instance.cached_topics()  # still asked for: it may come back
            with pytest.raises(MQClientError) as failed:
                await producer.send(Message(TOPIC, b"after"))
            assert failed.value.code == ResponseCode.TOPIC_NOT_EXIST
            assert f"topic[{TOPIC}] not exist" in str(failed.value)
            await c.create_topic(TOPIC, queues=1)
            await instance.refresh_routes()
            assert f"the route of topic {TOPIC} is back" in caplog.text
            await producer.send(Message(TOPIC, b"again"))
            await delete_topic(c)  # gone again: warned again, once
            for _ in range(ROUNDS):
                await instance.refresh_routes()
            assert len(route_warnings(caplog)) == 2, route_warnings(caplog)
