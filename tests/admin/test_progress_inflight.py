"""``mqadmin consumerProgress``'s ``#Inflight`` (RocketMQ 5: the broker's pull offset minus the
consumer offset) and the ``-c cluster`` option of consumerProgress and resetOffsetByTime,
against two in-process brokers."""

from __future__ import annotations

from pathlib import Path

from client.aio import ConsumeFrom, Message, Producer, PullConsumer
from client.message import ReceivedMessage
from tests.admin.harness import as_json, headers_in, ok
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import TOPIC, cluster


async def send(namesrv: str, n: int) -> None:
    async with Producer("pg", namesrv) as producer:
        for i in range(n):
            await producer.send(Message(TOPIC, f"m{i}".encode()))


async def test_pulled_not_committed_messages_are_inflight(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await send(c.namesrv, 16)
        consumer = PullConsumer(
            "inf", c.namesrv, auto_commit=False, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        async with consumer:
            consumer.subscribe(TOPIC)
            got: list[ReceivedMessage] = []

            async def all_polled() -> bool:
                got.extend(await consumer.poll_for(0.05))
                return len(got) == 16

            await wait_until(all_polled, "every message polled")
            stats = await as_json("consumerProgress", *n, "-g", "inf", "-t", TOPIC)
            assert (stats["diffTotal"], stats["inflightTotal"]) == (16, 16)
            for q in stats["queues"]:  # pulled up to the queue's end, nothing committed
                assert (q["pullOffset"], q["consumerOffset"]) == (q["brokerOffset"], 0)
                assert q["inflight"] == q["brokerOffset"]
            text = await ok("consumerProgress", *n, "-g", "inf", "-t", TOPIC)
            assert headers_in(text, "#Diff", "#Inflight", "#LastTime", "Consume Diff Total: 16")
            assert "Consume Inflight Total: 16" in text

            await consumer.commit()

            async def committed() -> bool:
                stats = await as_json("consumerProgress", *n, "-g", "inf", "-t", TOPIC)
                return (stats["diffTotal"], stats["inflightTotal"]) == (0, 0)

            await wait_until(committed, "the polled offsets committed")


async def test_cluster_option_is_accepted_and_changes_nothing(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await send(c.namesrv, 8)
        async with PullConsumer("cl", c.namesrv) as pc:
            await pc.commit({q: 0 for q in await pc.fetch_queues(TOPIC)})
        progress = ("consumerProgress", *n, "-g", "cl", "-t", TOPIC)
        with_cluster = await as_json(*progress, "-c", "DefaultCluster")
        assert with_cluster == await as_json(*progress)
        assert with_cluster["diffTotal"] == 8
        reset = ("resetOffsetByTime", *n, "-g", "cl", "-t", TOPIC, "-s", "-1")
        done = await as_json(*reset, "--cluster", "DefaultCluster")
        assert len(done["offsetTable"]) == 8  # every queue of both brokers, as without -c
        assert (await as_json(*progress))["diffTotal"] == 0
