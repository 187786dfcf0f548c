"""Leaving clients by cancellation, closing them under waiting tasks, and option checks
(trio-native API against an in-process name server and brokers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from client.aio import ClientInstance, ConsumeFrom, Producer, PullConsumer, PushConsumer
from client.config import ClientConfig
from client.consume_service import ConsumeResult
from client.errors import ClientClosedError
from client.message import Message, ReceivedMessage
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster


def _config(namesrv: str) -> ClientConfig:
    return ClientConfig.create(namesrv)


async def test_a_producer_left_by_cancellation_closes_its_instance(tmp_path: Path) -> None:
    """A cancelled scope around the block (``fail_after``, Ctrl+C, a failing sibling) must
    close the producer and its own instance, not leave trio's nursery stack corrupted."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        with trio.CancelScope() as outer:
            async with Producer("pg", c.namesrv) as producer:
                await producer.send(Message(TOPIC, b"x"))
                outer.cancel()
                await trio.sleep_forever()
        assert outer.cancelled_caught
        assert not producer.instance.running


async def test_a_producer_on_a_shared_instance_left_by_cancellation_leaves_its_group(
    tmp_path: Path,
) -> None:
    async with (
        cluster(tmp_path, brokers=("broker-a",)) as c,
        ClientInstance(_config(c.namesrv)) as instance,
    ):
        with trio.CancelScope() as outer:
            async with Producer("pg", instance=instance):
                outer.cancel()
                await trio.sleep_forever()
        assert instance.heartbeat_data().producer_groups == ()


async def test_a_push_consumer_on_a_shared_instance_left_by_cancellation_leaves_its_group(
    tmp_path: Path,
) -> None:
    """Closing by cancellation is how the blocking facade always closes a push consumer: the
    group must leave the shared instance's heartbeats, or the broker keeps a ghost member that
    is handed queues nobody consumes."""
    async with (
        cluster(tmp_path, brokers=("broker-a",)) as c,
        ClientInstance(_config(c.namesrv)) as instance,
    ):
        consumer = PushConsumer("cg", instance=instance)
        consumer.subscribe(TOPIC, "*", lambda msgs: ConsumeResult.SUCCESS)
        with trio.CancelScope() as outer:
            async with consumer:
                await wait_until(lambda: bool(consumer.assignment()), "queues assigned")
                outer.cancel()
                await trio.sleep_forever()
        assert instance.heartbeat_data().consumers == ()
        again = PushConsumer("cg", instance=instance)  # the group can be made again
        again.subscribe(TOPIC, "*", lambda msgs: ConsumeResult.SUCCESS)
        async with again:
            pass


async def test_a_consumer_left_by_cancellation_still_commits_on_close(tmp_path: Path) -> None:
    """The close work is shielded; the connections it needs must survive the cancellation
    too, or every message since the last auto-commit is read again after a restart."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        async with Producer("pg", c.namesrv) as producer:
            for i in range(10):
                await producer.send(Message(TOPIC, b"m%d" % i))
        got: list[ReceivedMessage] = []
        with trio.CancelScope() as outer:
            async with PullConsumer(
                "cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, auto_commit_interval=3600
            ) as consumer:
                consumer.assign(await consumer.fetch_queues(TOPIC))
                while len(got) < 10:
                    got += await consumer.poll()
                consumer.poll_nowait()  # done with them (a cancelled block commits only those)
                outer.cancel()
                await trio.sleep_forever()
        offsets = c.controllers["broker-a"].offsets
        assert offsets is not None
        committed = offsets.query_offsets("cg", TOPIC)
        assert sum(committed.values()) == 10


async def test_closing_a_pull_consumer_wakes_its_waiting_polls(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        ended: list[BaseException] = []

        async def wait_in_poll(consumer: PullConsumer) -> None:
            try:
                await consumer.poll()
            except ClientClosedError as exc:
                ended.append(exc)

        with trio.fail_after(LIMIT):
            async with (
                trio.open_nursery() as nursery,
                PullConsumer("cg", c.namesrv) as consumer,
            ):
                consumer.assign(await consumer.fetch_queues(TOPIC))
                for _ in range(3):
                    nursery.start_soon(wait_in_poll, consumer)
                await trio.testing.wait_all_tasks_blocked()
        assert len(ended) == 3


async def test_two_tasks_polling_one_consumer_are_both_served(tmp_path: Path) -> None:
    """A poll that finds nothing must not replace the event another poll waits on."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        got: dict[str, list[bytes]] = {}

        async def poll(name: str, consumer: PullConsumer) -> None:
            got[name] = [m.body for m in await consumer.poll(max_records=1)]

        with trio.fail_after(LIMIT):
            async with (
                Producer("pg", c.namesrv) as producer,
                PullConsumer("cg", c.namesrv) as consumer,
            ):
                consumer.assign(await consumer.fetch_queues(TOPIC))
                await wait_until(
                    lambda: all(consumer.position(q) is not None for q in consumer.assignment()),
                    "positions known",
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(poll, "A", consumer)
                    await trio.testing.wait_all_tasks_blocked()
                    nursery.start_soon(poll, "B", consumer)
                    await trio.testing.wait_all_tasks_blocked()
                    await producer.send(Message(TOPIC, b"first"))
                    await wait_until(lambda: len(got) == 1, "one poll served")
                    await producer.send(Message(TOPIC, b"second"))
        assert sorted(b for bodies in got.values() for b in bodies) == [b"first", b"second"]


async def test_poll_and_interval_options_are_checked() -> None:
    for bad in ({"auto_commit_interval": 0}, {"auto_commit_interval": -1}):
        with pytest.raises(ValueError, match="auto_commit_interval"):
            PullConsumer("cg", "127.0.0.1:1", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rebalance_interval"):
        PullConsumer("cg", "127.0.0.1:1", rebalance_interval=0)
    with pytest.raises(ValueError, match="suspend_timeout_ms"):
        PullConsumer("cg", "127.0.0.1:1", suspend_timeout_ms=-5)
    config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
    async with (
        ClientInstance(config) as instance,
        PullConsumer("cg", instance=instance) as consumer,
    ):
        for records in (0, -1):
            with pytest.raises(ValueError, match="max_records"):
                consumer.poll_nowait(records)
