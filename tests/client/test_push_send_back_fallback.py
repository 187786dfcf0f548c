"""A failed send-back falls back to the client's inner producer (RocketMQ's
``sendMessageBackAsNormalMessage``): the message is sent to the group's retry topic on a broker
that still takes it; only when that fails too is it consumed again locally."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.aio import ConsumeFrom, Producer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import Message, MessageQueue, ReceivedMessage
from common.message import MessageConst
from common.topic import retry_topic
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req, wait_until
from tests.client.inproc_cluster import TOPIC, Cluster, cluster
from tests.client.test_push_retry_orderly import FAST_LEVELS, read_dlq

Seen = tuple[str, str, int, bytes, str | None, list[str], str]


def _seen(m: ReceivedMessage) -> Seen:
    """What the handler saw (a message consumed here again is the same object, updated)."""
    return (m.queue.broker_name, m.topic, m.reconsume_times, m.body, m.tags, m.keys, m.msg_id)


async def _send_to_broker_a(c: Cluster) -> str:
    """One message with tags and keys, stored by broker-a; its id."""
    async with Producer("pg", c.namesrv) as producer:
        msg = Message(TOPIC, b"payload", tags="TagA", keys=["k1", "k2"])
        result = await producer.send(msg, queue=MessageQueue(TOPIC, "broker-a", 0))
    return result.msg_id


async def test_a_send_back_to_a_dead_broker_goes_to_the_retry_topic_elsewhere(
    tmp_path: Path,
) -> None:
    """broker-a stored the message and dies while the handler runs: the message comes back
    through ``%RETRY%<group>`` on broker-b, once retried, under its own topic and id."""
    async with cluster(tmp_path, overrides=FAST_LEVELS) as c:
        calls: list[Seen] = []
        last: list[ReceivedMessage] = []

        async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            calls.extend(map(_seen, msgs))
            last[:] = msgs
            if len(calls) > 1:
                return ConsumeResult.SUCCESS
            await c.stop_broker("broker-a")
            return ConsumeResult.RECONSUME_LATER

        consumer = PushConsumer(
            "fb", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, rebalance_interval=0.5
        )
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer:
            msg_id = await _send_to_broker_a(c)
            await wait_until(lambda: len(calls) >= 2, "the message back from broker-b")
        assert calls[:2] == [
            ("broker-a", TOPIC, 0, b"payload", "TagA", ["k1", "k2"], msg_id),
            ("broker-b", TOPIC, 1, b"payload", "TagA", ["k1", "k2"], msg_id),
        ]
        again = last[0]
        assert again.queue.topic == retry_topic("fb")
        assert again.properties[MessageConst.ORIGIN_MESSAGE_ID] == msg_id
        assert MessageConst.RECONSUME_TIME not in again.properties


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_a_spent_message_whose_broker_died_goes_to_the_dlq_elsewhere(
    tmp_path: Path, orderly: bool
) -> None:
    """``max_reconsume_times=0``: the one failure sends the message to ``%DLQ%<group>``; its
    broker dead, the fallback's send to the retry topic is redirected there by broker-b."""
    async with cluster(tmp_path, overrides=FAST_LEVELS) as c:
        calls: list[ReceivedMessage] = []

        async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            calls.extend(msgs)
            await c.stop_broker("broker-a")
            return ConsumeResult.RECONSUME_LATER

        consumer = PushConsumer(
            "dl",
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            max_reconsume_times=0,
            orderly=orderly,
            rebalance_interval=0.5,
        )
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer:
            msg_id = await _send_to_broker_a(c)
            got = await read_dlq(c.namesrv, "dl", 1, broker="broker-b")
        assert [(m.body, m.msg_id, m.reconsume_times) for m in got] == [(b"payload", msg_id, 1)]
        assert got[0].properties[MessageConst.RETRY_TOPIC] == TOPIC
        assert len(calls) == 1


async def _forbid_writes(addr: str) -> None:
    """``updateBrokerConfig -k brokerPermission -v 4``: the broker takes no more writes."""
    async with RemotingClient() as client:
        cmd = req(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
        resp = await client.invoke(addr, cmd)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_when_the_fallback_fails_too_the_message_is_retried_here(tmp_path: Path) -> None:
    """The only broker stops taking writes while the handler runs: neither the send-back nor
    the send to the retry topic stores the message, so it is consumed here again."""
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST_LEVELS) as c:
        calls: list[Seen] = []
        queues: list[MessageQueue] = []

        async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            calls.extend(map(_seen, msgs))
            queues.extend(m.queue for m in msgs)
            if len(calls) > 1:
                return ConsumeResult.SUCCESS
            await _forbid_writes(c.brokers["broker-a"])
            return ConsumeResult.RECONSUME_LATER

        consumer = PushConsumer("lo", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer:
            msg_id = await _send_to_broker_a(c)
            await wait_until(lambda: len(calls) >= 2, "the message consumed here again")
        assert calls[:2] == [
            ("broker-a", TOPIC, 0, b"payload", "TagA", ["k1", "k2"], msg_id),
            ("broker-a", TOPIC, 1, b"payload", "TagA", ["k1", "k2"], msg_id),
        ]
        assert queues[0] == queues[1] == MessageQueue(TOPIC, "broker-a", 0)  # nothing stored
