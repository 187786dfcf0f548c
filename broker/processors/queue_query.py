"""QUERY_CONSUME_QUEUE (321): the raw units of one consume queue, for ``mqadmin queryCq``
(RocketMQ's ``AdminBrokerProcessor.queryConsumeQueue``).

::

    QUERY_CONSUME_QUEUE  321  topic queueId index [count] [consumerGroup]
                              -> QueryConsumeQueueResponseBody
                              | TOPIC_NOT_EXIST | SYSTEM_ERROR (no such queue, index not in it)

Body: :mod:`remoting.consume_queue_bodies`.

Rules:

- The answer lists the units ``index``, ``index + 1``, ... while they exist, at most ``count``
  (default 10, as RocketMQ's tool) and never more than :data:`QUERY_CQ_MAX_COUNT`, across
  consume queue files (RocketMQ stops at the end of the file holding ``index``); a unit is
  listed as stored (a pre-blank filler too, and a unit whose message retention removed). On a
  BatchCQ queue ``index`` is a message offset: the unit holding it, then the next units, each
  listed once.
- ``maxQueueIndex`` / ``minQueueIndex`` are the queue's max and min offsets.
- With ``consumerGroup``: ``subscriptionData`` is the group's subscription to the topic from
  its members' heartbeats here, and each unit's ``eval`` says whether that subscription's tags
  take it (by tag hash code, as the pull path filters); when no member subscribes to the topic
  here, ``subscriptionData`` is None and ``filterData`` says ``<group>@<topic> is not
  online!`` (RocketMQ's wording). Without a group, ``eval`` is false.
- An unknown topic (no config and no consume queue) is TOPIC_NOT_EXIST; a queue id the topic
  does not have is SYSTEM_ERROR ``<queueId>@<topic> is not exist!`` (RocketMQ's); an index
  outside ``[minQueueIndex, maxQueueIndex)`` is SYSTEM_ERROR ``Index <i> of
  <queueId>@<topic> is not exist!`` with the range (RocketMQ answers SUCCESS without a body,
  which its own tool cannot read); a negative count is SYSTEM_ERROR.
"""

from __future__ import annotations

from typing import Final

from broker.processors.client import ClientService
from broker.topic_config import TopicConfigManager
from common.subscription import SubscriptionData
from remoting.channel import Channel, Handler
from remoting.client_bodies import subscription_to_wire
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.consume_queue_bodies import (
    ConsumeQueueData,
    QueryConsumeQueueBody,
    encode_query_consume_queue,
)
from remoting.headers import error, guarded, header_int, header_str, opt_int, opt_str
from store import MessageStore
from store.batch_consume_queue import BatchConsumeQueue
from store.consume_queue import UNIT

QUERY_CQ_DEFAULT_COUNT: Final = 10
"""Units answered when the request names no count (RocketMQ's ``queryCq -c`` default)."""
QUERY_CQ_MAX_COUNT: Final = 1000
"""The most units one answer lists, whatever the count asked for."""


class ConsumeQueueQueryProcessor:
    """QUERY_CONSUME_QUEUE; see the module rules."""

    def __init__(
        self, store: MessageStore, topics: TopicConfigManager, clients: ClientService
    ) -> None:
        self.store = store
        self.topics = topics
        self.clients = clients

    def _queue_range(self, topic: str, queue_id: int) -> tuple[int, int] | str:
        """``(min, max)`` offsets of the queue, or why it does not exist (a queue of the
        topic's config that holds nothing yet has the range ``(0, 0)``)."""
        cq = self.store.find_consume_queue(topic, queue_id)
        if cq is not None:
            return cq.min_offset, cq.max_offset
        config = self.topics.select(topic)
        queues = max(config.read_queue_nums, config.write_queue_nums) if config else 0
        if 0 <= queue_id < queues:
            return 0, 0
        return f"{queue_id}@{topic} is not exist! (the topic has queues 0 to {queues - 1})"

    def _units(self, topic: str, queue_id: int, index: int, count: int) -> list[bytes]:
        """Up to ``count`` raw units from ``index`` on, across the queue's files."""
        cq = self.store.find_consume_queue(topic, queue_id)
        if isinstance(cq, BatchConsumeQueue):
            return _batch_units(cq, index, count)
        units: list[bytes] = []
        while cq is not None and len(units) < count:
            raw = cq.read_units(index + len(units), count - len(units))
            if not raw:
                break
            units.extend(raw[i : i + UNIT.size] for i in range(0, len(raw), UNIT.size))
        return units

    def _subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """``group``'s subscription to ``topic`` from its members' heartbeats here."""
        data = self.clients.manager.consumer_data(group)
        subs = data.subscriptions if data is not None else ()
        return next((s for s in subs if s.topic == topic), None)

    async def query_consume_queue(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """QUERY_CONSUME_QUEUE."""
        topic = header_str(request, "topic")
        queue_id = header_int(request, "queueId")
        index = header_int(request, "index")
        count = opt_int(request, "count", QUERY_CQ_DEFAULT_COUNT)
        group = opt_str(request, "consumerGroup", "")
        if count < 0:
            return error(request, ResponseCode.SYSTEM_ERROR, f"count {count} is negative")
        if self.topics.select(topic) is None and not self.store.has_topic(topic):
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        found = self._queue_range(topic, queue_id)
        if isinstance(found, str):
            return error(request, ResponseCode.SYSTEM_ERROR, found)
        lo, hi = found
        if not lo <= index < hi:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"Index {index} of {queue_id}@{topic} is not exist! "
                f"(the queue holds indexes [{lo}, {hi}))",
            )
        sub = self._subscription(group, topic) if group else None
        units = self._units(topic, queue_id, index, min(count, QUERY_CQ_MAX_COUNT))
        body = QueryConsumeQueueBody(
            max_queue_index=hi,
            min_queue_index=lo,
            queue_data=tuple(_unit_data(raw, sub) for raw in units),
            subscription_data=subscription_to_wire(sub) if sub is not None else None,
            filter_data=f"{group}@{topic} is not online!" if group and sub is None else None,
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_query_consume_queue(body)
        )

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {int(RequestCode.QUERY_CONSUME_QUEUE): guarded(self.query_consume_queue)}


def _batch_units(cq: BatchConsumeQueue, index: int, count: int) -> list[bytes]:
    """:meth:`ConsumeQueueQueryProcessor._units` of a BatchCQ queue: its units from the one holding
    message offset ``index`` on, each once (the next read starts past the last batch, not
    at the next message offset), in the 20-byte form of a simple unit."""
    units: list[bytes] = []
    while len(units) < count:
        batch = cq.read_batch_units(index, count - len(units))
        if not batch:
            break
        units.extend(UNIT.pack(u.phys, u.size, u.tags_code) for u in batch)
        index = batch[-1].end
    return units


def _unit_data(raw: bytes, sub: SubscriptionData | None) -> ConsumeQueueData:
    """One raw unit as ConsumeQueueData; ``eval``: ``sub``'s tags take its tag code (an SQL92
    subscription takes every unit, as RocketMQ's consume-queue match does without a bloom
    filter)."""
    phys, size, code = UNIT.unpack(raw)
    taken = sub is not None and (not sub.tags_set or code in sub.code_set)
    return ConsumeQueueData(phys, size, code, eval=taken)
