"""Long polling through the blocking client: a poll of an empty queue gets a message sent
after the poll began.

The consumer asks the broker to hold its pulls for 60 s and ``poll`` waits 30 s, so the
message can only arrive through the broker waking the parked pull.

- In-process broker (``tests/broker/inprocess.py``): its safety-net re-check runs only every
  hour and the test sees the pull parked (``broker.holds``) before it sends, so only the
  arrival notification can deliver the message. The topic is auto-created by the first send,
  which also checks that the broker re-registers at once (the periodic round is 30 s away).
- ``mqbroker`` process: the same through the real process. A process keeps RocketMQ's 5 s
  safety net, which would also deliver within the 30 s poll, so this one checks delivery
  through the process, not the wake-up itself.
"""

from __future__ import annotations

from pathlib import Path

import trio

from client import (
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    ReceivedMessage,
    SendResult,
    SendStatus,
    TopicRouteError,
)
from tests.broker.inprocess import running_broker, running_namesrv
from tests.e2e.cluster import create_topic, in_thread, running_cluster, wait_until

SUSPEND_MS = 60_000
POLL_S = 30.0
BOUND_S = 50.0
"""Test bound: above the 30 s poll (so a missed wake-up fails on the message, not on time)."""


def long_poll_consumer(namesrv: str, group: str) -> PullConsumer:
    """A started consumer (from the last offset) whose pulls the broker holds for 60 s."""
    return PullConsumer(group=group, namesrv=namesrv, suspend_timeout_ms=SUSPEND_MS).start()


def send_to(producer: Producer, mq: MessageQueue, body: bytes) -> SendResult:
    """Blocking: send ``body`` to exactly ``mq``."""
    result = producer.send(Message(mq.topic, body), queue=mq)
    assert result.status is SendStatus.SEND_OK
    return result


def queues_when_routed(c: PullConsumer, topic: str) -> list[MessageQueue]:
    """Blocking: the topic's queues, or [] while the name server has no route for it."""
    try:
        return c.fetch_queues(topic)
    except TopicRouteError:
        return []


async def test_poll_woken_by_arrival_in_process_broker(tmp_path: Path) -> None:
    topic = "E2E_LongPollAuto"
    with trio.fail_after(BOUND_S):
        async with running_namesrv() as ns, running_broker(tmp_path, ns) as (broker, _):
            producer = await in_thread(Producer(group="pg_e2e_lp", namesrv=ns).start)
            c = await in_thread(long_poll_consumer, ns, "cg_e2e_lp")
            try:
                first = await in_thread(lambda: producer.send(Message(topic, b"creates the topic")))
                mq = first.queue
                # Re-registered at once after the auto-creation: the periodic round is 30 s
                # away, beyond this wait.
                with trio.fail_after(20):
                    while True:
                        if mq in await in_thread(queues_when_routed, c, topic):
                            break
                        await trio.sleep(0.05)
                await in_thread(c.assign, [mq])
                got: list[ReceivedMessage] = []

                async def poll() -> None:
                    got.extend(await in_thread(c.poll, POLL_S))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(poll)
                    await wait_until(
                        lambda: broker.holds.parked_count(topic, mq.queue_id) == 1,
                        "the consumer's pull to be parked",
                    )
                    second = await in_thread(send_to, producer, mq, b"wakes the pull")
                assert [m.body for m in got] == [b"wakes the pull"]
                assert (got[0].msg_id, got[0].queue_offset) == (
                    second.msg_id,
                    first.queue_offset + 1,
                )
            finally:
                await in_thread(c.close)
                await in_thread(producer.close)


async def test_poll_gets_message_sent_later_through_process(tmp_path: Path) -> None:
    topic = "E2E_LongPollProc"
    with trio.fail_after(BOUND_S):
        async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
            ns = cluster.namesrv_addr
            await create_topic(cluster.brokers["broker-a"].addr, topic, 1)
            producer = await in_thread(Producer(group="pg_e2e_lp", namesrv=ns).start)
            c = await in_thread(long_poll_consumer, ns, "cg_e2e_lp")
            try:
                (mq,) = await in_thread(c.fetch_queues, topic)
                await in_thread(c.assign, [mq])
                got: list[ReceivedMessage] = []

                async def poll() -> None:
                    got.extend(await in_thread(c.poll, POLL_S))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(poll)
                    # The position is known once the fetch task has its start offset, right
                    # before it sends the pull the broker will hold.
                    with trio.fail_after(20):
                        while True:
                            if await in_thread(c.position, mq) is not None:
                                break
                            await trio.sleep(0.01)
                    await in_thread(send_to, producer, mq, b"after the poll began")
                assert [m.body for m in got] == [b"after the poll began"]
                assert got[0].queue_offset == 0
            finally:
                await in_thread(c.close)
                await in_thread(producer.close)
