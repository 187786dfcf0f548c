"""Pull consumer: a waiting ``poll`` gets a pulled batch before the fetch task sends its next
pull, so the next request's encoding and send are not in the way of the messages the
application waits for (end-to-end latency)."""

from __future__ import annotations

from pathlib import Path

import trio

from client.aio import Message, Producer, PullConsumer
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster


class _PullsSent:
    """An ``rpc_hook`` that counts the PULL_MESSAGE requests a client writes."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.PULL_MESSAGE:
            self.count += 1
        return cmd


async def test_a_waiting_poll_gets_the_batch_before_the_next_pull_is_sent(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        holds = c.controllers["broker-a"].holds
        with trio.fail_after(LIMIT):
            async with (
                Producer("pg_handover", c.namesrv) as producer,
                PullConsumer("cg_handover", c.namesrv, auto_commit=False) as consumer,
            ):
                pulls = _PullsSent()
                consumer.instance._remoting.rpc_hook = pulls
                consumer.assign(await consumer.fetch_queues(TOPIC))
                await wait_until(lambda: holds.parked_count(TOPIC, 0) == 1, "the pull held")
                assert pulls.count == 1
                for round_ in range(3):  # each round: one held pull answered, then the next
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(producer.send, Message(TOPIC, b"m%d" % round_))
                        polled = await consumer.poll()
                        assert [m.body for m in polled] == [b"m%d" % round_]
                        assert pulls.count == round_ + 1, "the next pull went out first"
                    await wait_until(lambda: holds.parked_count(TOPIC, 0) == 1, "held again")
                    assert pulls.count == round_ + 2
