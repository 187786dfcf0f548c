"""Driver side of the Spark source: ask the brokers about queues and offsets.

Coroutines run against a :class:`~client.instance.ClientInstance` (through
:meth:`client.blocking.SharedInstance.call`): the topics' readable queues with their min and
max offsets, offsets by store timestamp, and consumer-group progress commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import trio

from client import api
from client.instance import ClientInstance
from client.message import MessageQueue
from client.spark.offsets import QueueKey
from remoting.codes import RequestCode

Bounds = dict[QueueKey, tuple[int, int]]


def _mq(key: QueueKey) -> MessageQueue:
    return MessageQueue(*key)


async def queues(instance: ClientInstance, topics: Sequence[str]) -> list[QueueKey]:
    """Every readable queue of ``topics`` (fresh routes from the name servers), sorted."""
    out: list[QueueKey] = []
    for topic in topics:
        for mq in await instance.subscribe_queues(topic):
            out.append((mq.topic, mq.broker_name, mq.queue_id))
    return sorted(out)


async def _each(
    instance: ClientInstance, keys: Sequence[QueueKey], code: RequestCode, ts: int = 0
) -> dict[QueueKey, int]:
    out: dict[QueueKey, int] = {}

    async def one(key: QueueKey) -> None:
        out[key] = await instance.broker_offset(code, _mq(key), ts)

    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(one, key)
    return out


async def queue_bounds(instance: ClientInstance, topics: Sequence[str]) -> Bounds:
    """``{queue: (min offset, max offset)}`` of every readable queue of ``topics``."""
    keys = await queues(instance, topics)
    lo = await _each(instance, keys, RequestCode.GET_MIN_OFFSET)
    hi = await _each(instance, keys, RequestCode.GET_MAX_OFFSET)
    return {k: (lo[k], hi[k]) for k in keys}


async def offsets_for_time(
    instance: ClientInstance, keys: Sequence[QueueKey], timestamp_ms: int
) -> dict[QueueKey, int]:
    """The first offset stored at or after ``timestamp_ms`` in each queue."""
    return await _each(instance, keys, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp_ms)


async def commit_group(
    instance: ClientInstance, group: str, offsets: Mapping[QueueKey, int]
) -> None:
    """Store ``offsets`` as ``group``'s consumer offsets on the brokers."""

    async def one(key: QueueKey, offset: int) -> None:
        mq = _mq(key)
        addr = await instance.find_broker_addr(mq)
        resp = await instance.invoke(addr, api.update_offset_request(group, mq, offset))
        api.check_success(resp, addr)

    async with trio.open_nursery() as nursery:
        for key, offset in offsets.items():
            nursery.start_soon(one, key, offset)
