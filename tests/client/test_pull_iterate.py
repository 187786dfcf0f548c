"""Pull consumer: iterating over messages (``async for`` / ``for``), and commits that never
cover messages the application may still be processing (auto commit, closing by an exception).

RocketMQ's lite pull consumer commits in ``poll``: what the previous poll handed out, which the
application has finished with since it polled again. minimq committed every handed-out position
in the background, so a crash (or an exception leaving the ``with`` block) after a poll lost
that poll's unprocessed messages for the group.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from client import PullConsumer as BlockingPullConsumer
from client.aio import ConsumeFrom, Message, Producer, PullConsumer
from client.errors import ClientClosedError
from client.message import ReceivedMessage
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, Cluster, cluster

GROUP = "cg_iterate"
COUNT = 10


async def _send(c: Cluster, count: int = COUNT) -> None:
    async with Producer("pg", c.namesrv) as producer:
        for i in range(count):
            await producer.send(Message(TOPIC, b"m%d" % i))


def _committed(c: Cluster) -> int:
    """The group's committed offset of the topic's one queue on broker-a (0 if none)."""
    offsets = c.controllers["broker-a"].offsets
    assert offsets is not None
    return sum(offsets.query_offsets(GROUP, TOPIC).values())


def _consumer(c: Cluster, **options: object) -> PullConsumer:
    return PullConsumer(GROUP, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, **options)  # type: ignore[arg-type]


async def _poll_all(
    consumer: PullConsumer, max_records: int | None = None
) -> list[list[ReceivedMessage]]:
    """Poll until COUNT messages came; the polls' batches."""
    if max_records is not None:  # wait until all are buffered, so each poll gets a full batch
        mq = (await consumer.fetch_queues(TOPIC))[0]
        await wait_until(lambda: consumer._states[mq].buffered == COUNT, "all buffered")
    batches: list[list[ReceivedMessage]] = []
    while sum(map(len, batches)) < COUNT:
        batches.append(await consumer.poll(max_records))
    return batches


async def test_auto_commit_covers_only_what_earlier_polls_handed_out(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        await _send(c)
        with trio.fail_after(LIMIT):
            async with _consumer(c, auto_commit_interval=0.1) as consumer:
                consumer.assign(await consumer.fetch_queues(TOPIC))
                batches = await _poll_all(consumer, max_records=4)
                assert [len(b) for b in batches] == [4, 4, 2]
                # the first commit while the last batch is processed decides: only 8
                await wait_until(lambda: _committed(c) > 0, "an auto commit")
                assert _committed(c) == 8
                assert consumer.poll_nowait() == []  # the application is done with the batch
                await wait_until(lambda: _committed(c) == COUNT, "the last batch committed")


async def test_leaving_the_block_by_an_exception_commits_only_what_was_processed(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        await _send(c)
        batches: list[list[ReceivedMessage]] = []

        async def fail_after_polling_all() -> None:
            async with _consumer(c, auto_commit_interval=3600) as consumer:
                consumer.assign(await consumer.fetch_queues(TOPIC))
                batches.extend(await _poll_all(consumer, max_records=4))
                raise RuntimeError("processing failed")

        with trio.fail_after(LIMIT), pytest.raises(RuntimeError, match="processing failed"):
            await fail_after_polling_all()
        first_unprocessed = batches[-1][0].queue_offset
        assert _committed(c) == first_unprocessed < COUNT
        with trio.fail_after(LIMIT):
            async with _consumer(c, auto_commit_interval=3600) as again:
                again.assign(await again.fetch_queues(TOPIC))
                redelivered = [m async for m in again.messages(idle_timeout=0.5)]
        assert [m.queue_offset for m in redelivered] == list(range(first_unprocessed, COUNT))
        assert _committed(c) == COUNT  # left normally: everything handed out is done


async def test_async_for_hands_out_every_message_in_order_and_ends_when_idle(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        await _send(c)
        with trio.fail_after(LIMIT):
            async with _consumer(c, max_poll_records=3) as consumer:
                consumer.assign(await consumer.fetch_queues(TOPIC))
                got = [m.body async for m in consumer.messages(idle_timeout=0.5)]
        assert got == [b"m%d" % i for i in range(COUNT)]


async def test_async_for_ends_when_the_consumer_closes(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        await _send(c)
        got: list[bytes] = []
        ended = trio.Event()

        async def iterate(consumer: PullConsumer) -> None:
            async for m in consumer:  # no idle timeout: only the close ends it
                got.append(m.body)
            ended.set()

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                consumer = _consumer(c)
                scope = await nursery.start(consumer.run)
                consumer.assign(await consumer.fetch_queues(TOPIC))
                nursery.start_soon(iterate, consumer)
                await wait_until(lambda: len(got) == COUNT, "all messages")
                scope.cancel()
                await ended.wait()
        assert got == [b"m%d" % i for i in range(COUNT)]


async def test_iterating_a_consumer_never_started_is_an_error(tmp_path: Path) -> None:
    consumer = PullConsumer(GROUP, "127.0.0.1:9")
    with pytest.raises(ClientClosedError):
        await consumer.messages(idle_timeout=0).__anext__()
    with pytest.raises(ValueError, match="idle_timeout"):
        consumer.messages(idle_timeout=-1)
    with pytest.raises(ValueError, match="max_records"):
        consumer.messages(max_records=0)


async def test_blocking_for_loop_an_exception_redelivers_and_a_close_ends_it(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        await _send(c)

        def fail_at_offset_5() -> None:
            options = {"consume_from": ConsumeFrom.FIRST_OFFSET, "auto_commit_interval": 3600}
            with BlockingPullConsumer(GROUP, c.namesrv, **options) as consumer:
                consumer.assign(consumer.fetch_queues(TOPIC))
                for m in consumer.messages(timeout=LIMIT):
                    if m.queue_offset == 5:
                        raise RuntimeError("processing failed")

        def read_until_closed() -> list[int]:
            offsets: list[int] = []
            consumer = BlockingPullConsumer(GROUP, c.namesrv, auto_commit_interval=3600).start()
            consumer.assign(consumer.fetch_queues(TOPIC))

            def close_when_done() -> None:
                wait_for(lambda: bool(offsets) and offsets[-1] == COUNT - 1)
                consumer.close()

            closer = threading.Thread(target=close_when_done)
            closer.start()
            for m in consumer:  # no timeout: the close from the other thread ends it
                offsets.append(m.queue_offset)
            closer.join(LIMIT)
            return offsets

        with trio.fail_after(LIMIT):
            with pytest.raises(RuntimeError, match="processing failed"):
                await trio.to_thread.run_sync(fail_at_offset_5)
            assert _committed(c) <= 5  # message 5 and those after it were not processed
            again = await trio.to_thread.run_sync(read_until_closed)
        assert again[0] <= 5
        assert again == list(range(again[0], COUNT))
        assert _committed(c) == COUNT


def wait_for(condition: object, limit: float = LIMIT) -> None:
    """Wait (in a thread) until ``condition()`` is true."""
    assert callable(condition)
    done = threading.Event()
    for _ in range(int(limit / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not met in time")
