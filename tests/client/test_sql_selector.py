"""Consumers with ``MessageSelector.by_sql`` against in-process brokers with
``enablePropertyFilter=true``: only the matching messages arrive, the offsets move past the
others, the heartbeat carries the SQL92 subscription (the retry topic stays ``"*"``), and a
malformed expression fails in the client before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from client import MessageSelector as BlockingMessageSelector
from client import PullConsumer as BlockingPullConsumer
from client import SelectorParseError
from client.aio import (
    ConsumeFrom,
    Message,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
)
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from common.subscription import build_subscription
from common.topic import retry_topic
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, Cluster, cluster

GROUP = "cg_sql"
FILTERING = {"enablePropertyFilter": "true"}
SELECTOR = "price > 10 AND region IN ('eu', 'us')"


async def send_priced(c: Cluster) -> set[bytes]:
    """Eight messages with ``price`` and ``region`` properties; the bodies SELECTOR matches."""
    rows = [("5", "eu"), ("15", "eu"), ("20", "asia"), ("11", "us"), ("x", "us"), ("30", "us"),
            ("10", "eu"), ("12", "")]  # fmt: skip
    async with Producer("pg", c.namesrv) as producer:
        for i, (price, region) in enumerate(rows):
            props = {"price": price, "region": region} if region else {"price": price}
            await producer.send(Message(TOPIC, b"m%d" % i, properties=props))
    return {b"m1", b"m3", b"m5"}


def committed(c: Cluster) -> int:
    offsets = c.controllers["broker-a"].offsets
    assert offsets is not None
    return sum(offsets.query_offsets(GROUP, TOPIC).values())


async def test_push_consumer_gets_exactly_the_matching_messages(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1, overrides=FILTERING) as c:
        got: list[ReceivedMessage] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(msgs)
            return ConsumeResult.SUCCESS

        # a held pull wakes only for a matching message: the offset passes the messages after
        # the last match when the hold times out, and reaches the broker at the next persist;
        # so pulls are held 1 s (not 15) and offsets persisted every 0.5 s (not 5)
        consumer = PushConsumer(
            GROUP,
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            suspend_timeout_ms=1000,
            persist_interval=0.5,
        )
        consumer.subscribe(TOPIC, MessageSelector.by_sql(SELECTOR), handle)
        with trio.fail_after(LIMIT):
            async with consumer:
                matching = await send_priced(c)
                await wait_until(lambda: committed(c) == 8, "the offset past all eight")
                assert {m.body for m in got} == matching
                assert len(got) == len(matching)
                broker = c.controllers["broker-a"]
                data = broker.clients.manager.consumer_data(GROUP)
                assert data is not None
                subs = {s.topic: (s.expression_type, s.sub_string) for s in data.subscriptions}
                assert subs == {TOPIC: ("SQL92", SELECTOR), retry_topic(GROUP): ("TAG", "*")}
                assert broker.consumer_filters is not None
                registered = broker.consumer_filters.get(TOPIC, GROUP)
                assert registered is not None
                assert registered.expression == SELECTOR


async def test_pull_consumer_assign_and_subscribe_filter_by_sql(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1, overrides=FILTERING) as c:
        matching = await send_priced(c)
        with trio.fail_after(LIMIT):
            async with PullConsumer(
                GROUP, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
            ) as consumer:
                consumer.assign(
                    await consumer.fetch_queues(TOPIC), MessageSelector.by_sql(SELECTOR)
                )
                got: list[bytes] = []
                while len(got) < len(matching):
                    got.extend(m.body for m in await consumer.poll())
                assert set(got) == matching
                assert len(got) == len(matching)
                mq = (await consumer.fetch_queues(TOPIC))[0]
                await wait_until(lambda: consumer.position(mq) == 8, "the position past all")
            async with PullConsumer(
                "cg_sql_group", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
            ) as grouped:
                grouped.subscribe(TOPIC, MessageSelector.by_sql("price < 11"))
                bodies: list[bytes] = []
                while len(bodies) < 2:
                    bodies.extend(m.body for m in await grouped.poll())
                assert sorted(bodies) == [b"m0", b"m6"]


async def test_blocking_pull_consumer_takes_a_selector(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1, overrides=FILTERING) as c:
        await send_priced(c)

        def run() -> list[bytes]:
            with BlockingPullConsumer(
                GROUP, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
            ) as consumer:
                queues = consumer.fetch_queues(TOPIC)
                consumer.assign(queues, BlockingMessageSelector.by_sql("region = 'asia'"))
                got: list[bytes] = []
                while not got:
                    got.extend(m.body for m in consumer.poll(timeout=LIMIT))
                return got

        with trio.fail_after(LIMIT):
            assert await trio.to_thread.run_sync(run) == [b"m2"]


@pytest.mark.parametrize("bad", ["price >", "", "price > 'x'", "a = 1 b = 2"])
async def test_a_malformed_selector_fails_in_the_client(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SelectorParseError, match="Invalid MessageSelector"):
        MessageSelector.by_sql(bad)
    raw = MessageSelector("SQL92", bad)  # built by hand: checked where it is used
    with pytest.raises(SelectorParseError):
        build_subscription(TOPIC, raw)
    consumer = PushConsumer(GROUP, "127.0.0.1:1")
    with pytest.raises(SelectorParseError):
        consumer.subscribe(TOPIC, raw, lambda msgs: ConsumeResult.SUCCESS)
    assert consumer.consumer_data().subscriptions == ()
    with pytest.raises(ValueError, match="not one of"):
        build_subscription(TOPIC, MessageSelector("CLASS", "x"))


def test_by_tag_is_a_tag_expression() -> None:
    sub = build_subscription(TOPIC, MessageSelector.by_tag("A || B"))
    assert (sub.expression_type, sub.tags_set) == ("TAG", ("A", "B"))
    sql = build_subscription(TOPIC, MessageSelector.by_sql("TAGS = 'A'"))
    assert (sql.expression_type, sql.tags_set, sql.matches_all) == ("SQL92", (), False)
    assert sql.matches_tag("whatever")  # the client never re-checks an SQL92 subscription
