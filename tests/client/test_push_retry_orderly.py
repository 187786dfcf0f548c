"""Push consumption semantics that need the broker's help: retry through the group's retry
topic, the dead-letter queue, delayed messages, and orderly consumption under queue locks."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio

from client.aio import ConsumeFrom, Producer, PullConsumer, PushConsumer
from client.config import ClientConfig
from client.consume_service import (
    ConsumeResult,
    Handler,
    orderly_max_reconsume_times,
    suspend_pause_s,
)
from client.instance import ClientInstance
from client.message import Message, MessageQueue, ReceivedMessage
from common.topic import dlq_topic
from remoting.client_bodies import LockedQueue
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster

FAST_LEVELS = {"messageDelayLevel": " ".join(["100ms"] * 18)}
"""Every delay level 100 ms, so retries come back at once in tests."""


async def test_failed_messages_come_back_k_times_then_succeed(tmp_path: Path) -> None:
    k = 2
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST_LEVELS) as c:
        seen: Counter[bytes] = Counter()
        ids: defaultdict[bytes, set[str]] = defaultdict(set)
        topics: set[str] = set()

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            for m in msgs:
                seen[m.body] += 1
                ids[m.body].add(m.msg_id)
                topics.add(m.topic)
            return (
                ConsumeResult.SUCCESS if seen[msgs[0].body] > k else ConsumeResult.RECONSUME_LATER
            )

        consumer = PushConsumer("rg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            for i in range(3):
                await producer.send(Message(TOPIC, b"r%d" % i))
            await wait_until(lambda: all(seen[b"r%d" % i] == k + 1 for i in range(3)), "retries")
        assert topics == {TOPIC}  # retried messages show their original topic
        assert all(len(v) == 1 for v in ids.values())  # and their original id


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_a_message_that_always_fails_ends_in_the_dlq(tmp_path: Path, orderly: bool) -> None:
    """After ``1 + max_reconsume_times`` tries in either mode, as RocketMQ counts them."""
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST_LEVELS) as c:
        attempts: Counter[bytes] = Counter()

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            attempts[msgs[0].body] += 1
            raise RuntimeError("always fails")

        consumer = PushConsumer(
            "dg",
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            max_reconsume_times=3,
            orderly=orderly,
            suspend_current_queue_ms=50,
        )
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"doomed"))
            got = await read_dlq(c.namesrv, "dg", 1)
        assert [m.body for m in got] == [b"doomed"]
        assert attempts[b"doomed"] == 4  # the first delivery and 3 retries
        assert got[0].reconsume_times == 4  # in both modes: the broker is told the count


async def read_dlq(
    namesrv: str, group: str, count: int, broker: str = "broker-a"
) -> list[ReceivedMessage]:
    """The first ``count`` messages of ``%DLQ%<group>`` on ``broker`` (waiting for the topic
    to appear)."""
    dlq = MessageQueue(dlq_topic(group), broker, 0)
    got: list[ReceivedMessage] = []
    async with PullConsumer(
        group + "-dlq-reader", namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
    ) as reader:
        with trio.fail_after(LIMIT):
            while True:
                try:
                    reader.assign([dlq])
                    break
                except Exception:  # noqa: BLE001 (the DLQ topic appears later)
                    await trio.sleep(0.05)
            while len(got) < count:
                got += await reader.poll_for(0.2)
    return got


async def test_a_dead_letter_consumed_by_another_group_comes_back_to_its_handler(
    tmp_path: Path,
) -> None:
    """Group ``fixer`` reads ``%DLQ%app``; its handler fails once and must see the message
    again (it used to come back under app's topic, with no handler, and go on to fixer's DLQ
    unseen)."""
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST_LEVELS) as c:
        app_calls: list[str] = []
        fixer_calls: list[tuple[str, int]] = []

        def app_handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            app_calls.append(msgs[0].topic)
            return ConsumeResult.RECONSUME_LATER

        def fixer_handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            fixer_calls.append((msgs[0].topic, msgs[0].reconsume_times))
            return ConsumeResult.RECONSUME_LATER if len(fixer_calls) == 1 else ConsumeResult.SUCCESS

        app = PushConsumer(
            "app", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, max_reconsume_times=0
        )
        app.subscribe(TOPIC, "*", app_handle)
        async with app, Producer("pg", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"dead"))
            assert [m.body for m in await read_dlq(c.namesrv, "app", 1)] == [b"dead"]
        fixer = PushConsumer("fixer", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        fixer.subscribe(dlq_topic("app"), "*", fixer_handle)
        async with fixer:
            await wait_until(lambda: len(fixer_calls) == 2, "the retried dead letter handled")
        assert app_calls == [TOPIC]
        assert fixer_calls == [(dlq_topic("app"), 1), (dlq_topic("app"), 2)]


async def test_orderly_batch_members_each_get_their_own_tries(tmp_path: Path) -> None:
    """Batch size 2, 3 tries each: the message that joins a failing batch late is not sent to
    the DLQ with the older one, but tried its own 3 times (RocketMQ's checkReconsumeTimes)."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        tries: Counter[bytes] = Counter()

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            for m in msgs:
                tries[m.body] += 1
            return ConsumeResult.RECONSUME_LATER

        consumer = PushConsumer(
            "obg",
            c.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            orderly=True,
            consume_message_batch_max_size=2,
            max_reconsume_times=2,
            suspend_current_queue_ms=50,
        )
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"m1"))
            await wait_until(lambda: tries[b"m1"] == 1, "m1 tried once")
            await producer.send(Message(TOPIC, b"m2"))
            dead = await read_dlq(c.namesrv, "obg", 2)
        assert tries == {b"m1": 3, b"m2": 3}
        assert [(m.body, m.reconsume_times) for m in dead] == [(b"m1", 3), (b"m2", 3)]


def test_the_orderly_pause_is_checked_and_clamped_as_rocketmq() -> None:
    with pytest.raises(ValueError, match="suspend_current_queue_ms"):
        PushConsumer("g", "127.0.0.1:9876", orderly=True, suspend_current_queue_ms=-1)
    assert suspend_pause_s(0) == 0.01  # 0 would retry a failing message in a tight loop
    assert suspend_pause_s(1000) == 1.0
    assert suspend_pause_s(10**9) == 30.0


async def test_delayed_message_arrives_no_earlier_than_its_level(tmp_path: Path) -> None:
    levels = {"messageDelayLevel": "300ms 1s 2s"}
    async with cluster(tmp_path, brokers=("broker-a",), overrides=levels) as c:
        arrived: dict[bytes, float] = {}

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            for m in msgs:
                arrived[m.body] = time.time()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("delay-g", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            sent_at = time.time()
            await producer.send(Message(TOPIC, b"late", delay_level=1))
            await producer.send(Message(TOPIC, b"now"))
            await wait_until(lambda: b"late" in arrived and b"now" in arrived, "both arrive")
        assert arrived[b"late"] - sent_at >= 0.3


async def test_orderly_consumption_keeps_queue_order_and_single_owner(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=4) as c:
        order: defaultdict[int, list[int]] = defaultdict(list)
        busy: dict[MessageQueue, str] = {}
        overlaps: list[MessageQueue] = []

        def handler(name: str):  # type: ignore[no-untyped-def]
            def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
                (m,) = msgs
                if busy.setdefault(m.queue, name) != name:
                    overlaps.append(m.queue)
                order[m.queue.queue_id].append(int(m.body))
                busy.pop(m.queue, None)
                return ConsumeResult.SUCCESS

            return handle

        a = PushConsumer("og", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=True)
        a.subscribe(TOPIC, "*", handler("a"))
        async with a, Producer("pg", c.namesrv) as producer:
            await wait_until(lambda: len(a.assignment()) == 4 + 1, "a owns every queue")
            n = 0
            for _ in range(25):
                await producer.send_orderly(Message(TOPIC, b"%d" % n), sharding_key=str(n % 4))
                n += 1
            b = PushConsumer("og", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=True)
            b.subscribe(TOPIC, "*", handler("b"))
            async with b:
                await wait_until(lambda: len(b.assignment()) >= 2, "b takes queues")
                for _ in range(25):
                    await producer.send_orderly(Message(TOPIC, b"%d" % n), sharding_key=str(n % 4))
                    n += 1
                await wait_until(lambda: sum(len(v) for v in order.values()) >= n, "all consumed")
        assert not overlaps
        for seq in order.values():
            deduped = [x for i, x in enumerate(seq) if x not in seq[:i]]
            assert deduped == sorted(deduped)  # order kept (re-deliveries only repeat a prefix)


def test_an_orderly_consumer_left_at_minus_one_retries_without_limit() -> None:
    """RocketMQ's default -1 is Integer.MAX_VALUE retries for an orderly consumer (a concurrent
    one sends -1 and the broker applies the group's retryMaxTimes)."""
    assert orderly_max_reconsume_times(-1) == 2**31 - 1
    assert orderly_max_reconsume_times(0) == 0
    assert orderly_max_reconsume_times(5) == 5


class _Held:
    """An orderly handler for one queue whose first call on ``m0`` waits for :attr:`release`
    (in its worker thread); records every call and whether two ever overlapped."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.bodies: list[bytes] = []
        self.overlap = False
        self._inside = 0
        self._lock = threading.Lock()

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        with self._lock:
            self._inside += 1
            self.overlap |= self._inside > 1
            first = not self.bodies
            self.bodies += [m.body for m in msgs]
        if first:
            self.entered.set()
            self.release.wait(LIMIT)
        with self._lock:
            self._inside -= 1
        return ConsumeResult.SUCCESS


def _orderly(namesrv: str, instance_name: str, handler: Handler, **kw: Any) -> PushConsumer:
    consumer = PushConsumer(
        "og",
        instance=ClientInstance(ClientConfig.create(namesrv, instance_name=instance_name)),
        orderly=True,
        **kw,
    )
    consumer.subscribe(TOPIC, "*", handler)
    return consumer


async def test_an_orderly_queue_handed_over_and_back_during_a_long_handler(tmp_path: Path) -> None:
    """A new member takes the queue while the owner's handler runs, never gets its lock, and
    leaves: it must not write the offset it never owned over the group's (a new group: it
    would skip to the end), and the owner, taking the queue back, must not consume it a second
    time while the first call still runs."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        mq0 = MessageQueue(TOPIC, "broker-a", 0)
        held = _Held()
        # client ids sort "@a-new" before "@b-old": the newcomer is given the only queue
        a = _orderly(c.namesrv, "b-old", held)
        async with a.instance, a, Producer("pg", c.namesrv) as producer:
            await wait_until(lambda: mq0 in a.assignment(), "a owns the queue")
            for i in range(3):
                await producer.send(Message(TOPIC, b"m%d" % i), queue=mq0)
            await wait_until(held.entered.is_set, "a inside m0's handler")
            b = _orderly(c.namesrv, "a-new", lambda msgs: ConsumeResult.SUCCESS)
            async with b.instance, b:
                await wait_until(
                    lambda: mq0 in b.assignment() and mq0 not in a.assignment(), "b takes it"
                )
            await wait_until(lambda: mq0 in a.assignment(), "a takes it back")
            held.release.set()
            await wait_until(lambda: {b"m1", b"m2"} <= set(held.bodies), "m1 and m2 consumed")
        assert not held.overlap
        firsts = [b for i, b in enumerate(held.bodies) if b not in held.bodies[:i]]
        assert firsts == [b"m0", b"m1", b"m2"]


async def test_a_dropped_queue_keeps_its_lock_renewed_while_its_handler_runs(
    tmp_path: Path,
) -> None:
    """The old owner keeps renewing the broker lock of a queue handed over while its handler
    runs (past the 60 s expiry), so the new owner cannot consume the queue meanwhile."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        mq0 = MessageQueue(TOPIC, "broker-a", 0)
        key = LockedQueue(TOPIC, "broker-a", 0)
        locks = c.controllers["broker-a"].locks
        now = [locks.clock_ms()]
        locks.clock_ms = lambda: now[0]  # the broker's lock clock, moved by the test
        held, taken = _Held(), _Held()
        a = _orderly(c.namesrv, "b-old", held, consume_from=ConsumeFrom.FIRST_OFFSET)
        b = _orderly(c.namesrv, "a-new", taken, consume_from=ConsumeFrom.FIRST_OFFSET)
        taken.release.set()
        async with a.instance, a, Producer("pg", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"m0"), queue=mq0)
            await wait_until(held.entered.is_set, "a inside m0's handler")
            async with b.instance, b:
                await wait_until(
                    lambda: mq0 in b.assignment() and mq0 not in a.assignment(), "b takes it"
                )
                for _ in range(3):  # 150 s of the broker's lock clock, a renewal every 50 s
                    now[0] += 50_000
                    await a.lock_all()
                    await b.lock_all()
                    assert locks.holder("og", key) == a.instance.client_id
                assert taken.bodies == []
                held.release.set()
                await wait_until(lambda: bool(taken.bodies), "b consumes once a's handler returned")
        assert held.bodies == [b"m0"]
