"""``consume_timeout_min`` (RocketMQ's ``consumeTimeout``, 15 minutes): a concurrent push
consumer sends back a message whose handler call began longer ago than that (delay level 3,
consumed again through the retry topic) and lets its queue's offset move past it, so a handler
stuck for ever does not stop the queue. The stuck call's outcome is ignored when it returns;
a message whose send-back fails stays and is tried again next round. Orderly consumers are not
affected.

Before, a stuck handler held its queue's offset for ever (and its pull's later messages were
never consumed). The tests run on trio's autojump clock: the minutes pass in virtual time.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from client import PushConsumer as BlockingPushConsumer
from client.aio import ConsumeFrom, MessageQueue, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from common.clock import wall_clock_ms
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import running_namesrv, wait_until
from tests.client.inproc_cluster import Cluster
from tests.client.test_push_close_abandon import send
from tests.client.test_push_close_bounds import committed

GATE_S = 60.0
"""Longest (real time) the stuck handler waits; the test opens the gate when it is done."""
MINUTE = 60.0

Call = tuple[bytes, str, int]
"""One message handed to the handler: its body, its queue's topic, its reconsume times."""


class StuckOnce:
    """Consumes every message at once except the first delivery of ``body``: that call waits
    for :attr:`gate`, then returns ``late_result``."""

    def __init__(self, body: bytes, late_result: ConsumeResult) -> None:
        self.body = body
        self.late_result = late_result
        self.gate = threading.Event()
        self.stuck = threading.Event()
        self.returned = threading.Event()
        self.calls: list[Call] = []

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            self.calls.append((m.body, m.queue.topic, m.reconsume_times))
            if m.body == self.body and m.reconsume_times == 0:
                self.stuck.set()
                self.gate.wait(GATE_S)
                self.returned.set()
                return self.late_result
        return ConsumeResult.SUCCESS


@asynccontextmanager
async def one_broker(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A name server and broker-a (no overall deadline: the tests' minutes are virtual)."""
    async with running_namesrv() as namesrv, trio.open_nursery() as nursery:
        c = Cluster(namesrv)
        await nursery.start(c.run_broker, tmp_path, "broker-a", None)
        schedule = c.controllers["broker-a"].schedule
        assert schedule is not None
        # the delay levels count on the wall clock: let the virtual minutes count too
        schedule.clock_ms = lambda: wall_clock_ms() + int(trio.current_time() * 1000)
        yield c
        nursery.cancel_scope.cancel()


async def create_topic(c: Cluster, topic: str, perm: int) -> None:
    async with RemotingClient() as client:
        cmd = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": perm},
            opaque=0,
        )
        resp = await client.invoke(c.brokers["broker-a"], cmd)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


async def within(minutes: float, cond: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Poll ``cond`` every 10 virtual seconds until true; fail after ``minutes`` (virtual)."""
    await wait_until(cond, what, limit=minutes * MINUTE, every=10.0)


async def at_offset(c: Cluster, group: str, mq: MessageQueue, offset: int) -> bool:
    return await committed(c.namesrv, group, [mq]) == [offset]


def consumer(
    group: str, namesrv: str, topic: str, handle: StuckOnce, orderly: bool
) -> PushConsumer:
    c = PushConsumer(
        group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=orderly, persist_interval=1
    )
    c.subscribe(topic, "*", handle)
    return c


def retry_max_offset(c: Cluster, group: str) -> int:
    store = c.controllers["broker-a"].store
    assert store is not None
    return store.get_max_offset_in_queue(f"%RETRY%{group}", 0)


async def test_a_message_consumed_past_the_timeout_is_sent_back_and_passed(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """The stuck call fails when it finally returns: that failure is not sent back again."""
    topic, group = "Expire", "cg_expire"
    retry = f"%RETRY%{group}"
    mq = MessageQueue(topic, "broker-a", 0)
    async with one_broker(tmp_path) as c:
        await create_topic(c, topic, perm=6)
        await send(c.namesrv, topic, 4)
        handle = StuckOnce(b"m1", ConsumeResult.RECONSUME_LATER)
        try:
            async with consumer(group, c.namesrv, topic, handle, orderly=False):
                await within(1, handle.stuck.is_set, "stuck handler")
                await trio.sleep(14 * MINUTE)
                # not timed out yet: the stuck pull (m0 to m3) holds the offset
                assert await committed(c.namesrv, group, [mq]) == [0]
                # checked every 15 minutes: it began after the first check, so by the second
                await within(20, lambda: at_offset(c, group, mq, 4), "offset 4")
                assert not handle.returned.is_set()
                await within(5, lambda: (b"m1", retry, 1) in handle.calls, "redelivery of m1")
                handle.gate.set()
                await within(1, handle.returned.is_set, "late return")
                await trio.sleep(2 * MINUTE)  # a send-back of the late failure would be back
        finally:
            handle.gate.set()
        assert sorted(handle.calls) == [
            (b"m0", topic, 0),
            (b"m1", retry, 1),
            (b"m1", topic, 0),
            (b"m2", topic, 0),
            (b"m3", topic, 0),
        ]
        assert retry_max_offset(c, group) == 1  # sent back once
        assert await committed(c.namesrv, group, [mq, MessageQueue(retry, "broker-a", 0)]) == [
            4,
            1,
        ]


async def test_an_async_handler_past_the_timeout_is_passed_too(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    topic, group = "ExpireAsync", "cg_expire_async"
    retry = f"%RETRY%{group}"
    mq = MessageQueue(topic, "broker-a", 0)
    calls: list[Call] = []
    never = trio.Event()

    async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            calls.append((m.body, m.queue.topic, m.reconsume_times))
            if m.body == b"m1" and m.reconsume_times == 0:
                await never.wait()
        return ConsumeResult.SUCCESS

    async with one_broker(tmp_path) as c:
        await create_topic(c, topic, perm=6)
        await send(c.namesrv, topic, 4)
        c_ = PushConsumer(
            group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=1
        )
        c_.subscribe(topic, "*", handle)
        async with c_:
            await within(35, lambda: at_offset(c, group, mq, 4), "offset 4")
            await within(5, lambda: (b"m1", retry, 1) in calls, "redelivery of m1")
        assert sorted(calls) == [
            (b"m0", topic, 0),
            (b"m1", retry, 1),
            (b"m1", topic, 0),
            (b"m2", topic, 0),
            (b"m3", topic, 0),
        ]


async def test_a_failed_send_back_keeps_the_message_until_a_later_round(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """The retry topic is read-only at first (the broker refuses the send-back): the stuck
    message holds the offset, its pull's later messages are consumed meanwhile; once the topic
    is writable, the next round sends it back."""
    topic, group = "ExpireRefused", "cg_expire_refused"
    retry = f"%RETRY%{group}"
    mq = MessageQueue(topic, "broker-a", 0)
    async with one_broker(tmp_path) as c:
        await create_topic(c, topic, perm=6)
        await create_topic(c, retry, perm=4)  # readable, not writable
        await send(c.namesrv, topic, 4)
        handle = StuckOnce(b"m1", ConsumeResult.SUCCESS)
        try:
            async with consumer(group, c.namesrv, topic, handle, orderly=False):
                await within(1, handle.stuck.is_set, "stuck handler")
                await within(35, lambda: len(handle.calls) == 4, "m2 and m3 consumed")
                await trio.sleep(10 * MINUTE)  # the round at 45 minutes has not come
                assert await committed(c.namesrv, group, [mq]) == [1]
                assert retry_max_offset(c, group) == 0
                await create_topic(c, retry, perm=6)
                await within(20, lambda: at_offset(c, group, mq, 4), "offset 4")
                await within(5, lambda: (b"m1", retry, 1) in handle.calls, "redelivery of m1")
        finally:
            handle.gate.set()
        assert retry_max_offset(c, group) == 1


async def test_orderly_consumers_have_no_consume_timeout(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    topic, group = "ExpireOrderly", "cg_expire_orderly"
    mq = MessageQueue(topic, "broker-a", 0)
    async with one_broker(tmp_path) as c:
        await create_topic(c, topic, perm=6)
        await send(c.namesrv, topic, 3)
        handle = StuckOnce(b"m1", ConsumeResult.SUCCESS)
        try:
            async with consumer(group, c.namesrv, topic, handle, orderly=True):
                await within(1, handle.stuck.is_set, "stuck handler")
                await trio.sleep(46 * MINUTE)
                assert await committed(c.namesrv, group, [mq]) == [1]
                assert handle.calls == [(b"m0", topic, 0), (b"m1", topic, 0)]
                handle.gate.set()
                await within(1, lambda: at_offset(c, group, mq, 3), "offset 3")
        finally:
            handle.gate.set()
        assert handle.calls == [(b"m0", topic, 0), (b"m1", topic, 0), (b"m2", topic, 0)]
        assert retry_max_offset(c, group) == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "15", 2**63, 10**400])
def test_consume_timeout_must_be_whole_minutes(bad: object) -> None:
    with pytest.raises(ValueError, match="consume_timeout_min"):
        PushConsumer("cg", "127.0.0.1:9876", consume_timeout_min=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consume_timeout_min"):
        BlockingPushConsumer("cg", "127.0.0.1:9876", consume_timeout_min=bad)
