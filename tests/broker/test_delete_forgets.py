"""Deleting a topic or a subscription group drops what the broker keeps about it in memory
(RocketMQ's ``BrokerStatsManager.onTopicDeleted`` / ``onGroupDeleted``): a broker that sees
many short-lived topics or groups does not grow without bound, and the metrics endpoint stops
exporting their series."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from prometheus_client.samples import Sample

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import LIMIT, req, running_broker
from tests.broker.pulls import pull_all, send
from tests.deploy.netutil import free_port, http_get, samples

TOPICS = 20
pytestmark = pytest.mark.timeout(120)


async def ok(client: RemotingClient, addr: str, code: int, **fields: str) -> None:
    """Invoke ``code`` with ``fields``; it must answer SUCCESS."""
    resp = await client.invoke(addr, req(code, **fields))
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)


async def create_topic(client: RemotingClient, addr: str, topic: str) -> None:
    """UPDATE_AND_CREATE_TOPIC with 2 read/write queues."""
    await ok(
        client,
        addr,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        topic=topic,
        readQueueNums="2",
        writeQueueNums="2",
        perm="6",
    )


async def send_to_any_queue(client: RemotingClient, addr: str, topic: str) -> int:
    """SEND_MESSAGE with queueId -1 (the broker picks round robin); the queue it chose."""
    resp = await client.invoke(
        addr,
        req(
            RequestCode.SEND_MESSAGE,
            b"x",
            producerGroup="pg",
            topic=topic,
            queueId="-1",
            bornTimestamp="1700000000000",
        ),
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(str(resp.ext_fields["queueId"]))


async def scrape(port: int) -> list[Sample]:
    status, _, body = await http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    return samples(body)


async def test_deleted_topics_leave_no_round_robin_position(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with (
            running_broker(tmp_path) as (broker, addr),
            RemotingClient(default_timeout_s=LIMIT) as client,
        ):
            sender = broker.send_processor
            assert sender is not None
            before = sender.round_robin_topics()
            for i in range(TOPICS):
                topic = f"ShortLived{i}"
                await create_topic(client, addr, topic)
                assert await send_to_any_queue(client, addr, topic) == 0
                assert await send_to_any_queue(client, addr, topic) == 1
                await ok(client, addr, RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic)
            assert sender.round_robin_topics() == before
            # created again under the name, the topic starts over at queue 0
            await create_topic(client, addr, "ShortLived0")
            assert await send_to_any_queue(client, addr, "ShortLived0") == 0


async def test_deleted_group_is_no_longer_exported(tmp_path: Path) -> None:
    port = free_port()
    topic, group, stays = "GroupMetrics", "gone_group", "stays_group"
    with trio.fail_after(90):
        async with (
            running_broker(tmp_path, overrides={"metricsPort": str(port)}) as (_, addr),
            RemotingClient(default_timeout_s=LIMIT) as client,
        ):
            await create_topic(client, addr, topic)
            await send(client, addr, topic, b"m")
            for g in (group, stays):  # FOUND pulls auto-create the group; nothing committed
                assert len(await pull_all(client, addr, topic, 0, g)) == 1
                await ok(
                    client,
                    addr,
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    consumerGroup=g,
                    topic=topic,
                    queueId="0",
                    commitOffset="0",
                )
            exported = {s.labels.get("consumer_group") for s in await scrape(port)}
            assert {group, stays} <= exported
            await ok(client, addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName=group)
            found = await scrape(port)
            assert [s for s in found if s.labels.get("consumer_group") == group] == []
            names = {s.name for s in found if s.labels.get("consumer_group") == stays}
            assert names >= {
                "rocketmq_messages_out_total",
                "rocketmq_throughput_out_total",
                "rocketmq_consumer_lag_messages",
            }
