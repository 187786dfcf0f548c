"""SQL92 pulls (``enablePropertyFilter=true``) on an in-process BrokerController: the records
whose properties match come back, the others are skipped with the offsets moving past them, a
malformed expression is SUBSCRIPTION_PARSE_FAILED, and a held pull wakes only for a match."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from broker.consumer_filter import ConsumerFilterManager, commit_log_matcher
from broker.controller import BrokerController
from common.message import PULL_FLAG_SUSPEND
from common.record import MessageRecord, decode_records, encode_properties, encode_record
from common.route import TopicConfig
from common.sql_filter import compile_sql
from common.subscription import MessageSelector, build_subscription
from remoting.client import RemotingClient
from remoting.client_bodies import ConsumerData, HeartbeatData, encode_heartbeat
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from tests.broker.inprocess import LIMIT, req, running_broker, wait_until

TOPIC = "TopicSql"
GROUP = "cg-sql"
pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def sql_broker(
    tmp_path: Path, enabled: bool = True
) -> AsyncIterator[tuple[BrokerController, str, RemotingClient]]:
    overrides = {"enablePropertyFilter": str(enabled).lower()}
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=overrides) as (broker, addr),
            RemotingClient(default_timeout_s=LIMIT) as client,
        ):
            assert broker.topics is not None
            broker.topics.create_or_update(TopicConfig(TOPIC, 1, 1))
            yield broker, addr, client


async def send(client: RemotingClient, addr: str, body: bytes, **props: str) -> None:
    request = req(
        RequestCode.SEND_MESSAGE,
        body,
        producerGroup="pg",
        topic=TOPIC,
        queueId="0",
        bornTimestamp="1700000000000",
        properties=encode_properties(props).decode(),
    )
    resp = await client.invoke(addr, request)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def pull_req(
    expression: str, offset: int = 0, expression_type: str = "SQL92", **fields: ExtValue
) -> RemotingCommand:
    fields.setdefault("maxMsgNums", "32")
    fields.setdefault("subVersion", "1")
    return req(
        RequestCode.PULL_MESSAGE,
        consumerGroup=GROUP,
        topic=TOPIC,
        queueId="0",
        queueOffset=str(offset),
        subscription=expression,
        expressionType=expression_type,
        **fields,
    )


async def send_numbered(broker: BrokerController, client: RemotingClient, addr: str) -> None:
    """Six messages: body ``m<i>``, property ``a=<i>``, and ``color`` on some."""
    for i in range(6):
        color = {"color": "red" if i % 2 else "blue"} if i != 5 else {}
        await send(client, addr, b"m%d" % i, a=str(i), **color)
    store = broker.store
    assert store is not None
    await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 6, "dispatch")


def bodies(resp: RemotingCommand) -> list[bytes]:
    return [r.body for r in decode_records(resp.body)]


async def test_sql_pull_returns_exactly_the_matching_messages(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        await send_numbered(broker, client, addr)
        cases = [
            ("a >= 3", [b"m3", b"m4", b"m5"]),
            ("color = 'red' AND a < 5", [b"m1", b"m3"]),
            ("color IS NULL", [b"m5"]),
            ("color NOT IN ('blue')", [b"m1", b"m3"]),  # null (m5) does not match NOT IN
            ("a BETWEEN 1 AND 2 OR color ENDSWITH 'lue'", [b"m0", b"m1", b"m2", b"m4"]),
        ]
        for expression, expected in cases:
            resp = await client.invoke(addr, pull_req(expression))
            assert resp.code == ResponseCode.SUCCESS, (expression, resp.remark)
            assert bodies(resp) == expected, expression
            assert resp.ext_fields["nextBeginOffset"] == "6"  # scanned past the skipped ones


async def test_skipped_messages_advance_the_offsets(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        await send_numbered(broker, client, addr)
        resp = await client.invoke(addr, pull_req("a >= 1 AND a <> 2", maxMsgNums="2"))
        assert bodies(resp) == [b"m1", b"m3"]
        assert resp.ext_fields["nextBeginOffset"] == "4"
        # nothing matches: the answer of a tag pull that matched nothing, past every message
        resp = await client.invoke(addr, pull_req("a > 100"))
        assert (resp.code, resp.body) == (ResponseCode.PULL_RETRY_IMMEDIATELY, b"")
        assert resp.ext_fields["nextBeginOffset"] == "6"
        # a string property compared with a number fails in RocketMQ: no match, no error
        resp = await client.invoke(addr, pull_req("color > 1"))
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        resp = await client.invoke(addr, pull_req("a > 100", offset=6))
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert resp.ext_fields["nextBeginOffset"] == "6"
        assert broker.offsets is not None
        assert broker.offsets.query_pull_offset(GROUP, TOPIC, 0) == 6


async def test_a_tag_pull_is_unchanged_on_a_filtering_broker(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        await send(client, addr, b"t", TAGS="TagA", a="1")
        await send(client, addr, b"u", TAGS="TagB", a="2")
        store = broker.store
        assert store is not None
        await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 2, "dispatch")
        for expression_type in ("TAG", ""):
            resp = await client.invoke(addr, pull_req("TagB", expression_type=expression_type))
            assert bodies(resp) == [b"u"]
        # the SQL filter sees the system properties too
        resp = await client.invoke(addr, pull_req("TAGS = 'TagA'"))
        assert bodies(resp) == [b"t"]


async def test_property_filter_off_refuses_sql_as_before(tmp_path: Path) -> None:
    async with sql_broker(tmp_path, enabled=False) as (broker, addr, client):
        await send(client, addr, b"x", a="1")
        for expression in ("a = 1", "a >", ""):
            resp = await client.invoke(addr, pull_req(expression))
            assert (resp.code, resp.remark) == (
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by SQL92",
            )
            assert "nextBeginOffset" not in resp.ext_fields
        assert broker.consumer_filters is None


async def test_malformed_or_unknown_expressions_are_refused(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        await send(client, addr, b"x", a="1")
        for expression in ("a >", "", "a = 1 garbage", "a > 'text'"):
            resp = await client.invoke(addr, pull_req(expression))
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, expression
            assert resp.remark is not None
            assert resp.remark.startswith("parse the consumer's subscription failed")
            assert "nextBeginOffset" not in resp.ext_fields
        resp = await client.invoke(addr, pull_req("a = 1", expression_type="CLASS"))
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The broker does not support consumer to filter message by CLASS",
        )
        assert broker.offsets is not None
        assert broker.offsets.query_pull_offset(GROUP, TOPIC, 0) < 0  # nothing was read


async def test_held_sql_pull_wakes_only_for_a_matching_message(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        store = broker.store
        assert store is not None
        answers: list[RemotingCommand] = []
        held = pull_req("a > 10", sysFlag=str(PULL_FLAG_SUSPEND), suspendTimeoutMillis="60000")

        async def pull() -> None:
            answers.append(await client.invoke(addr, held, timeout_s=70))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pull)
            await wait_until(lambda: broker.holds.parked_count(TOPIC, 0) == 1, "parked")
            for value in ("1", "abc", "5"):
                await send(client, addr, b"no", a=value)
            await send(client, addr, b"none")
            await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 4, "dispatch")
            # a round trip: the woken pull has re-read by now and must still be parked
            await client.invoke(addr, req(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId="0"))
            assert not answers
            assert broker.holds.parked_count(TOPIC, 0) == 1
            await send(client, addr, b"yes", a="11")
        (resp,) = answers
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert bodies(resp) == [b"yes"]
        assert resp.ext_fields["nextBeginOffset"] == "5"


async def test_a_suspending_sql_pull_with_only_skipped_messages_is_not_held(
    tmp_path: Path,
) -> None:
    """As a tag pull: messages the filter skipped are answered at once (PULL_RETRY_IMMEDIATELY
    past them); the pull from there is held and times out with PULL_NOT_FOUND."""
    async with sql_broker(tmp_path) as (broker, addr, client):
        store = broker.store
        assert store is not None
        await send(client, addr, b"no", a="1")
        await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 1, "dispatch")
        suspend = {"sysFlag": str(PULL_FLAG_SUSPEND), "suspendTimeoutMillis": "200"}
        resp = await client.invoke(addr, pull_req("a > 10", **suspend))
        assert (resp.code, resp.body) == (ResponseCode.PULL_RETRY_IMMEDIATELY, b"")
        assert resp.ext_fields["nextBeginOffset"] == "1"
        resp = await client.invoke(addr, pull_req("a > 10", offset=1, **suspend))
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert resp.ext_fields["nextBeginOffset"] == "1"
        assert broker.holds.parked_count() == 0


async def test_an_expression_is_compiled_once_per_group_topic_and_version(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        await send(client, addr, b"x", a="1")
        filters = broker.consumer_filters
        assert filters is not None
        await client.invoke(addr, pull_req("a = 1"))
        first = filters.get(TOPIC, GROUP)
        assert first is not None
        await client.invoke(addr, pull_req("a = 1"))
        assert filters.get(TOPIC, GROUP) is first  # the same entry: not compiled again
        resp = await client.invoke(addr, pull_req("a = 2", subVersion="2"))
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        changed = filters.get(TOPIC, GROUP)
        assert changed is not None
        assert (changed.expression, changed.client_version) == ("a = 2", 2)


async def test_a_heartbeat_registers_the_group_s_sql_subscription(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        sql = MessageSelector.by_sql("a > 1")
        consumer = ConsumerData(GROUP, subscriptions=(build_subscription(TOPIC, sql, 42),))
        body = encode_heartbeat(HeartbeatData("client-1", consumers=(consumer,)))
        resp = await client.invoke(addr, req(RequestCode.HEART_BEAT, body))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert broker.consumer_filters is not None
        data = broker.consumer_filters.get(TOPIC, GROUP)
        assert data is not None
        assert (data.expression, data.expression_type, data.client_version) == (
            "a > 1",
            "SQL92",
            42,
        )
        assert data.selector.matches({"a": "2"})


async def test_a_group_s_filters_retire_when_its_last_consumer_leaves(tmp_path: Path) -> None:
    async with sql_broker(tmp_path) as (broker, addr, client):
        sql = MessageSelector.by_sql("a > 1")
        consumer = ConsumerData(GROUP, subscriptions=(build_subscription(TOPIC, sql, 42),))
        for client_id in ("client-1", "client-2"):
            body = encode_heartbeat(HeartbeatData(client_id, consumers=(consumer,)))
            resp = await client.invoke(addr, req(RequestCode.HEART_BEAT, body))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert broker.consumer_filters is not None
        data = broker.consumer_filters.get(TOPIC, GROUP)
        assert data is not None

        async def leave(client_id: str) -> None:
            request = req(RequestCode.UNREGISTER_CLIENT, clientID=client_id, consumerGroup=GROUP)
            resp = await client.invoke(addr, request)
            assert resp.code == ResponseCode.SUCCESS, resp.remark

        await leave("client-1")
        assert not data.is_dead  # client-2 still subscribes
        await leave("client-2")
        assert data.is_dead
        body = encode_heartbeat(HeartbeatData("client-3", consumers=(consumer,)))
        resp = await client.invoke(addr, req(RequestCode.HEART_BEAT, body))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert broker.consumer_filters.get(TOPIC, GROUP) is data
        assert not data.is_dead  # back within the day: the compiled filter is kept


# --------------------------------------------------------------------------- the manager, pure


def test_register_follows_rocketmq_s_versions() -> None:
    now = [1000]
    filters = ConsumerFilterManager(clock_ms=lambda: now[0])
    assert filters.register("t", "g", "a = 1", "SQL92", 5)
    data = filters.get("t", "g")
    assert data is not None
    assert not filters.register("t", "g", "a = 2", "SQL92", 4)  # older: ignored
    assert not filters.register("t", "g", "a = 1", "SQL92", 6)  # same text: version only
    assert filters.get("t", "g") is data
    assert data.client_version == 6
    assert filters.register("t", "g", "a = 3", "SQL92", 7)  # newer text: recompiled
    newer = filters.get("t", "g")
    assert newer is not None
    assert newer.expression == "a = 3"
    assert not filters.register("t", "g", "a >", "SQL92", 8)  # does not parse: dropped
    assert filters.get("t", "g") is None
    assert not filters.register("t", "g", "TagA", "TAG", 9)
    assert not filters.register("t", "g", "", "SQL92", 9)
    assert filters.get("t", "g") is None


def test_heartbeats_register_and_retire_a_group_s_filters() -> None:
    now = [1000]
    filters = ConsumerFilterManager(clock_ms=lambda: now[0])
    sql = build_subscription("t1", None)
    subs = [
        sql.__class__(topic="t1", sub_string="a = 1", sub_version=3, expression_type="SQL92"),
        build_subscription("t2", "TagA"),
    ]
    filters.register_group("g", subs)
    data = filters.get("t1", "g")
    assert data is not None
    assert filters.get("t2", "g") is None
    now[0] = 2000
    filters.register_group("g", subs[1:])  # t1 no longer subscribed: dead
    assert data.is_dead
    filters.register_group("g", subs)  # same version again: revived
    assert not data.is_dead
    filters.register_group("g", [])
    now[0] += 24 * 3600 * 1000
    filters.register_group("g", [])  # dead for a day: dropped
    assert filters.get("t1", "g") is None


def test_an_unregistered_group_s_filters_die_and_go_a_day_later() -> None:
    now = [1000]
    filters = ConsumerFilterManager(clock_ms=lambda: now[0])
    filters.register("t1", "g", "a = 1", "SQL92", 1)
    filters.register("t2", "g", "a = 2", "SQL92", 1)
    filters.register("t1", "other", "a = 3", "SQL92", 1)
    filters.unregister_group("g")
    for topic in ("t1", "t2"):
        data = filters.get(topic, "g")
        assert data is not None
        assert data.is_dead
    other = filters.get("t1", "other")
    assert other is not None
    assert not other.is_dead
    now[0] += 24 * 3600 * 1000
    filters.unregister_group("nobody")
    assert filters.get("t1", "g") is None
    assert filters.get("t2", "g") is None
    assert filters.get("t1", "other") is other


def test_commit_log_matcher_reads_the_record_properties() -> None:
    record = encode_record(MessageRecord(topic="t", body=b"b" * 50, properties={"a": "7"}))
    assert commit_log_matcher(compile_sql("a = 7"))(record)
    assert not commit_log_matcher(compile_sql("a = 8"))(record)
    assert not commit_log_matcher(compile_sql("a IS NULL"))(record[:60])  # truncated: no match
