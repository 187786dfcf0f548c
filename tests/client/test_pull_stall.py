"""A group-mode PullConsumer whose event loop stalled past ``pull_max_idle_ms`` (as when its
process is frozen), against an in-process name server and broker.

Blocking the loop with ``time.sleep`` freezes the in-process broker too, so no other member
takes the queues here (tests/e2e/test_pull_group.py freezes a member process while others run);
these tests pin down what the consumer itself does after the stall: it drops what it had
pulled, writes back the consumed offsets nobody went past, and starts again from the committed
offsets.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from client import api
from client.aio import ConsumeFrom, Producer, PullConsumer
from client.message import Message, MessageQueue, ReceivedMessage
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster

MAX_IDLE_MS = 2000
"""The consumers' ``pull_max_idle_ms`` (the smallest allowed)."""
N = 40


def stall() -> None:
    """Block the event loop (consumer and brokers alike) for longer than ``MAX_IDLE_MS``."""
    time.sleep(MAX_IDLE_MS / 1000 + 0.3)


def buffered(consumer: PullConsumer) -> int:
    """How many pulled messages wait in the consumer for a poll."""
    return sum(len(batch.messages) - batch.taken for batch in consumer._buffer)


def consumed(consumer: PullConsumer) -> dict[MessageQueue, int | None]:
    """Each assigned queue's consumed offset: what polls before the latest one handed out
    (what a stall writes back: the latest poll's messages may still be processed)."""
    return {mq: consumer._states[mq].consumed for mq in consumer.assignment()}


async def send_all(namesrv: str) -> set[bytes]:
    bodies = {f"m{i:02}".encode() for i in range(N)}
    async with Producer("pg", namesrv) as producer:
        for body in sorted(bodies):
            await producer.send(Message(TOPIC, body))
    return bodies


async def poll_until(consumer: PullConsumer, got: list[ReceivedMessage], n: int) -> None:
    with trio.fail_after(LIMIT):
        while len(got) < n:
            got += await consumer.poll_for(0.2)


def group_consumer(namesrv: str, *, auto_commit: bool = False) -> PullConsumer:
    return PullConsumer(
        "pcg",
        namesrv,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        auto_commit=auto_commit,
        max_poll_records=10,
        pull_max_idle_ms=MAX_IDLE_MS,
    )


@asynccontextmanager
async def ten_read(
    tmp_path: Path,
) -> AsyncIterator[tuple[PullConsumer, set[bytes], list[ReceivedMessage]]]:
    """A cluster holding N messages and a group-mode consumer that pulled them all, returned
    the first 10 and then polled once more (the application is still processing that last
    poll's messages when the stall comes, so they come again after it): ``(consumer, bodies
    sent, the first 10 messages returned)``."""
    async with cluster(tmp_path, ("broker-a",)) as c:
        sent = await send_all(c.namesrv)
        async with group_consumer(c.namesrv) as consumer:
            consumer.subscribe(TOPIC)
            await wait_until(lambda: buffered(consumer) == N, "every message pulled")
            got: list[ReceivedMessage] = []
            await poll_until(consumer, got, 10)
            assert await consumer.poll_for(LIMIT)  # being processed when the stall comes
            yield consumer, sent, got


async def test_after_a_stall_nothing_pulled_before_is_returned_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    async with ten_read(tmp_path) as (consumer, sent, got):
        positions = consumed(consumer)
        stall()
        assert consumer.poll_nowait() == []  # what was pulled before is gone
        assert consumer.stalls == 1
        assert buffered(consumer) == 0
        await poll_until(consumer, got, N)
        # the consumed offsets were written back and the queues start again from them
        for mq, position in positions.items():
            if position is not None:
                assert await consumer.committed(mq) == position
    bodies = [m.body for m in got]
    assert sorted(bodies) == sorted(sent)  # each exactly once


async def test_a_position_another_member_went_past_is_not_written_back(tmp_path: Path) -> None:
    async with ten_read(tmp_path) as (consumer, sent, got):
        # the queue read least far (each holds N / 4): 3 or more of its messages are left
        taken = min(consumer.assignment(), key=lambda mq: consumed(consumer)[mq] or 0)
        position = consumed(consumer)[taken]
        assert position is not None
        assert position <= N // 4 - 3
        # "another member" consumed 3 more of that queue and committed while this one was
        # frozen (committed before the stall: the in-process broker stalls too)
        theirs = position + 3
        instance = consumer.instance
        addr = await instance.find_broker_addr(taken)
        resp = await instance.invoke(addr, api.update_offset_request("pcg", taken, theirs))
        api.check_success(resp, addr)
        stall()
        rest: list[ReceivedMessage] = []
        await poll_until(consumer, rest, N - len(got) - 3)
        with trio.move_on_after(0.5):  # nothing more comes
            rest += await consumer.poll_for(1.0)
        assert await consumer.committed(taken) == theirs
        # a commit of what was read before the stall does not overwrite theirs
        await consumer.commit({taken: position})
        assert await consumer.committed(taken) == theirs
    again = [m for m in rest if m.queue == taken and m.queue_offset < theirs]
    assert again == []  # it started that queue from the other member's offset
    assert len(got) + len(rest) == N - 3
    assert {m.body for m in got + rest} < sent


async def test_a_stall_noticed_while_closing_still_writes_the_consumed_offsets_back(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, ("broker-a",)) as c:
        await send_all(c.namesrv)
        consumer = group_consumer(c.namesrv, auto_commit=True)
        async with consumer:
            consumer.subscribe(TOPIC)
            await wait_until(lambda: buffered(consumer) == N, "every message pulled")
            await poll_until(consumer, [], 10)
            positions = consumed(consumer)
            stall()  # and close at once: the closing commit is the first to notice
        assert consumer.stalls == 1
        async with group_consumer(c.namesrv) as reader:  # asks the broker, joins no group
            for mq, position in positions.items():
                assert await reader.committed(mq) == position


async def test_a_poll_waiting_across_a_stall_gets_what_arrives_after_it(tmp_path: Path) -> None:
    async with (
        cluster(tmp_path, ("broker-a",)) as c,
        group_consumer(c.namesrv) as consumer,
        trio.open_nursery() as nursery,
    ):
        consumer.subscribe(TOPIC)
        await wait_until(lambda: len(consumer.assignment()) == 4, "queues assigned")
        got: list[ReceivedMessage] = []

        async def poll_once() -> None:
            got.extend(await consumer.poll())  # no timeout of its own

        nursery.start_soon(poll_once)
        await wait_until(lambda: consumer._data.statistics().tasks_waiting == 1, "poll waits")
        stall()
        await wait_until(lambda: consumer.stalls == 1, "the stall noticed")
        with trio.fail_after(LIMIT):
            await send_all(c.namesrv)
            await wait_until(lambda: bool(got), "the waiting poll returned")


async def test_in_group_mode_commit_skips_queues_not_assigned(tmp_path: Path) -> None:
    async with (
        cluster(tmp_path, ("broker-a",)) as c,
        group_consumer(c.namesrv) as consumer,
    ):
        consumer.subscribe(TOPIC)
        await wait_until(lambda: len(consumer.assignment()) == 4, "queues assigned")
        await c.create_topic("Other", 1)
        mine = sorted(consumer.assignment())[0]
        other = MessageQueue("Other", "broker-a", 0)  # not subscribed: not this member's
        await consumer.commit({mine: 0, other: 5})
        assert await consumer.committed(mine) == 0
        addr = await consumer.instance.find_broker_addr(mine)
        resp = await consumer.instance.invoke(addr, api.query_offset_request("pcg", other))
        assert api.parse_query_offset(resp, addr) is None
