"""The broker's Prometheus endpoint, scraped and parsed after real traffic through a live broker."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
import trio
from prometheus_client.samples import Sample

from client.aio import ConsumeFromWhere, Producer, PullConsumer
from client.message import Message, MessageQueue
from common.message import PULL_FLAG_SUSPEND
from common.route import TopicConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import req, running_broker, running_namesrv, send_req, wait_until
from tests.deploy.netutil import free_port, http_get, samples

TOPIC = "MetricsTopic"
GROUP = "metrics-cg"


def value(found: Iterable[Sample], name: str, **labels: str) -> float:
    """The one sample named ``name`` whose labels include ``labels``."""
    hits = [
        s for s in found if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0].value


async def scrape(port: int) -> list[Sample]:
    status, content_type, body = await http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    return samples(body)


async def test_metrics_after_produce_and_consume(tmp_path: Path) -> None:
    port = free_port()
    overrides = {"metricsPort": str(port), "brokerClusterName": "C1", "busyPollMicros": "200"}
    async with (
        running_namesrv() as namesrv,
        running_broker(tmp_path, namesrv, overrides=overrides) as (broker, _),
    ):
        assert broker.metrics is not None
        assert broker.metrics.port == port
        mq = MessageQueue(TOPIC, "broker-a", 0)
        bodies = [b"m%d" % i for i in range(5)]
        async with Producer("metrics-pg", namesrv) as producer:
            for body in bodies:
                await producer.send(Message(TOPIC, body), queue=mq)
            batch = [Message(TOPIC, b"batch-%d" % i) for i in range(3)]
            await producer.send_batch(batch)
            async with PullConsumer(
                GROUP,
                namesrv,
                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                auto_commit=False,
            ) as consumer:
                consumer.assign(await consumer.fetch_queues(TOPIC))
                got: list[object] = []
                with trio.fail_after(20):
                    while len(got) < 8:
                        got += await consumer.poll()
                await consumer.commit()
                for body in bodies[:4]:  # 4 more on queue 0, not committed: the lag
                    await producer.send(Message(TOPIC, body), queue=mq)

                async def all_pulled() -> bool:  # the consumer prefetches them (not committed)
                    found = await scrape(port)
                    pulled = value(found, "rocketmq_messages_out_total", consumer_group=GROUP)
                    return pulled == 12

                await wait_until(all_pulled, "the consumer to prefetch the last 4")
                found = await scrape(port)
                base = {"cluster": "C1", "node_type": "broker", "node_id": "broker-a"}
                assert value(found, "rocketmq_messages_in_total", topic=TOPIC, **base) == 12
                # single sends count their body bytes; the batch its (larger) encoded body
                assert value(found, "rocketmq_throughput_in_total", topic=TOPIC) > 9 * 2 + 3 * 7
                assert (
                    value(found, "rocketmq_messages_out_total", topic=TOPIC, consumer_group=GROUP)
                    == 12
                )
                out_bytes = value(
                    found, "rocketmq_throughput_out_total", topic=TOPIC, consumer_group=GROUP
                )
                assert out_bytes > 12 * 91  # whole records: 91 fixed bytes each at least
                lag = value(
                    found, "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=GROUP
                )
                assert lag == 4
                assert value(found, "rocketmq_consumer_connections", consumer_group=GROUP) == 1
                assert value(found, "rocketmq_producer_connections") >= 1
                assert value(found, "rocketmq_topic_number") >= 1
                assert value(found, "rocketmq_consumer_group_number") >= 1
                assert value(found, "minimq_busy_poll_steps_total", **base) >= 1
                assert value(found, "minimq_busy_poll_spells_skipped_total") >= 0
                assert 0 <= value(found, "minimq_busy_poll_hit_ratio") <= 1
                info = value(found, "rocketmq_broker_info", broker_addr=broker.broker_addr)
                assert info == 1
                assert not [s for s in found if s.name.endswith("_created")]

                # consuming the rest brings the lag to zero
                more: list[object] = []
                with trio.fail_after(20):
                    while len(more) < 4:
                        more += await consumer.poll()
                await consumer.commit()
                found = await scrape(port)
                assert value(found, "rocketmq_consumer_lag_messages", topic=TOPIC) == 0
                # caught up: its pulls wait at the broker, and are counted as pending
                await wait_until(lambda: broker.holds.parked_count(TOPIC) > 0, "a parked pull")
                found = await scrape(port)
                assert value(found, "minimq_requests_pending") >= 1
                assert value(found, "minimq_requests_rejected_busy_total") == 0
                assert value(found, "minimq_connections_refused_total") == 0
        # a closed producer/consumer is gone from the connection gauges
        await wait_until(lambda: not broker.clients.manager.consumers, "the consumer to unregister")
        found = await scrape(port)
        assert not [s for s in found if s.name == "rocketmq_consumer_connections"]
    with pytest.raises(OSError, match="all attempts to connect"):  # stopped with the broker
        await trio.open_tcp_stream("127.0.0.1", port)


async def test_group_commits_are_counted(tmp_path: Path) -> None:
    """With SYNC_FLUSH every acknowledged send was covered by a counted flush."""
    port = free_port()
    overrides = {"metricsPort": str(port), "flushDiskType": "SYNC_FLUSH"}
    async with (
        running_namesrv() as namesrv,
        running_broker(tmp_path, namesrv, overrides=overrides),
        Producer("flush-pg", namesrv) as producer,
    ):
        found = await scrape(port)
        before = value(found, "minimq_commitlog_flushes_total")
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(producer.send, Message(TOPIC, b"durable-%d" % i))
        found = await scrape(port)
        flushes = value(found, "minimq_commitlog_flushes_total") - before
        assert 1 <= flushes <= 6
        assert value(found, "minimq_commitlog_flush_seconds_total") > 0


async def test_held_pulls_gauge_follows_a_parked_pull(tmp_path: Path) -> None:
    """``minimq_pull_requests_held`` is 1 while a long-polling pull waits at the broker and 0
    once a message has answered it."""
    port = free_port()
    topic = "HeldTopic"
    async with (
        running_broker(tmp_path, overrides={"metricsPort": str(port)}) as (broker, addr),
        RemotingClient(default_timeout_s=20) as client,
    ):
        assert broker.topics is not None
        broker.topics.create_or_update(TopicConfig(topic, 1, 1))
        assert value(await scrape(port), "minimq_pull_requests_held") == 0
        answers: list[RemotingCommand] = []
        pull = req(
            RequestCode.PULL_MESSAGE,
            consumerGroup="held-cg",
            topic=topic,
            queueId="0",
            queueOffset="0",
            maxMsgNums="32",
            sysFlag=str(PULL_FLAG_SUSPEND),
            suspendTimeoutMillis="60000",
        )

        async def pull_held() -> None:
            answers.append(await client.invoke(addr, pull, timeout_s=70))

        async def held(count: int) -> bool:
            return value(await scrape(port), "minimq_pull_requests_held") == count

        with trio.fail_after(40):  # the pull's answer must come from the arrival
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pull_held)
                await wait_until(lambda: held(1), "the gauge to show the parked pull")
                sent = await client.invoke(addr, send_req(topic, b"wakes it"))
                assert sent.code == ResponseCode.SUCCESS
        assert answers[0].code == ResponseCode.SUCCESS
        assert await held(0)


async def test_trio_tasks_gauge(tmp_path: Path) -> None:
    """``minimq_trio_tasks`` counts the live tasks of the broker's event loop."""
    port = free_port()
    async with running_broker(tmp_path, overrides={"metricsPort": str(port)}):

        async def counted() -> bool:
            return any(s.name == "minimq_trio_tasks" for s in await scrape(port))

        await wait_until(counted, "the first task count")
        assert value(await scrape(port), "minimq_trio_tasks") > 0


async def test_other_paths_and_methods(tmp_path: Path) -> None:
    port = free_port()
    async with running_broker(tmp_path, overrides={"metricsPort": str(port)}):
        status, _, _ = await http_get(f"http://127.0.0.1:{port}/")
        assert status == 404
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while chunk := await stream.receive_some():
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 405 ")


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET /metrics HTTP/1.0\n\n",  # what `printf ... | nc` sends
        b"GET /metrics HTTP/1.1\nHost: x\n\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
async def test_bare_lf_line_ends_are_accepted(tmp_path: Path, request_head: bytes) -> None:
    """RFC 9112 section 2.2: a request with bare LF line ends is answered at once (it used to
    wait out the 10 s request time-out and close without an answer)."""
    port = free_port()
    async with running_broker(tmp_path, overrides={"metricsPort": str(port)}):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request_head)
            reply = b""
            while chunk := await stream.receive_some():
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply[:80]
        assert b"rocketmq_broker_info" in reply


@pytest.mark.parametrize("setting", [None, "", "0"])
async def test_metrics_off_by_default(tmp_path: Path, setting: str | None) -> None:
    overrides = {} if setting is None else {"metricsPort": setting}
    async with running_broker(tmp_path, overrides=overrides) as (broker, _):
        assert broker.metrics is None
