"""Push consumer flow control (RocketMQ's ``pullMessage`` branches): a blocked handler pauses
the queue's pulls at ``pull_threshold_for_queue`` and they resume by themselves once it
drains; options out of RocketMQ's ranges are refused when the consumer is made (before, a
negative threshold or span, or a ``pull_batch_size`` of 0, made a consumer that never
consumed anything, silently or with a WARNING a second)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from client.aio import ConsumeFrom, Message, MessageQueue, Producer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from client.push_consumer import FLOW_CONTROL_PAUSE_S
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, cluster


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("pull_threshold_for_queue", -1),
        ("pull_threshold_for_queue", 0),
        ("pull_threshold_size_for_queue_mib", -1),
        ("pull_threshold_for_topic", 0),
        ("pull_threshold_size_for_topic_mib", -2),
        ("consume_concurrently_max_span", -1),
        ("pull_batch_size", 0),
        ("pull_batch_size", 1025),
        ("consume_message_batch_max_size", 0),
        ("consume_message_batch_max_size", 1025),
        ("consume_thread_max", 0),
    ],
)
def test_out_of_range_flow_control_options_are_refused(option: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"{option} must .*, got {value}$"):
        PushConsumer("cg", "127.0.0.1:9876", **{option: value})


def test_no_topic_limit_is_accepted() -> None:
    PushConsumer("cg", "127.0.0.1:9876", pull_threshold_for_topic=-1)


async def test_a_blocked_handler_pauses_pulls_at_the_threshold_then_they_resume(
    tmp_path: Path,
) -> None:
    topic, threshold, batch, total = "Flow", 40, 8, 200
    mq = MessageQueue(topic, "broker-a", 0)
    gate = threading.Event()
    seen: list[int] = []

    def handler(msgs: list[ReceivedMessage]) -> ConsumeResult:
        gate.wait(LIMIT)
        seen.extend(m.queue_offset for m in msgs)
        return ConsumeResult.SUCCESS

    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        await c.create_topic(topic, 1)
        async with Producer("pg", c.namesrv) as producer:
            for i in range(total):
                await producer.send(Message(topic, b"m%d" % i))
        consumer = PushConsumer(
            "cg_flow",
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            consume_thread_max=2,
            pull_batch_size=batch,
            pull_threshold_for_queue=threshold,
        )
        consumer.subscribe(topic, "*", handler)
        try:
            async with consumer:
                await wait_until(lambda: mq in consumer._queues, "the queue assigned")
                pq = consumer._queues[mq].slot.pq
                await wait_until(lambda: pq.count > threshold, "the threshold reached")
                paused_at = pq.last_pull_ms
                passes_ms = 20 * FLOW_CONTROL_PAUSE_S * 1000
                await wait_until(lambda: pq.last_pull_ms > paused_at + passes_ms, "passes")
                assert pq.count <= threshold + batch  # one pull past the threshold, no more
                gate.set()
                await wait_until(lambda: len(seen) == total, "everything consumed")
        finally:
            gate.set()
    assert sorted(seen) == list(range(total))
