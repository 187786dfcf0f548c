"""The push consumer's options against RocketMQ's ``DefaultMQPushConsumer``: values of the
wrong kind are refused when the consumer is made, by both faces, with an error that names the
option (before, a ``consume_from`` or ``message_model`` given as a string was taken, and the
first heartbeat crashed the consumer in the background, a float ``consume_timestamp_ms`` was
refused by the broker at every rebalance, and an interval of 0 made a loop that never
waited)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import client
from client.aio import (
    ConsumeFrom,
    Message,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SendStatus,
)
from common.clock import wall_clock_ms
from common.topic import retry_topic
from tests.broker.inprocess import running_namesrv, wait_until
from tests.client.inproc_cluster import TOPIC, Cluster, cluster

NAMESRV = "127.0.0.1:9876"  # nothing is sent: the constructor refuses first


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("consume_from", "CONSUME_FROM_FIRST_OFFSET", "consume_from must be one of"),
        ("consume_from", None, "consume_from must be one of"),
        ("message_model", "CLUSTERING", "message_model must be one of"),
        ("orderly", "false", "orderly must be True or False"),
        ("consume_timestamp_ms", 1.7e12, "consume_timestamp_ms must be a whole number"),
        ("consume_timestamp_ms", "20240101000000", "consume_timestamp_ms must be a whole number"),
        ("consume_timestamp_ms", -1, "consume_timestamp_ms must be a whole number"),
        ("persist_interval", 0, "persist_interval must be a number of seconds > 0"),
        ("persist_interval", -1.0, "persist_interval must be a number of seconds > 0"),
        ("rebalance_interval", 0, "rebalance_interval must be a number of seconds > 0"),
    ],
)
def test_options_of_the_wrong_kind_are_refused_when_made(
    option: str, value: Any, expected: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{expected}.*, got {value!r}$"):
        PushConsumer("cg", NAMESRV, **{option: value})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("consume_from", "CONSUME_FROM_FIRST_OFFSET"),
        ("consume_timestamp_ms", 1.7e12),
        ("consume_timestamp_ms", "20240101000000"),
    ],
)
def test_the_pull_consumer_refuses_the_same_start_positions(option: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"^{option} must be .*, got {value!r}$"):
        PullConsumer("cg", NAMESRV, **{option: value})


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("auto_commit_interval", "5", "auto_commit_interval must be a number of seconds > 0"),
        ("auto_commit_interval", True, "auto_commit_interval must be a number of seconds > 0"),
        ("rebalance_interval", 0, "rebalance_interval must be a number of seconds > 0"),
        ("pull_batch_size", "32", r"pull_batch_size must be a whole number in \[1, 1024\]"),
        ("pull_batch_size", 2000, r"pull_batch_size must be a whole number in \[1, 1024\]"),
        ("max_poll_records", 0, "max_poll_records must be a whole number in"),
        ("pull_threshold_for_queue", 1.5, "pull_threshold_for_queue must be a whole number in"),
        ("suspend_timeout_ms", -5, r"suspend_timeout_ms must be a whole number in \[0, "),
        ("pull_max_idle_ms", 1999, r"pull_max_idle_ms must be a whole number in \[2000, "),
        ("pull_retry_delay", "1", "pull_retry_delay must be a number of seconds >= 0"),
        ("auto_commit", "false", "auto_commit must be True or False"),
    ],
)
def test_the_pull_consumer_refuses_options_of_the_wrong_kind_by_name(
    option: str, value: Any, expected: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{expected}.*, got {value!r}$"):
        PullConsumer("cg", NAMESRV, **{option: value})


def test_the_enum_members_and_their_short_aliases_are_taken() -> None:
    for where in (ConsumeFrom.FIRST_OFFSET, ConsumeFrom.CONSUME_FROM_TIMESTAMP):
        for model in MessageModel:
            PushConsumer(
                "cg",
                NAMESRV,
                consume_from=where,
                message_model=model,
                consume_timestamp_ms=0,
                orderly=True,
            )


async def test_a_blocking_consumer_given_a_string_fails_its_start(tmp_path: Path) -> None:
    """The blocking face builds the trio consumer in ``start()``: a string ``consume_from``
    is refused there, instead of a start that returned while the consumer died in the
    background at its first heartbeat; the process's other clients go on working."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:

        def run() -> None:
            consumer = client.PushConsumer("cg", c.namesrv, consume_from="CONSUME_FROM_LAST_OFFSET")
            try:
                with pytest.raises(ValueError, match=r"^consume_from must be one of"):
                    consumer.start()
            finally:
                consumer.close()

        await trio.to_thread.run_sync(run)
        async with Producer("pg", c.namesrv) as producer:
            assert (await producer.send(Message(TOPIC, b"after"))).status is SendStatus.SEND_OK


@pytest.mark.parametrize(
    ("consume_from", "old_retry_seen"),
    [(ConsumeFrom.TIMESTAMP, False), (ConsumeFrom.LAST_OFFSET, True)],
)
async def test_a_new_groups_retry_topic_starts_as_rocketmq_says(
    tmp_path: Path, consume_from: ConsumeFrom, old_retry_seen: bool
) -> None:
    """A group with no offset in a retry topic that holds messages (its offsets removed, say):
    RocketMQ's ``computePullFromWhereWithException`` starts the retry topic at 0 for
    ``CONSUME_FROM_LAST_OFFSET`` but at its end for ``CONSUME_FROM_TIMESTAMP`` (it used to
    start at 0 here for both, replaying retries older than the timestamp)."""
    group = "cg"
    retry = retry_topic(group)
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        await c.create_topic(retry, queues=1)
        async with Producer("pg", c.namesrv) as producer:
            await producer.send(Message(retry, b"old", properties={"RETRY_TOPIC": TOPIC}))
            seen: list[bytes] = []
            consumer = PushConsumer(
                group, c.namesrv, consume_from=consume_from, consume_timestamp_ms=wall_clock_ms()
            )
            consumer.subscribe(TOPIC, "*", lambda msgs: seen.extend(m.body for m in msgs))
            async with consumer:
                mq = MessageQueue(retry, "broker-a", 0)
                await wait_until(lambda: mq in consumer.assignment(), "the retry queue started")
                await producer.send(Message(retry, b"new", properties={"RETRY_TOPIC": TOPIC}))
                await wait_until(lambda: b"new" in seen, "the new retry consumed")
        assert (b"old" in seen) is old_retry_seen


async def test_pull_interval_pauses_a_queue_after_each_pull_that_found_messages(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """RocketMQ's ``pullInterval``: after a pull that brought messages, the queue's next pull
    waits that long (virtual time here). It was no option at all."""
    interval_s, batch = 60.0, 2
    async with running_namesrv() as namesrv, trio.open_nursery() as nursery:
        c = Cluster(namesrv)
        await nursery.start(c.run_broker, tmp_path, "broker-a", None)
        await c.create_topic(TOPIC, queues=1)
        async with Producer("pg", c.namesrv) as producer:
            for i in range(2 * batch):
                await producer.send(Message(TOPIC, b"m%d" % i))
        came: list[float] = []
        consumer = PushConsumer(
            "cg",
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            pull_batch_size=batch,
            pull_interval_ms=int(interval_s * 1000),
            pull_max_idle_ms=300_000,
        )

        async def handle(msgs: list[ReceivedMessage]) -> None:  # in the loop: its clock
            came.extend(trio.current_time() for _ in msgs)

        consumer.subscribe(TOPIC, "*", handle)
        async with consumer:
            await wait_until(lambda: len(came) == 2 * batch, "both pulls consumed", limit=600)
        nursery.cancel_scope.cancel()
    assert came[batch] - came[batch - 1] >= interval_s


def test_pull_interval_is_in_rocketmqs_range_and_fits_the_stall_bound() -> None:
    with pytest.raises(ValueError, match=r"^pull_interval_ms must be in \[0, 65535\], got -1$"):
        PushConsumer("cg", NAMESRV, pull_interval_ms=-1)
    with pytest.raises(ValueError, match=r"^pull_max_idle_ms \(120000\) must be at least twice"):
        PushConsumer("cg", NAMESRV, pull_interval_ms=65535)
    PushConsumer("cg", NAMESRV, pull_interval_ms=65535, pull_max_idle_ms=170_000)
