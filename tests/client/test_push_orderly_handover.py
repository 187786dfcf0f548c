"""Orderly consumption across a queue's hand-over: an ``async def`` handler in progress is not
cancelled when its queue is dropped (only a close that gives up on it cancels it), a lock
renewal waiting on one broker does not lock again a queue released meanwhile on another, and
``send_orderly`` refuses a sharding key that is not a string with a clear error.

Real name server and brokers in process, real sockets on 127.0.0.1 (one broker behind the
loopback fault proxy where a broker must answer late)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from client.aio import ConsumeFrom, Producer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import Message, MessageQueue, ReceivedMessage
from remoting.client import RemotingClient
from remoting.client_bodies import LockedQueue
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import LIMIT, req, wait_until
from tests.client.inproc_cluster import TOPIC, cluster
from tests.client.test_partition import brokers
from tests.compiled import refused_type


class AsyncHeld:
    """An ``async def`` orderly handler (:attr:`handle`) that waits for :attr:`release` and
    records how each call ended."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()
        self.ends: list[str] = []

    async def handle(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.entered.set()
        try:
            await self.release.wait()
        except trio.Cancelled:
            self.ends.append("cancelled")
            raise
        self.ends.append("returned")
        return ConsumeResult.SUCCESS


async def test_a_dropped_orderly_queue_lets_its_async_handler_return(tmp_path: Path) -> None:
    """A rebalance takes the queue while an ``async def`` handler runs on it: the call goes on
    and returns (as a thread's does), and the broker lock is kept until then. It used to be
    cancelled in the middle of its work."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        mq0 = MessageQueue(TOPIC, "broker-a", 0)
        key = LockedQueue(TOPIC, "broker-a", 0)
        locks = c.controllers["broker-a"].locks
        handler = AsyncHeld()
        consumer = PushConsumer(
            "og_async", c.namesrv, orderly=True, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        consumer.subscribe(TOPIC, "*", handler.handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            me = consumer.instance.client_id
            await wait_until(lambda: mq0 in consumer.assignment(), "the queue assigned")
            await producer.send(Message(TOPIC, b"m0"), queue=mq0)
            with trio.fail_after(LIMIT):
                await handler.entered.wait()
            consumer.unsubscribe(TOPIC)  # the next round drops the queue
            await wait_until(lambda: mq0 not in consumer.assignment(), "the queue dropped")
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert handler.ends == []
            assert locks.holder("og_async", key) == me  # kept while the call runs
            handler.release.set()
            await wait_until(lambda: bool(handler.ends), "the call ended")
            assert handler.ends == ["returned"]
            await wait_until(lambda: locks.holder("og_async", key) is None, "unlocked after")


async def test_a_close_still_abandons_an_async_orderly_handler_that_never_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The call a drop no longer cancels is cancelled by a close after
    ``await_termination_ms``, counted among the abandoned handlers: the close ends."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        mq0 = MessageQueue(TOPIC, "broker-a", 0)
        handler = AsyncHeld()  # never released
        consumer = PushConsumer(
            "og_stuck",
            c.namesrv,
            orderly=True,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            await_termination_ms=200,
        )
        consumer.subscribe(TOPIC, "*", handler.handle)
        with caplog.at_level(logging.WARNING, logger="client.push_consumer"):
            async with Producer("pg", c.namesrv) as producer:
                with trio.fail_after(LIMIT):
                    async with consumer:
                        await producer.send(Message(TOPIC, b"m0"), queue=mq0)
                        await handler.entered.wait()
        assert handler.ends == ["cancelled"]
        assert "1 message handler(s) still running" in caplog.text


async def test_a_lock_renewal_does_not_relock_a_queue_released_while_it_waited(
    tmp_path: Path,
) -> None:
    """A renewal asks broker-a (slow to answer: its answers are held) then broker-b. Meanwhile
    the handler of a queue of broker-b the member no longer owns returns, and the queue is
    unlocked. The renewal must not lock it again when it reaches broker-b (it used to: the
    queue stayed locked to a member that never renews it, so its new owner waited 60 s)."""
    group = "og_relock"
    async with brokers(tmp_path, {"broker-a": True, "broker-b": False}) as c:
        async with RemotingClient() as admin:
            for topic, name in (("OnA", "broker-a"), ("OnB", "broker-b")):
                create = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=topic, perm="6",
                             readQueueNums="1", writeQueueNums="1")  # fmt: skip
                resp = await admin.invoke(c.brokers[name].addr, create)
                assert resp.code == ResponseCode.SUCCESS
        qa, qb = MessageQueue("OnA", "broker-a", 0), MessageQueue("OnB", "broker-b", 0)
        key_a, key_b = LockedQueue("OnA", "broker-a", 0), LockedQueue("OnB", "broker-b", 0)
        locks_a = c.brokers["broker-a"].controller.locks
        locks_b = c.brokers["broker-b"].controller.locks
        proxy = c.brokers["broker-a"].proxy
        assert proxy is not None
        entered, release, returned = threading.Event(), threading.Event(), threading.Event()

        def held(msgs: list[ReceivedMessage]) -> ConsumeResult:
            entered.set()
            release.wait(LIMIT)
            returned.set()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(group, c.namesrv, orderly=True)
        consumer.subscribe("OnA", "*", lambda msgs: ConsumeResult.SUCCESS)
        consumer.subscribe("OnB", "*", held)
        async with consumer, Producer("pg", c.namesrv) as producer:
            me = consumer.instance.client_id
            await wait_until(lambda: {qa, qb} <= set(consumer.assignment()), "both assigned")
            # the renewal asks broker-a first (its queues come first), then broker-b
            assert consumer.assignment()[0].broker_name == "broker-a"
            await producer.send(Message("OnB", b"m0"), queue=qb)
            await wait_until(entered.is_set, "the handler of qb entered")
            consumer.unsubscribe("OnB")  # qb dropped; its lock kept while the handler runs
            await wait_until(lambda: qb not in consumer.assignment(), "qb dropped")
            assert locks_b.holder(group, key_b) == me
            later = locks_a.clock_ms() + 120_000
            locks_a.clock_ms = lambda: later  # its locks on broker-a look expired until renewed
            proxy.blackhole("responses")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consumer.lock_all)
                await wait_until(lambda: locks_a.holder(group, key_a) == me, "renewal at a")
                release.set()  # qb's handler returns: qb is to be unlocked
                await wait_until(returned.is_set, "the handler of qb returned")
                await trio.testing.wait_all_tasks_blocked(0.2)  # an unlock would be sent now
                proxy.heal()  # broker-a's answer arrives; the renewal goes on to broker-b
            await wait_until(lambda: locks_b.holder(group, key_b) is None, "qb unlocked")


async def test_send_orderly_refuses_a_sharding_key_that_is_not_a_string(tmp_path: Path) -> None:
    """An int order id used to fail deep inside with AttributeError ('isascii')."""
    async with (
        cluster(tmp_path, brokers=("broker-a",), queues=2) as c,
        Producer("pg", c.namesrv) as producer,
    ):
        for key in (42, b"order-1"):
            with pytest.raises(TypeError, match=refused_type("sharding_key must be a str")):
                await producer.send_orderly(Message(TOPIC, b"m"), sharding_key=key)  # type: ignore[arg-type]
        result = await producer.send_orderly(Message(TOPIC, b"m"), sharding_key="42")
        assert result.queue.queue_id == abs(hash_of("42")) % 2


def hash_of(key: str) -> int:
    """Java's ``String.hashCode`` of ``key``."""
    h = 0
    for ch in key:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
