"""``mqadmin statsAll`` and ``mqadmin brokerConsumeStats`` against two in-process brokers, and
the broker requests behind them (VIEW_BROKER_STATS_DATA, GET_BROKER_CONSUME_STATS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client.aio import ConsumeFrom, Message, Producer, PullConsumer
from client.message import ReceivedMessage
from remoting.admin_bodies import decode_broker_stats_data, decode_consume_stats_list
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.admin.harness import as_json, headers_in, ok
from tests.broker.inprocess import LIMIT, req, running_broker, wait_until
from tests.broker.pulls import pull_all, send, send_back
from tests.client.inproc_cluster import TOPIC, cluster

IDLE = "IdleTopic"


async def produce(namesrv: str, singles: int, batch: int) -> None:
    """``singles`` sends of one message and one batch of ``batch`` messages, to TOPIC."""
    async with Producer("pg", namesrv) as producer:
        for i in range(singles):
            await producer.send(Message(TOPIC, f"m{i}".encode()))
        if batch:
            await producer.send_batch([Message(TOPIC, f"b{i}".encode()) for i in range(batch)])


async def consume_all(namesrv: str, group: str, count: int) -> None:
    """Poll ``count`` messages of TOPIC as ``group`` and commit them."""
    consumer = PullConsumer(
        group, namesrv, auto_commit=False, consume_from=ConsumeFrom.FIRST_OFFSET
    )
    async with consumer:
        consumer.subscribe(TOPIC)
        got: list[ReceivedMessage] = []

        async def all_polled() -> bool:
            got.extend(await consumer.poll_for(0.05))
            return len(got) >= count

        await wait_until(all_polled, "every message polled")
        assert len(got) == count
        await consumer.commit()


def rows_of(rows: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["topic"] == topic]


async def test_stats_all_counts_messages_in_and_out(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await c.create_topic(IDLE)
        await produce(c.namesrv, 6, 4)
        rows = await as_json("statsAll", *n)
        [orders] = rows_of(rows, TOPIC)
        assert orders["consumerGroup"] is None  # nobody consumes it yet
        assert (orders["inMsg24Hour"], orders["accumulation"]) == (10, 0)
        assert orders["inTps"] > 0
        [idle] = rows_of(rows, IDLE)
        assert idle["inMsg24Hour"] == 0
        assert rows_of(await as_json("statsAll", *n, "-a"), IDLE) == []  # not active
        text = await ok("statsAll", *n, "-t", TOPIC)
        assert headers_in(text, "#Topic", "#Consumer Group", "#Accumulation", "#InMsg24Hour")
        assert "NO_CONSUMER" in text
        assert IDLE not in text

        await consume_all(c.namesrv, "sg", 10)
        await produce(c.namesrv, 3, 0)

        async def consumed_counted() -> bool:
            [row] = await as_json("statsAll", *n, "-t", TOPIC)
            return row["accumulation"] == 3

        await wait_until(consumed_counted, "the commit seen by the brokers")
        [row] = await as_json("statsAll", *n, "-t", TOPIC, "-a")
        assert row["consumerGroup"] == "sg"
        assert (row["inMsg24Hour"], row["outMsg24Hour"]) == (13, 10)
        assert row["outTps"] > 0


async def test_broker_consume_stats_lists_every_group_queue(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await produce(c.namesrv, 8, 0)
        await consume_all(c.namesrv, "bg", 8)
        await produce(c.namesrv, 5, 0)

        async def diffs() -> list[dict[str, Any]]:
            return [await as_json("brokerConsumeStats", *n, "-b", a) for a in c.brokers.values()]

        async def committed() -> bool:
            return sum(d["totalDiff"] for d in await diffs()) == 5

        await wait_until(committed, "the commit seen by the brokers")
        for answer, addr in zip(await diffs(), c.brokers.values(), strict=True):
            assert answer["brokerAddr"] == addr
            queues = [q for q in answer["queues"] if q["group"] == "bg"]
            assert sorted(q["queueId"] for q in queues) == [0, 1, 2, 3]
            assert sum(q["diff"] for q in queues) == answer["totalDiff"]
        everything = [q for d in await diffs() for q in d["queues"] if q["group"] == "bg"]
        assert sum(q["brokerOffset"] for q in everything) == 13
        assert sum(q["consumerOffset"] for q in everything) == 8
        behind = [
            await as_json("brokerConsumeStats", *n, "-b", a, "-l", "1") for a in c.brokers.values()
        ]
        assert all(q["diff"] >= 1 for d in behind for q in d["queues"])
        assert sum(q["diff"] for d in behind for q in d["queues"]) == 5
        text = await ok("brokerConsumeStats", *n, "-b", next(iter(c.brokers.values())))
        assert headers_in(text, "#Topic", "#Group", "#Broker Name", "#QID", "#Diff", "#LastTime")
        assert "Diff Total: " in text
        assert " bg " in text


async def test_view_broker_stats_data_and_send_backs(tmp_path: Path) -> None:
    topic, group = "StatsTopic", "stats_group"
    async with (
        running_broker(tmp_path) as (_, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        await client.invoke(
            addr,
            req(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                topic=topic,
                readQueueNums="1",
                writeQueueNums="1",
                perm="6",
            ),
        )
        offset = await send(client, addr, topic, b"12345")
        await send(client, addr, topic, b"678")
        assert len(await pull_all(client, addr, topic, 0, group)) == 2
        assert (await send_back(client, addr, offset, group))[0] == ResponseCode.SUCCESS

        async def view(name: str, key: str) -> tuple[int, str, bytes]:
            resp = await client.invoke(
                addr, req(RequestCode.VIEW_BROKER_STATS_DATA, statsName=name, statsKey=key)
            )
            return resp.code, resp.remark or "", resp.body

        code, _, body = await view("TOPIC_PUT_NUMS", topic)
        assert code == ResponseCode.SUCCESS
        data = decode_broker_stats_data(body)
        assert (data.stats_minute.sum, data.stats_hour.sum, data.stats_day.sum) == (2, 2, 2)
        assert data.stats_minute.avgpt == 1.0  # one message a request
        size = decode_broker_stats_data((await view("TOPIC_PUT_SIZE", topic))[2])
        assert size.stats_day.sum == 8  # the bodies' bytes
        got = decode_broker_stats_data((await view("GROUP_GET_NUMS", f"{topic}@{group}"))[2])
        assert (got.stats_minute.sum, got.stats_minute.avgpt) == (2, 2.0)  # one pull of two
        back = decode_broker_stats_data((await view("SNDBCK_PUT_NUMS", f"{topic}@{group}"))[2])
        assert back.stats_day.sum == 1
        assert await view("TOPIC_PUT_NUMS", "Nope") == (
            ResponseCode.SYSTEM_ERROR,
            "The stats <TOPIC_PUT_NUMS> <Nope> not exist",
            b"",
        )


async def test_bad_headers_get_clear_errors(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path) as (_, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        resp = await client.invoke(
            addr, req(RequestCode.VIEW_BROKER_STATS_DATA, statsName="TOPIC_PUT_NUMS")
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "missing header field 'statsKey'"
        resp = await client.invoke(addr, req(RequestCode.GET_BROKER_CONSUME_STATS, isOrder="maybe"))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "'isOrder' must be a boolean" in (resp.remark or "")


async def test_is_order_keeps_only_order_topics(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path) as (_, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        for topic, order in (("Plain", "false"), ("Ordered", "true")):
            create = req(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                topic=topic,
                readQueueNums="1",
                writeQueueNums="1",
                perm="6",
                order=order,
            )
            assert (await client.invoke(addr, create)).code == ResponseCode.SUCCESS
            await send(client, addr, topic, b"x")
            assert len(await pull_all(client, addr, topic, 0, "og")) == 1
            commit = req(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                consumerGroup="og",
                topic=topic,
                queueId="0",
                commitOffset="1",
            )
            assert (await client.invoke(addr, commit)).code == ResponseCode.SUCCESS

        async def topics(is_order: str) -> set[str]:
            resp = await client.invoke(
                addr, req(RequestCode.GET_BROKER_CONSUME_STATS, isOrder=is_order)
            )
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            stats = decode_consume_stats_list(resp.body)
            per_group = dict(stats.groups)
            return {row.topic for s in per_group["og"] for row in s.rows}

        assert await topics("false") == {"Plain", "Ordered"}
        assert await topics("true") == {"Ordered"}
