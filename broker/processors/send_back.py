"""CONSUMER_SEND_MSG_BACK (RocketMQ's ``AbstractSendMessageProcessor#consumerSendMsgBack``).

::

    CONSUMER_SEND_MSG_BACK  36  offset (commitlog offset of the failed message) group
                                [delayLevel 0] [originMsgId] [originTopic] [unitMode]
                                [maxReconsumeTimes] [reconsumeTimes] -> SUCCESS | error

Steps, as RocketMQ's:

1. The group's subscription config (auto-created when allowed), else SUBSCRIPTION_GROUP_NOT_EXIST;
   a broker without write permission answers NO_PERMISSION; ``retryQueueNums`` 0 answers
   SUCCESS and stores nothing.
2. ``%RETRY%<group>`` is created on demand (``retryQueueNums`` queues, read|write) and must be
   writable (else NO_PERMISSION); the original record is looked up by commitlog offset (else
   SYSTEM_ERROR "look message by offset failed, <offset>"). When it is an inner batch (a
   BatchCQ topic, :mod:`common.inner_batch`) the message sent back is its inner message whose
   UNIQ_KEY is the header's ``originMsgId``; none such is answered SYSTEM_ERROR as well (the
   client then sends the message to the retry topic itself, :mod:`client.send_back`).
3. The new message copies body, flag, sysFlag, born timestamp/host and properties (UNIQ_KEY
   included) with ``reconsumeTimes + 1``, where ``reconsumeTimes`` is the stored record's or
   the header's (a minimq field: the count an orderly consumer kept), whichever is larger.
   RETRY_TOPIC = the topic the group consumed the message from: kept when the record comes
   from the group's own retry topic, else the record's topic (RocketMQ keeps any RETRY_TOPIC
   already set, which sends a dead letter retried by another group back under a topic that
   group never subscribed to). ORIGIN_MESSAGE_ID = the one already set, else the UNIQ_KEY,
   else the record's offset id.
4. When ``reconsumeTimes >= maxReconsumeTimes`` (the header's when given and >= 0, else the
   group's ``retryMaxTimes``, as in RocketMQ) or ``delayLevel < 0`` it goes to ``%DLQ%<group>``
   (created on demand: 1 queue, read|write as RocketMQ 4.9+/5.x; DELAY removed). Otherwise to a
   random retry queue with DELAY = ``3 + reconsumeTimes`` when ``delayLevel`` is 0, else
   ``delayLevel`` (then clamped and redirected by :mod:`broker.schedule`).
5. A new retry / DLQ topic is registered with the name servers before the put; the put goes
   through :class:`store.services.StoreServices` (SYNC_FLUSH waits as for a send). PUT_OK
   answers SUCCESS, anything else SYSTEM_ERROR with the put status as remark (as RocketMQ: the
   client then consumes the message again locally).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from broker.broker_stats import BrokerStatsManager
from broker.config import BrokerConfig
from broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from common.inner_batch import InnerBatchError, find_inner_message, is_inner_batch
from common.message import MessageConst
from common.message_id import offset_msg_id_of_packed
from common.record import MessageRecord, RecordError, decode_record
from common.route import PermName, TopicConfig
from common.topic import dlq_topic, retry_topic
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import error, guarded, header_int, header_str, opt_int, opt_str
from store import MessageStore, PutStatus
from store.services import StoreServices

MAX_RECONSUME_COUNT = 2**31 - 2
"""The largest count a header may claim (the record's field is a signed 32-bit int, and the
new message stores it plus one)."""
DLQ_NUMS_PER_GROUP = 1
"""Queues of a dead-letter topic (RocketMQ's ``DLQ_NUMS_PER_GROUP``)."""
RETRY_PERM = PermName.PERM_READ | PermName.PERM_WRITE
DLQ_PERM = PermName.PERM_READ | PermName.PERM_WRITE
"""RocketMQ 4.9+/5.x create the DLQ read|write (older releases: write only)."""


def create_topic_in_send_back(
    topics: TopicConfigManager, topic: str, queue_nums: int, perm: int
) -> tuple[TopicConfig, bool]:
    """The topic's config, created with ``queue_nums`` queues and ``perm`` when absent
    (RocketMQ's ``createTopicInSendMessageBackMethod``); True when it was created."""
    existing = topics.select(topic)
    if existing is not None:
        return existing, False
    config = TopicConfig(topic, queue_nums, queue_nums, perm)
    topics.create_or_update(config)
    return config, True


def send_back_properties(
    rec: MessageRecord, group: str, store_host: bytes | None = None
) -> dict[str, str]:
    """``rec``'s properties with RETRY_TOPIC and ORIGIN_MESSAGE_ID set (module docstring,
    step 3) for a send-back by ``group``."""
    props = dict(rec.properties)
    if rec.topic != retry_topic(group) or MessageConst.RETRY_TOPIC not in props:
        props[MessageConst.RETRY_TOPIC] = rec.topic
    origin = props.get(MessageConst.ORIGIN_MESSAGE_ID) or rec.uniq_key
    if not origin:
        origin = offset_msg_id_of_packed(store_host or rec.store_host, rec.physical_offset)
    props[MessageConst.ORIGIN_MESSAGE_ID] = origin
    return props


def _inner_message(rec: MessageRecord, uniq_key: str) -> MessageRecord | None:
    """The inner message of the inner batch ``rec`` whose UNIQ_KEY is ``uniq_key``; None
    when there is none (or the batch does not decode)."""
    if not uniq_key:
        return None
    try:
        return find_inner_message(rec, uniq_key)
    except InnerBatchError:
        return None


class SendBackProcessor:
    """Stores failed messages again in the group's retry topic or its dead-letter topic."""

    def __init__(
        self,
        store: MessageStore,
        services: StoreServices,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        broker_config: BrokerConfig,
        transform: Callable[[MessageRecord], object],
        on_topic_created: Callable[[], Awaitable[None]] | None = None,
        stats: BrokerStatsManager | None = None,
    ) -> None:
        self.stats = stats
        """Counts each stored send-back under ``topic@group``, topic = its RETRY_TOPIC (None:
        not counted)."""
        self.store = store
        self.services = services
        self.topics = topics
        self.groups = groups
        self.broker_config = broker_config
        self.transform = transform
        """Applied to the new message before the put (the delay-level redirect)."""
        self.on_topic_created = on_topic_created

    async def send_back(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK; see the module docstring."""
        offset = header_int(request, "offset")
        group = header_str(request, "group")
        delay_level = opt_int(request, "delayLevel", 0)
        max_reconsume = opt_int(request, "maxReconsumeTimes", -1)
        client_count = min(max(opt_int(request, "reconsumeTimes", 0), 0), MAX_RECONSUME_COUNT)
        config = self.groups.find(group)
        if config is None:
            return error(
                request,
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {group}",
            )
        if not self.broker_config.broker_permission & PermName.PERM_WRITE:
            return error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.broker_config.broker_ip1}] sending message is forbidden",
            )
        if config.retry_queue_nums <= 0:
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        retry = retry_topic(group)
        retry_config, created = create_topic_in_send_back(
            self.topics, retry, config.retry_queue_nums, RETRY_PERM
        )
        if not retry_config.perm & PermName.PERM_WRITE:
            return error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{retry}] sending message is forbidden",
            )
        rec = self._lookup(offset)
        if rec is None:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}"
            )
        if is_inner_batch(rec.sys_flag):
            origin = opt_str(request, "originMsgId", "")
            inner = _inner_message(rec, origin)
            if inner is None:
                return error(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    f"look message by offset failed, {offset}: no message {origin!r} in the "
                    "inner batch there",
                )
            rec = inner
        # the client's maxReconsumeTimes replaces the group's retryMaxTimes (mqadmin
        # updateSubGroup -r), which applies when the client leaves it at -1, as in RocketMQ
        max_times = max_reconsume if max_reconsume >= 0 else config.retry_max_times
        times = max(rec.reconsume_times, client_count)
        msg, dlq_created = self._build(rec, config, retry_config, delay_level, max_times, times)
        if (created or dlq_created) and self.on_topic_created is not None:
            await self.on_topic_created()
        result = await self.services.put_message(msg)
        if result.status is PutStatus.PUT_OK:
            if self.stats is not None:
                back_topic = msg.properties.get(MessageConst.RETRY_TOPIC, rec.topic)
                self.stats.inc_send_back(group, back_topic)
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        return error(request, ResponseCode.SYSTEM_ERROR, result.status.value)

    def _lookup(self, offset: int) -> MessageRecord | None:
        if offset < 0:
            return None
        try:
            raw = self.store.lookup_message_by_offset(offset)
            return None if raw is None else decode_record(raw)
        except (RecordError, ValueError):
            return None

    def _build(
        self,
        rec: MessageRecord,
        config: SubscriptionGroupConfig,
        retry_config: TopicConfig,
        delay_level: int,
        max_times: int,
        times: int,
    ) -> tuple[MessageRecord, bool]:
        """The message to store (``times`` reconsumed so far) and whether a DLQ topic was
        created for it."""
        props = send_back_properties(rec, config.group_name)
        created = False
        if times >= max_times or delay_level < 0:
            topic = dlq_topic(config.group_name)
            _, created = create_topic_in_send_back(self.topics, topic, DLQ_NUMS_PER_GROUP, DLQ_PERM)
            queue_id = 0
            props.pop(MessageConst.DELAY, None)
        else:
            topic = retry_config.topic_name
            queue_id = random.randrange(config.retry_queue_nums)
            level = 3 + times if delay_level == 0 else delay_level
            props[MessageConst.DELAY] = str(level)
        msg = MessageRecord(
            topic,
            rec.body,
            queue_id=queue_id,
            flag=rec.flag,
            properties=props,
            sys_flag=rec.sys_flag,
            born_timestamp=rec.born_timestamp,
            born_host=rec.born_host,
            reconsume_times=times + 1,
        )
        self.transform(msg)
        return msg, created

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {int(RequestCode.CONSUMER_SEND_MSG_BACK): guarded(self.send_back)}
