"""A hung broker (SIGSTOP) cannot take a failed message back: the push consumer sends it to
its retry topic on the other broker, where it comes back once retried (RocketMQ's
``sendMessageBackAsNormalMessage``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import trio

from client.aio import ConsumeFrom, Producer, PushConsumer
from client.config import ClientConfig
from client.consume_service import ConsumeResult
from client.instance import ClientInstance
from client.message import Message, MessageQueue, ReceivedMessage
from common.topic import retry_topic
from tests.e2e.cluster import create_topic, running_cluster, wait_until

TOPIC = "E2E_SendBackFallback"
GROUP = "cg_e2e_fallback"
FAST_LEVELS = {"messageDelayLevel": " ".join(["100ms"] * 18)}
REQUEST_TIMEOUT_S = 0.5
"""The send-back to the stopped broker gives up after this."""


async def test_a_hung_brokers_message_comes_back_from_the_other_broker(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_cluster(
            tmp_path, {"broker-a": FAST_LEVELS, "broker-b": FAST_LEVELS}
        ) as cluster:
            ns, stopped = cluster.namesrv_addr, cluster.brokers["broker-a"]
            for broker in cluster.brokers.values():
                await create_topic(broker.addr, TOPIC, 1)
            calls: list[tuple[str, str, int, str]] = []

            async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
                m = msgs[0]
                calls.append((str(m.queue), m.topic, m.reconsume_times, m.msg_id))
                if len(calls) > 1:
                    return ConsumeResult.SUCCESS
                os.kill(stopped.proc.pid, signal.SIGSTOP)
                return ConsumeResult.RECONSUME_LATER

            config = ClientConfig.create(ns, request_timeout_s=REQUEST_TIMEOUT_S)
            try:
                async with ClientInstance(config) as instance:
                    consumer = PushConsumer(
                        GROUP,
                        instance=instance,
                        consume_from=ConsumeFrom.FIRST_OFFSET,
                        rebalance_interval=0.5,
                    )
                    consumer.subscribe(TOPIC, "*", handle)
                    async with consumer:
                        async with Producer("pg_e2e_fallback", ns) as producer:
                            sent = await producer.send(
                                Message(TOPIC, b"x"), queue=MessageQueue(TOPIC, "broker-a", 0)
                            )
                        await wait_until(lambda: len(calls) >= 2, "the message from broker-b")
                        os.kill(stopped.proc.pid, signal.SIGCONT)  # a quick close
            finally:
                os.kill(stopped.proc.pid, signal.SIGCONT)
            assert calls[:2] == [
                (str(MessageQueue(TOPIC, "broker-a", 0)), TOPIC, 0, sent.msg_id),
                (str(MessageQueue(retry_topic(GROUP), "broker-b", 0)), TOPIC, 1, sent.msg_id),
            ]
