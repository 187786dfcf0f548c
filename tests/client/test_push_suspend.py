"""``PushConsumer.suspend()`` / ``resume()`` (RocketMQ's ``DefaultMQPushConsumer``): while
suspended no new pull is sent (a pull the broker already holds still delivers, as in
RocketMQ), what is buffered is still consumed, the member keeps heartbeating, rebalancing and
persisting offsets, and ``resume()`` pulls again at once. There was no suspend/resume at all.

The trio tests run on the autojump clock against an in-process broker whose client table
counts virtual time too, so a member that stopped heartbeating would be dropped from its group.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from client import ClientClosedError
from client import PushConsumer as BlockingPushConsumer
from client.aio import ConsumeFrom, Message, MessageQueue, Producer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from tests.broker.inprocess import running_namesrv, wait_until
from tests.client.inproc_cluster import LIMIT, Cluster
from tests.client.test_push_close_bounds import committed

BROKER = "broker-a"
GATE_S = 60.0
"""Longest (real time) a gated handler waits; the tests open the gate."""


@asynccontextmanager
async def one_broker(tmp_path: Path, topic: str, queues: int) -> AsyncIterator[Cluster]:
    """A name server and broker-a with ``topic``; the broker expires silent clients on the
    trio clock (virtual under autojump), and no overall deadline (the waits are virtual)."""
    async with running_namesrv() as namesrv, trio.open_nursery() as nursery:
        c = Cluster(namesrv)
        await nursery.start(c.run_broker, tmp_path, BROKER, None)
        c.controllers[BROKER].clients.clock_ms = lambda: int(trio.current_time() * 1000)
        await c.create_topic(topic, queues)
        yield c
        nursery.cancel_scope.cancel()


def parked(c: Cluster, topic: str) -> int:
    """Pulls of ``topic`` the broker holds now."""
    return c.controllers[BROKER].holds.parked_count(topic)


async def send(namesrv: str, topic: str, bodies: list[bytes]) -> dict[bytes, MessageQueue]:
    """Send ``bodies``; the queue each went to."""
    async with Producer("pg", namesrv) as producer:
        return {b: (await producer.send(Message(topic, b))).queue for b in bodies}


class Recorder:
    """A handler recording the bodies it consumed, one list per member name."""

    def __init__(self) -> None:
        self.got: dict[str, list[bytes]] = {}

    def for_member(self, name: str) -> Callable[[list[ReceivedMessage]], ConsumeResult]:
        got = self.got.setdefault(name, [])

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        return handle

    def all(self) -> list[bytes]:
        return [b for got in self.got.values() for b in got]


def member(
    group: str,
    namesrv: str,
    topic: str,
    handler: Callable[..., ConsumeResult],
    orderly: bool = False,
) -> PushConsumer:
    consumer = PushConsumer(
        group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=1, orderly=orderly
    )
    consumer.subscribe(topic, "*", handler)
    return consumer


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_no_pull_while_suspended_and_everything_once_after_resume(
    tmp_path: Path, autojump_clock: trio.abc.Clock, orderly: bool
) -> None:
    topic, group = "Suspend", "cg_suspend"
    recorder = Recorder()
    async with one_broker(tmp_path, topic, queues=2) as c:
        consumer = member(group, c.namesrv, topic, recorder.for_member("a"), orderly)
        with pytest.raises(ClientClosedError):
            consumer.suspend()  # not started yet
        async with consumer:
            await wait_until(lambda: parked(c, topic) == 2, "a pull held on each queue")
            consumer.suspend()
            consumer.suspend()  # idempotent
            assert consumer.suspended
            # RocketMQ: a pull the broker already holds still delivers, and it is consumed
            await send(c.namesrv, topic, [b"held"])
            await wait_until(lambda: recorder.all() == [b"held"], "the held pull's message")
            await wait_until(lambda: parked(c, topic) == 0, "the held pulls answered")
            sent = await send(c.namesrv, topic, [b"m%d" % i for i in range(10)])
            assert len(set(sent.values())) == 2
            await trio.sleep(60)  # virtual: many pull passes' worth
            assert recorder.all() == [b"held"]
            assert parked(c, topic) == 0  # no new pull was sent
            offsets = await committed(c.namesrv, group, sorted(set(sent.values())))
            assert sum(o or 0 for o in offsets) == 1  # persisted while suspended
            consumer.resume()
            consumer.resume()  # idempotent
            assert not consumer.suspended
            await wait_until(lambda: len(recorder.all()) == 11, "everything after resume")
        assert Counter(recorder.all()) == Counter([b"held", *sent])
        with pytest.raises(ClientClosedError):
            consumer.resume()  # closed


async def test_a_suspended_member_keeps_its_queues_and_its_place_in_the_group(
    tmp_path: Path, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Heartbeats and rebalance go on: the suspended member gives a newcomer its share, keeps
    the rest past the broker's channelExpiredTimeout (120 s), and its queues are not taken
    for stalled (``pull_max_idle_ms``) however long it stays suspended."""
    topic, group = "SuspendGroup", "cg_suspend_group"
    recorder = Recorder()
    async with one_broker(tmp_path, topic, queues=4) as c:
        a = member(group, c.namesrv, topic, recorder.for_member("a"))
        b = member(group, c.namesrv, topic, recorder.for_member("b"))

        def mine(consumer: PushConsumer) -> set[MessageQueue]:
            return {mq for mq in consumer.assignment() if mq.topic == topic}

        async with a:
            await wait_until(lambda: len(mine(a)) == 4, "a owns every queue")
            a.suspend()
            async with b:
                await wait_until(lambda: len(mine(a)) == len(mine(b)) == 2, "split")
                with caplog.at_level(logging.INFO, "client.push_consumer"):
                    await trio.sleep(300)  # virtual
                assert len(mine(a)) == len(mine(b)) == 2
                assert not mine(a) & mine(b)
                churn = [r.getMessage() for r in caplog.records if "released" in r.getMessage()]
                assert churn == []  # no queue was taken for stalled and re-created
                sent = await send(c.namesrv, topic, [b"m%d" % i for i in range(20)])
                of_b = {body for body, mq in sent.items() if mq in mine(b)}
                await wait_until(lambda: set(recorder.got["b"]) == of_b, "b's share")
                await trio.sleep(60)
                assert recorder.got["a"] == []
                a.resume()
                await wait_until(lambda: len(recorder.all()) == 20, "a's share after resume")
        assert Counter(recorder.all()) == Counter(list(sent))
        assert set(recorder.got["a"]) == set(sent) - of_b


async def test_buffered_messages_are_consumed_while_suspended_and_close_persists_them(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    topic, group = "SuspendBuffered", "cg_suspend_buffered"
    gate, stuck = threading.Event(), threading.Event()
    got: list[bytes] = []

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        stuck.set()
        gate.wait(GATE_S)
        got.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    async with one_broker(tmp_path, topic, queues=1) as c:
        sent = await send(c.namesrv, topic, [b"m%d" % i for i in range(5)])
        consumer = PushConsumer(
            group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, consume_thread_max=1
        )
        consumer.subscribe(topic, "*", handle)
        try:
            async with consumer:
                await wait_until(stuck.is_set, "the first message in its handler")
                consumer.suspend()
                gate.set()
                await wait_until(lambda: len(got) == 5, "the buffered messages consumed")
                assert consumer.suspended  # closing while suspended
        finally:
            gate.set()
        assert await committed(c.namesrv, group, [MessageQueue(topic, BROKER, 0)]) == [5]
        assert sorted(got) == sorted(sent)


def in_a_thread(fn: Callable[[], None]) -> None:
    """Call ``fn`` in a new thread and wait for it."""
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(LIMIT)
    assert not thread.is_alive()


class BlockingRun:
    """Drives a blocking consumer from a worker thread; the broker is watched in the trio
    thread (:func:`trio.from_thread.run`)."""

    def __init__(self, c: Cluster, topic: str, group: str) -> None:
        self.c, self.topic = c, topic
        self.got: list[bytes] = []
        self.paused = threading.Event()
        self.consumer = BlockingPushConsumer(
            group,
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            suspend_timeout_ms=1000,
            persist_interval=3600,
        )

    def handle(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.got.extend(m.body for m in msgs)
        if any(m.body == b"pause" for m in msgs):
            self.consumer.suspend()  # from a worker thread
            self.paused.set()
        return ConsumeResult.SUCCESS

    def wait_got(self, n: int) -> None:
        trio.from_thread.run(wait_until, lambda: len(self.got) == n, f"{n} consumed")

    def wait_parked(self, n: int) -> None:
        trio.from_thread.run(wait_until, lambda: parked(self.c, self.topic) == n, f"{n} held")

    async def send_and_see_nothing_pulled(self, bodies: list[bytes]) -> None:
        await send(self.c.namesrv, self.topic, bodies)
        await trio.sleep(2)  # longer than a pull would take: none is sent
        assert parked(self.c, self.topic) == 0

    def run(self) -> None:
        consumer = self.consumer
        with pytest.raises(ClientClosedError):
            consumer.suspend()  # not started
        with consumer:
            consumer.subscribe(self.topic, "*", self.handle)
            trio.from_thread.run(send, self.c.namesrv, self.topic, [b"first"])
            self.wait_got(1)
            self.wait_parked(1)  # the queue's next pull, held by the broker
            in_a_thread(consumer.suspend)
            assert consumer.suspended
            self.wait_parked(0)  # answered empty after suspend_timeout_ms
            later = [b"m%d" % i for i in range(5)]
            trio.from_thread.run(self.send_and_see_nothing_pulled, later)
            assert self.got == [b"first"]
            in_a_thread(consumer.resume)
            self.wait_got(6)
            trio.from_thread.run(send, self.c.namesrv, self.topic, [b"pause"])
            assert self.paused.wait(LIMIT)
            assert consumer.suspended
            in_a_thread(consumer.close)  # while suspended
        with pytest.raises(ClientClosedError):
            consumer.resume()
        assert Counter(self.got) == Counter([b"first", *later, b"pause"])


async def test_the_blocking_consumer_is_suspended_and_resumed_from_other_threads(
    tmp_path: Path,
) -> None:
    topic, group = "SuspendBlocking", "cg_suspend_blocking"
    async with one_broker(tmp_path, topic, queues=1) as c:
        await trio.to_thread.run_sync(BlockingRun(c, topic, group).run)
        mq = MessageQueue(topic, BROKER, 0)
        assert await committed(c.namesrv, group, [mq]) == [7]  # the close persisted them
