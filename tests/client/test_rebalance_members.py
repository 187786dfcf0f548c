"""The member list a rebalance allocates by: every broker of the topic is asked.

A broker that just restarted knows only the members that have heartbeat it since (the others
come at their next heartbeat, up to 30 s later). A member that asked only that broker took
every queue of the topic, the healthy brokers' queues included, so their messages were
consumed by two or three members at once (the chaos review: 72 of 91 duplicated messages)."""

from __future__ import annotations

from pathlib import Path

from client.aio import ConsumeFrom, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from client.rebalance import consumer_ids
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import TOPIC, cluster


def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
    return ConsumeResult.SUCCESS


async def test_a_broker_that_forgot_a_member_does_not_shrink_the_group(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        first = PushConsumer("g", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        second = PushConsumer("g", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        first.subscribe(TOPIC, "*", handle)
        second.subscribe(TOPIC, "*", handle)
        async with first, second:
            ids = sorted(p._instance.client_id for p in (first, second))

            def split_evenly() -> bool:
                mine = [{q for q in p.assignment() if q.topic == TOPIC} for p in (first, second)]
                return [len(m) for m in mine] == [4, 4] and not mine[0] & mine[1]

            await wait_until(split_evenly, "the 8 queues split 4 and 4")
            # broker-a as after a restart: only the first member has heartbeat it since
            manager = c.controllers["broker-a"].clients.manager
            forgotten = second._instance.client_id
            assert manager.unregister_consumer("g", forgotten)
            assert manager.consumer_ids("g") == [first._instance.client_id]
            for member in (first, second):
                assert await consumer_ids(member._instance, "g", TOPIC) == ids
