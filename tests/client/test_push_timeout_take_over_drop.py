"""A queue that a concurrent push consumer gives up (a rebalance takes it, or the consumer
closes) while a consume timeout's take-over of one of its pulls is sending messages back, and
after the late handler call returned, records the pull's batches whose handler succeeded
before its offset is persisted: the next owner starts after them, and never after a message
still unsettled.

A timed-out pull leaves the pulls in flight when its late call returns, but its take-over
(:meth:`ConcurrentService.clean_expired`) goes on: first the failed batches before the late one
are sent back, then the late batch itself. Before, a drop or a close meanwhile did not see the
pull and persisted the offset of the pull's start (or of the late batch, although the late
call succeeded): its successful batches were consumed twice.

The send-back is held in flight by the network, as in ``test_push_drop_during_send_back``:
broker-a sits behind a fault proxy whose answers are blackholed from shortly before the
take-over on (for less than the broker's 120 s idle limit of a connection, past which it would
close the consumer's). The test runs on trio's autojump clock (the consume timeout's minutes
are virtual); the consumer's request timeout (and with it its pull idle limit) is far longer
than the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from client.aio import ClientConfig, ClientInstance, ConsumeFrom, MessageQueue, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from tests.broker.inprocess import running_namesrv, wait_until
from tests.client.test_push_drop_during_send_back import (
    committed_at_broker,
    idle,
    run_until,
    sent_back,
    start_three_messages,
)

HELD_S = 6 * 3600.0
"""The consumer's request timeout (virtual): a held answer is waited for past the test."""
TAKE_OVER_S = 2 * 15 * 60.0
"""When the consume timeout's second check (the one that takes offset 2 over) runs."""


class LateThird:
    """Offset 0 succeeds after a second (so offset 2 begins after the consume timeout's first
    check: the second one, 30 minutes on, takes it over), offset 1 succeeds or fails
    (``second``), offset 2 waits for :attr:`gate`, then succeeds."""

    def __init__(self, second: ConsumeResult) -> None:
        self.second = second
        self.seen: list[int] = []
        self.gate = trio.Event()
        self.returned = False

    async def handle(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        offset = msgs[0].queue_offset
        self.seen.append(offset)
        if offset == 0:
            await trio.sleep(1)
        elif offset == 1:
            return self.second
        if offset == 2:
            await self.gate.wait()
            self.returned = True
        return ConsumeResult.SUCCESS


def no_pull_in_flight(consumer: PushConsumer) -> bool:
    """The worker is done with the timed-out pull (it left the pulls in flight)."""
    service = consumer._concurrent
    return service is not None and not service._pulls


@pytest.mark.parametrize("give_up", ["rebalance", "close"])
@pytest.mark.parametrize(
    ("second", "expected"),
    [
        # offset 1 failed: its send-back (the take-over's settling) is held; 0 counts
        (ConsumeResult.RECONSUME_LATER, 1),
        # 0 and 1 settled at the take-over; the late batch's send-back is held, and the late
        # call succeeded meanwhile: it counts too
        (ConsumeResult.SUCCESS, 3),
    ],
)
async def test_a_queue_given_up_during_a_timeout_take_over_records_the_pulls_successes(
    tmp_path: Path,
    autojump_clock: trio.abc.Clock,
    give_up: str,
    second: ConsumeResult,
    expected: int,
) -> None:
    topic, group = "DropDuringTakeOver", "cg_drop_take_over"
    mq = MessageQueue(topic, "broker-a", 0)
    handle = LateThird(second)
    async with running_namesrv() as namesrv, trio.open_nursery() as nursery:
        a = await start_three_messages(nursery, tmp_path, namesrv, topic, group)
        proxy = a.proxy
        assert proxy is not None
        instance = ClientInstance(ClientConfig.create(namesrv, request_timeout_s=HELD_S))
        consumer = PushConsumer(
            group,
            instance=instance,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            persist_interval=HELD_S,
            rebalance_interval=HELD_S,  # rounds only at the start and when told
            pull_max_idle_ms=int(4 * HELD_S * 1000),  # no held pull counts as a stall
            await_termination_ms=300,  # a close drains for that long only
        )
        consumer.subscribe(topic, "*", handle.handle)
        close = trio.Event()
        try:
            started = trio.current_time()
            await nursery.start(run_until, instance, consumer, close)
            await wait_until(
                lambda: handle.seen == [0, 1, 2] and idle(consumer), "offset 2 in the handler"
            )
            await trio.sleep_until(started + TAKE_OVER_S - 30)
            assert sent_back(a.controller) == 0
            proxy.blackhole("responses")  # requests arrive, their answers are held
            # the take-over sends offset 1 back, or offset 2
            await wait_until(lambda: sent_back(a.controller) == 1, "a send-back", limit=60)
            handle.gate.set()
            await wait_until(lambda: handle.returned and no_pull_in_flight(consumer), "late call")
            if give_up == "rebalance":
                consumer.unsubscribe(topic)  # the next rebalance drops the queue
            else:
                close.set()  # its drain ends at once: no worker is busy
            await wait_until(
                lambda: committed_at_broker(a.controller, group, mq) >= 0,
                "the queue's offset persisted",
            )
            # before: 0 (the pull's start), or 2 (the late batch, which succeeded)
            assert committed_at_broker(a.controller, group, mq) == expected
        finally:
            handle.gate.set()
            proxy.heal()
            close.set()
        nursery.cancel_scope.cancel()
