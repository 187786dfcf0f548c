"""A queue that a concurrent push consumer gives up (a rebalance takes it, or the consumer
closes) while one of its pulls is being settled, a failed batch's message on its way back to
the broker, records the pull's batches whose handler succeeded before its offset is
persisted: the next owner starts after them. Before, the pull left the pulls in flight before
its send-backs, so the drop (or the close, once its drain timed out) did not see it and
persisted the offset of the pull's start: its successful batches were consumed twice.

The send-back is held in flight by the network: broker-a sits behind a fault proxy whose
answers are blackholed (the requests arrive and are acted on; the consumer waits for the
answers). The group's retry topic is write-only, so the rebalance round that drops the queue
asks the broker nothing (no readable retry queues) and does not wait for a held answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from broker.controller import BrokerController
from client.aio import ClientConfig, ClientInstance, ConsumeFrom, MessageQueue, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from common.topic import SCHEDULE_TOPIC, retry_topic
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req, running_namesrv, wait_until
from tests.client.test_partition import Broker, run_broker
from tests.client.test_push_close_abandon import send

HELD_S = 40.0
"""The consumer's request timeout: how long a held answer is waited for (past the test)."""
SEND_BACK_DELAY_QUEUE = 3 - 1
"""The schedule topic's queue of delay level 3, where a first send-back is stored."""


async def create_topic(addr: str, topic: str, perm: int) -> None:
    async with RemotingClient() as client:
        cmd = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=topic, perm=str(perm),
                  readQueueNums="1", writeQueueNums="1")  # fmt: skip
        assert (await client.invoke(addr, cmd)).code == ResponseCode.SUCCESS


def sent_back(controller: BrokerController) -> int:
    """Messages the broker took back at delay level 3."""
    store = controller.store
    assert store is not None
    return store.get_max_offset_in_queue(SCHEDULE_TOPIC, SEND_BACK_DELAY_QUEUE)


def committed_at_broker(controller: BrokerController, group: str, mq: MessageQueue) -> int:
    """The broker's committed offset (-1: none), read in process: its answers are held."""
    assert controller.offsets is not None
    return controller.offsets.query_offset(group, mq.topic, mq.queue_id)


def idle(consumer: PushConsumer) -> bool:
    """No rebalance round runs or is due (none may wait for a held answer)."""
    return not consumer._rebalance_lock.locked() and not consumer._rebalance_wakeup.is_set()


class FailThird:
    """Consumes offsets 0 and 1; offset 2 fails once :attr:`fail` is set."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.fail = trio.Event()

    async def handle(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.seen.extend(m.queue_offset for m in msgs)
        if msgs[0].queue_offset < 2:
            return ConsumeResult.SUCCESS
        await self.fail.wait()
        return ConsumeResult.RECONSUME_LATER


async def run_until(
    instance: ClientInstance,
    consumer: PushConsumer,
    close: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``instance`` and ``consumer`` (started once both are) until ``close`` is set."""
    async with instance, consumer:
        task_status.started()
        await close.wait()


async def start_three_messages(
    nursery: trio.Nursery, tmp_path: Path, namesrv: str, topic: str, group: str
) -> Broker:
    """broker-a behind a FaultProxy, with ``topic`` holding 3 messages and the group's retry
    topic write-only (a send-back can be stored, nothing is redelivered)."""
    a: Broker = await nursery.start(run_broker, tmp_path / "broker-a", namesrv, "broker-a", True)
    await create_topic(a.addr, topic, perm=6)
    await create_topic(a.addr, retry_topic(group), perm=2)  # write-only
    await send(namesrv, topic, 3)
    return a


@pytest.mark.parametrize("give_up", ["rebalance", "close"])
async def test_a_queue_given_up_during_a_send_back_records_the_pulls_successes(
    tmp_path: Path, give_up: str
) -> None:
    topic, group = "DropDuringSendBack", "cg_drop_send_back"
    mq = MessageQueue(topic, "broker-a", 0)
    handle = FailThird()
    with trio.fail_after(90):
        async with running_namesrv() as namesrv, trio.open_nursery() as nursery:
            a = await start_three_messages(nursery, tmp_path, namesrv, topic, group)
            proxy = a.proxy
            assert proxy is not None
            instance = ClientInstance(ClientConfig.create(namesrv, request_timeout_s=HELD_S))
            consumer = PushConsumer(
                group,
                instance=instance,
                consume_from=ConsumeFrom.FIRST_OFFSET,
                persist_interval=3600,
                rebalance_interval=3600,  # rounds only at the start and when told
                await_termination_ms=300,  # a close drains for that long only
            )
            consumer.subscribe(topic, "*", handle.handle)
            close = trio.Event()
            try:
                await nursery.start(run_until, instance, consumer, close)
                await wait_until(
                    lambda: handle.seen == [0, 1, 2] and idle(consumer), "offset 2 in the handler"
                )
                proxy.blackhole("responses")  # requests arrive, their answers are held
                handle.fail.set()
                await wait_until(lambda: sent_back(a.controller) == 1, "offset 2 sent back")
                if give_up == "rebalance":
                    consumer.unsubscribe(topic)  # the next rebalance drops the queue
                else:
                    close.set()  # its drain ends while the send-back waits
                await wait_until(
                    lambda: committed_at_broker(a.controller, group, mq) >= 0,
                    "the queue's offset persisted",
                )
                # offsets 0 and 1 count (before, 0: the pull's start)
                assert committed_at_broker(a.controller, group, mq) == 2
            finally:
                proxy.heal()
                close.set()
            nursery.cancel_scope.cancel()
