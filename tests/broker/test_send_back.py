"""CONSUMER_SEND_MSG_BACK through an in-process broker: retry messages with RocketMQ's
properties and delay levels, the dead-letter queue after the last retry, and the refusals."""

from __future__ import annotations

from pathlib import Path

import trio

from broker.controller import BrokerController
from broker.processors.group_admin import encode_subscription_group
from broker.subscription_group import SubscriptionGroupConfig
from common.message import MessageConst
from common.message_id import create_offset_msg_id
from common.route import PermName
from common.topic import SCHEDULE_TOPIC
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req, running_broker, wait_until
from tests.broker.pulls import pull_all, send, send_back

GROUP = "cg"
RETRY = "%RETRY%cg"
DLQ = "%DLQ%cg"
FAST_LEVELS = {"messageDelayLevel": " ".join(["10ms"] * 18)}


async def test_send_back_goes_to_retry_at_level_3_plus_reconsume_times(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            props = {"UNIQ_KEY": "U1", "TAGS": "tagA", "KEYS": "k1"}
            offset = await send(client, addr, "T", b"payload", queue_id=1, **props)
            assert await send_back(client, addr, offset, GROUP) == (ResponseCode.SUCCESS, "")

            assert broker.topics is not None
            retry = broker.topics.select(RETRY)
            assert retry is not None
            assert (retry.read_queue_nums, retry.write_queue_nums) == (1, 1)
            assert retry.perm == PermName.PERM_READ | PermName.PERM_WRITE
            # reconsume times 0 -> level 3 -> SCHEDULE_TOPIC_XXXX queue 2 (10 s: not yet due)
            (rec,) = await pull_all(client, addr, SCHEDULE_TOPIC, 2)
            assert rec.body == b"payload"
            assert rec.reconsume_times == 1
            assert rec.properties[MessageConst.REAL_TOPIC] == RETRY
            assert rec.properties[MessageConst.REAL_QID] == "0"
            assert rec.properties[MessageConst.DELAY] == "3"
            assert rec.properties[MessageConst.RETRY_TOPIC] == "T"
            assert rec.properties[MessageConst.ORIGIN_MESSAGE_ID] == "U1"
            assert rec.properties[MessageConst.UNIQ_KEY] == "U1"
            assert (rec.tags, rec.keys) == ("tagA", ["k1"])
            assert await pull_all(client, addr, RETRY) == []

            # a message already retried 4 times goes to level 7; an explicit level is kept
            offset = await send(client, addr, "T", b"again", reconsume_times=4, UNIQ_KEY="U2")
            assert (await send_back(client, addr, offset, GROUP))[0] == ResponseCode.SUCCESS
            (rec,) = await pull_all(client, addr, SCHEDULE_TOPIC, 6)
            assert (rec.body, rec.reconsume_times, rec.properties["DELAY"]) == (b"again", 5, "7")
            code, _ = await send_back(client, addr, offset, GROUP, delay_level=5)
            assert code == ResponseCode.SUCCESS
            (rec,) = await pull_all(client, addr, SCHEDULE_TOPIC, 4)
            assert rec.properties[MessageConst.DELAY] == "5"
            # a level beyond the last is clamped to it
            code, _ = await send_back(client, addr, offset, GROUP, delay_level=99)
            assert code == ResponseCode.SUCCESS
            (rec,) = await pull_all(client, addr, SCHEDULE_TOPIC, 17)
            assert rec.properties[MessageConst.DELAY] == "18"


async def test_origin_id_without_uniq_key_and_retry_topic_kept(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=FAST_LEVELS) as (broker, addr),
            RemotingClient() as client,
        ):
            offset = await send(client, addr, "T", b"no-uniq")
            assert (await send_back(client, addr, offset, GROUP))[0] == ResponseCode.SUCCESS
            await wait_until(lambda: broker_has(broker, RETRY, 1), "the retry message delivered")
            (rec,) = await pull_all(client, addr, RETRY)
            assert broker.port is not None
            offset_id = create_offset_msg_id("127.0.0.1", broker.port, offset)
            assert rec.properties[MessageConst.ORIGIN_MESSAGE_ID] == offset_id
            assert MessageConst.DELAY not in rec.properties
            # sent back again from the retry topic: RETRY_TOPIC and the origin id stay
            code, _ = await send_back(client, addr, rec.physical_offset, GROUP)
            assert code == ResponseCode.SUCCESS
            await wait_until(lambda: broker_has(broker, RETRY, 2), "the second retry")
            second = (await pull_all(client, addr, RETRY))[1]
            assert second.properties[MessageConst.RETRY_TOPIC] == "T"
            assert second.properties[MessageConst.ORIGIN_MESSAGE_ID] == offset_id
            assert second.reconsume_times == 2


def broker_has(broker: BrokerController, topic: str, count: int) -> bool:
    assert broker.store is not None
    return broker.store.get_max_offset_in_queue(topic, 0) >= count


async def test_seventeenth_failure_goes_to_the_dlq(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with (
            running_broker(tmp_path, overrides=FAST_LEVELS) as (broker, addr),
            RemotingClient() as client,
        ):
            offset = await send(client, addr, "T", b"doomed", UNIQ_KEY="U9")
            for attempt in range(1, 17):  # failures 1..16 go to the retry topic
                assert (await send_back(client, addr, offset, GROUP))[0] == 0
                await wait_until(lambda n=attempt: broker_has(broker, RETRY, n), f"retry {attempt}")
                rec = (await pull_all(client, addr, RETRY))[attempt - 1]
                assert rec.reconsume_times == attempt
                offset = rec.physical_offset
            assert await pull_all(client, addr, DLQ) == []
            # the 17th failure (reconsume times 16 >= 16) is a dead letter, stored at once
            assert (await send_back(client, addr, offset, GROUP))[0] == 0
            (dead,) = await pull_all(client, addr, DLQ)
            assert dead.body == b"doomed"
            assert dead.reconsume_times == 17
            assert dead.properties[MessageConst.ORIGIN_MESSAGE_ID] == "U9"
            assert dead.properties[MessageConst.RETRY_TOPIC] == "T"
            assert MessageConst.DELAY not in dead.properties
            assert broker.topics is not None
            dlq = broker.topics.select(DLQ)
            assert dlq is not None
            assert (dlq.read_queue_nums, dlq.write_queue_nums) == (1, 1)
            assert len(await pull_all(client, addr, RETRY)) == 16


async def test_dlq_rules_max_times_header_group_and_negative_level(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (_, addr), RemotingClient() as client:
            offset = await send(client, addr, "T", b"m", reconsume_times=2)
            # the header's maxReconsumeTimes replaces the group's 16, smaller or larger
            tried = await send(client, addr, "T", b"tried", reconsume_times=16)
            code, _ = await send_back(client, addr, tried, GROUP, max_reconsume_times=20)
            assert code == ResponseCode.SUCCESS
            assert await pull_all(client, addr, DLQ) == []  # a retry (level 18) instead
            code, _ = await send_back(client, addr, offset, GROUP, max_reconsume_times=3)
            assert code == ResponseCode.SUCCESS
            assert await pull_all(client, addr, DLQ) == []
            code, _ = await send_back(client, addr, offset, GROUP, max_reconsume_times=2)
            assert code == ResponseCode.SUCCESS
            assert len(await pull_all(client, addr, DLQ)) == 1
            # delayLevel < 0: straight to the DLQ
            first = await send(client, addr, "T", b"first")
            code, _ = await send_back(client, addr, first, GROUP, delay_level=-1)
            assert code == ResponseCode.SUCCESS
            assert [r.body for r in await pull_all(client, addr, DLQ)] == [b"m", b"first"]
            # no header: the group's retryMaxTimes
            config = SubscriptionGroupConfig("g2", retry_max_times=2)
            resp = await client.invoke(
                addr,
                req(
                    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                    encode_subscription_group(config),
                ),
            )
            assert resp.code == ResponseCode.SUCCESS
            code, _ = await send_back(client, addr, offset, "g2", max_reconsume_times=None)
            assert code == ResponseCode.SUCCESS
            assert len(await pull_all(client, addr, "%DLQ%g2")) == 1


async def test_refusals(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            code, remark = await send_back(client, addr, 123456, GROUP)
            assert code == ResponseCode.SYSTEM_ERROR
            assert remark == "look message by offset failed, 123456"
            offset = await send(client, addr, "T", b"m")
            # retryQueueNums 0: answered SUCCESS, nothing stored
            config = SubscriptionGroupConfig("g0", retry_queue_nums=0)
            body = encode_subscription_group(config)
            resp = await client.invoke(
                addr, req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body)
            )
            assert resp.code == ResponseCode.SUCCESS
            assert (await send_back(client, addr, offset, "g0"))[0] == ResponseCode.SUCCESS
            assert broker.topics is not None
            assert broker.topics.select("%RETRY%g0") is None
            code, _ = await send_back(client, addr, offset, "bad group!")
            assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            resp = await client.invoke(addr, req(RequestCode.CONSUMER_SEND_MSG_BACK, group=GROUP))
            assert resp.code == ResponseCode.SYSTEM_ERROR  # missing offset header


async def test_send_back_refused_when_group_unknown_and_no_auto_create(tmp_path: Path) -> None:
    overrides = {"autoCreateSubscriptionGroup": "false"}
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=overrides) as (_, addr),
            RemotingClient() as client,
        ):
            offset = await send(client, addr, "T", b"m")
            code, remark = await send_back(client, addr, offset, GROUP)
            assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            assert GROUP in remark


async def test_a_dead_letter_retried_by_another_group_keeps_the_topic_that_group_read(
    tmp_path: Path,
) -> None:
    """A message read from ``%DLQ%cg`` by group ``fixer`` and sent back: its RETRY_TOPIC is
    the DLQ topic fixer subscribed to, not the first group's topic (``T``), which fixer has
    no handler for; and it stays so across fixer's own retries."""
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=FAST_LEVELS) as (broker, addr),
            RemotingClient() as client,
        ):
            offset = await send(client, addr, "T", b"dead", UNIQ_KEY="U1")
            assert (await send_back(client, addr, offset, GROUP, delay_level=-1))[0] == 0
            (dead,) = await pull_all(client, addr, DLQ)
            assert dead.properties[MessageConst.RETRY_TOPIC] == "T"
            assert (await send_back(client, addr, dead.physical_offset, "fixer"))[0] == 0
            await wait_until(lambda: broker_has(broker, "%RETRY%fixer", 1), "fixer's retry")
            (retry,) = await pull_all(client, addr, "%RETRY%fixer")
            assert retry.properties[MessageConst.RETRY_TOPIC] == DLQ
            assert retry.properties[MessageConst.ORIGIN_MESSAGE_ID] == "U1"
            assert (await send_back(client, addr, retry.physical_offset, "fixer"))[0] == 0
            await wait_until(lambda: broker_has(broker, "%RETRY%fixer", 2), "the second retry")
            second = (await pull_all(client, addr, "%RETRY%fixer"))[1]
            assert second.properties[MessageConst.RETRY_TOPIC] == DLQ


async def test_the_clients_count_of_tries_is_kept_in_the_dead_letter(tmp_path: Path) -> None:
    """An orderly consumer retries in place, so only it knows how often a message was tried:
    the header's ``reconsumeTimes`` counts when larger than the stored record's."""
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (_, addr), RemotingClient() as client:
            offset = await send(client, addr, "T", b"orderly")
            code, _ = await send_back(
                client, addr, offset, GROUP, delay_level=-1, reconsume_times=3
            )
            assert code == ResponseCode.SUCCESS
            tried = await send(client, addr, "T", b"stored count", reconsume_times=5)
            code, _ = await send_back(client, addr, tried, GROUP, delay_level=-1, reconsume_times=1)
            assert code == ResponseCode.SUCCESS
            code, _ = await send_back(
                client, addr, offset, GROUP, delay_level=-1, reconsume_times=-7
            )
            assert code == ResponseCode.SUCCESS
            dead = await pull_all(client, addr, DLQ)
            assert [(r.body, r.reconsume_times) for r in dead] == [
                (b"orderly", 4),
                (b"stored count", 6),
                (b"orderly", 1),
            ]
