"""Which queues a group member should own now (RocketMQ's ``RebalanceImpl``, seed 000).

For each subscribed topic: its readable queues (from the cached route) and the group's client
ids (asked of every broker hosting the topic, and merged: RocketMQ asks one at random, which
after a broker restart can list a single member) are sorted and handed to the allocation
strategy; in
``BROADCASTING`` every member takes every queue. When the route or the member list cannot be
read this round, the member keeps the queues of that topic it already has, so a transient
failure never drops queues.

Both push and pull consumers run this in a loop: every ``rebalance_interval`` (20 s), right
after they start or subscribe, and when a broker says the group's members changed
(``NOTIFY_CONSUMER_IDS_CHANGED``), so membership changes converge within about a second.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

import trio

from client import api
from client.allocate import AllocateMessageQueueStrategy
from client.errors import MQClientError
from client.instance import ClientInstance
from client.message import MessageQueue
from common.topic import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)


async def consumer_ids(instance: ClientInstance, group: str, topic: str) -> list[str]:
    """The group's members as every broker hosting ``topic`` knows them, merged ([] when none
    answers): a broker that just restarted knows only the members that heartbeat it since,
    and a member trusting its list alone would take every queue, other brokers' included."""
    route = await instance.topic_route(topic)
    addrs = sorted({a for bd in route.broker_datas if (a := bd.select_broker_addr()) is not None})
    members: set[str] = set()

    async def ask(addr: str) -> None:
        try:
            resp = await instance.invoke(addr, api.consumer_list_request(group))
            members.update(api.parse_consumer_list(resp, addr))
        except MQClientError as exc:
            log.debug("consumer list of %s from %s failed: %s", group, addr, exc)

    async with trio.open_nursery() as nursery:
        for addr in addrs:
            nursery.start_soon(ask, addr)
    return sorted(members)


async def wanted_queues(
    instance: ClientInstance,
    group: str,
    strategy: AllocateMessageQueueStrategy,
    topics: Iterable[str],
    current: Iterable[MessageQueue],
    *,
    clustering: bool = True,
) -> set[MessageQueue]:
    """The queues of ``topics`` this member should own after this round."""
    held = set(current)
    wanted: set[MessageQueue] = set()
    for topic in topics:
        mine = {mq for mq in held if mq.topic == topic}
        try:
            mq_all = api.subscribe_queues(topic, await instance.topic_route(topic))
        except MQClientError as exc:
            # every round, as RocketMQ's "the topic[..] not exist": a misspelt topic or a
            # wrong name server must not look like a consumer that merely has no messages.
            # Not for the group's own retry topic: the broker makes it on the first heartbeat,
            # so the first round, which may come first, says nothing wrong (RocketMQ is quiet)
            level = logging.DEBUG if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else logging.WARNING
            log.log(level, "rebalance of %s skipped: %s", topic, exc)
            wanted |= mine
            continue
        if not clustering:
            wanted |= set(mq_all)
            continue
        if not mq_all:
            continue
        cids = await consumer_ids(instance, group, topic)
        if not cids:
            wanted |= mine
            continue
        wanted |= set(strategy.allocate(group, instance.client_id, mq_all, sorted(cids)))
    return wanted


async def rebalance_loop(
    instance: ClientInstance,
    topics: Callable[[], Iterable[str]],
    round_: Callable[[], Awaitable[None]],
    wakeup: Callable[[], trio.Event],
    interval: float,
) -> None:
    """Run ``round_`` at start (after a heartbeat, so brokers list us), then every
    ``interval`` seconds or when ``wakeup()``'s event is set; never returns."""
    for topic in list(topics()):
        try:
            await instance.topic_route(topic)
        except MQClientError as exc:
            log.debug("no route for %s yet: %s", topic, exc)
    await instance.heartbeat_all()
    while True:
        event = wakeup()
        await round_()
        with trio.move_on_after(interval):
            await event.wait()
