"""Admin requests behind ``mqadmin``'s statistics, connection, offset and config commands (the
rest of RocketMQ's ``AdminBrokerProcessor`` that minimq implements).

::

    GET_TOPIC_STATS_INFO          202  topic -> TopicStatsTable | TOPIC_NOT_EXIST
    GET_CONSUME_STATS             208  consumerGroup [topic] -> ConsumeStats (possibly empty)
    GET_CONSUMER_CONNECTION_LIST  203  consumerGroup -> ConsumerConnection | CONSUMER_NOT_ONLINE
    GET_PRODUCER_CONNECTION_LIST  204  producerGroup -> ProducerConnection | SYSTEM_ERROR
    UPDATE_BROKER_CONFIG           25  body = ``key=value`` lines -> SUCCESS | SYSTEM_ERROR
    INVOKE_BROKER_TO_RESET_OFFSET 222  topic group timestamp [isForce] [queueId [offset]]
                                       -> ResetOffsetBody
                                       | TOPIC_NOT_EXIST | SYSTEM_ERROR (no such group)
    CLONE_GROUP_OFFSET            314  srcGroup destGroup [topic] [offline] -> SUCCESS
    GET_ALL_CONSUMER_OFFSET        43  -> body msgpack of ``{"offsetTable": {"topic@group":
                                       {"queueId": offset}}}`` (``consumerOffset.json``'s shape)
    VIEW_BROKER_STATS_DATA        315  statsName statsKey -> BrokerStatsData
                                       | SYSTEM_ERROR "The stats <name> <key> not exist"
    GET_BROKER_CONSUME_STATS      317  [isOrder] [timeoutMillis] -> ConsumeStatsList

Bodies: :mod:`remoting.admin_bodies`.

Rules:

- Topic stats cover the topic's ``writeQueueNums`` queues (as RocketMQ's); the last update time of
  a queue is the store time of its newest message (0 when empty).
- Consume stats cover the topics the group has committed offsets for plus the topics its online
  members subscribe to, or only ``topic`` when given; while the group has online members, a
  topic none of them subscribes to is left out (RocketMQ's ``getConsumeStats``: its offsets
  are left-overs, not a backlog), so the stats may be empty. A queue without a committed
  offset shows consumer offset 0; ``lastTimestamp`` is the store time of the last consumed
  message; ``pullOffset`` is where the group's pulls of the queue got to since the broker
  started (at least the consumer offset; RocketMQ's ``queryPullOffset``). ``consumeTps`` is
  the group's messages pulled a second over the last minute, summed over the topics
  (``GROUP_GET_NUMS`` of :mod:`broker.broker_stats`, as RocketMQ's ``tpsGroupGetNums``).
- VIEW_BROKER_STATS_DATA answers one item of :mod:`broker.broker_stats` (``statsName`` one of
  its ``STATS_NAMES``, ``statsKey`` a topic or ``topic@group``), its minute, hour and day
  snapshots at the time of the request; an unknown name or key (nothing counted under it yet)
  is RocketMQ's SYSTEM_ERROR.
- GET_BROKER_CONSUME_STATS gives, for every subscription group config, its GET_CONSUME_STATS
  figures split per topic (one ``ConsumeStats`` each; a group without any row is listed with
  none), only the topics created ``order`` with ``isOrder=true``; ``totalDiff`` and
  ``totalInflightDiff`` sum every row's ``diff`` and ``inflight``. ``timeoutMillis`` is the
  caller's and is ignored here (as RocketMQ's broker does).
- UPDATE_BROKER_CONFIG applies only :data:`LIVE_KEYS` (in memory: they take effect at once and
  are lost at restart); any other key, or a bad value, is refused and nothing is changed.
- A reset is refused (SYSTEM_ERROR "The consumer group <group> not exist", RocketMQ's
  ``Broker2Client.resetOffset`` answer) and changes nothing when the group has no committed
  offset on any queue of the topic here and no online member subscribing to it: a reset must
  not create a group (a mistyped name, say) that would later start from the offsets it set.
- A reset finds, per queue of the topic, the first offset stored at or after ``timestamp``
  (``-1``: the queue's max offset, i.e. skip everything); without ``isForce`` (default true) a
  queue only moves backwards. The broker commits the new offsets itself (so an offline group is
  reset too) and sends a oneway RESET_CONSUMER_CLIENT_OFFSET (header ``topic group timestamp
  isForce``, body = the offsets) to every online member, whose consumers drop what they buffered
  and continue from there.
- With ``queueId`` (0 or more; RocketMQ's ``ResetOffsetRequestHeader``), only that queue is
  reset, to ``offset`` when given (it must lie between the queue's min and max offsets) or
  else by ``timestamp``, whatever ``isForce`` says; the members are told of that queue only.
- CLONE_GROUP_OFFSET copies ``srcGroup``'s committed offsets (of ``topic``, or of every topic it
  has) to ``destGroup``; without ``offline`` (RocketMQ's rule), not those of a topic that the
  source's online members do not subscribe to (left-overs).
- GET_ALL_CONSUMER_OFFSET answers every committed offset (``mqadmin topicList -c`` finds the
  groups of each topic there, as RocketMQ's ``queryTopicConsumeByWho`` does from the offsets).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgpack
import trio

from broker.broker_stats import GROUP_GET_NUMS, MINUTE, BrokerStatsManager, stats_key
from broker.config import BrokerConfig
from broker.consumer_offset import ConsumerOffsetManager, check_key_parts
from broker.processors.client import ClientService
from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from common.properties import convert_value, parse_properties
from remoting.admin_bodies import (
    BrokerStatsData,
    BrokerStatsItem,
    Connection,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    QueueConsumeStats,
    QueueOffset,
    TopicOffset,
    encode_broker_stats_data,
    encode_consume_stats,
    encode_consume_stats_list,
    encode_consumer_connection,
    encode_producer_connection,
    encode_reset_offset,
    encode_topic_stats,
)
from remoting.channel import Channel, Handler
from remoting.codes import LanguageCode, RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import error, guarded, header_int, header_str, opt_bool, opt_int, opt_str
from store import MessageStore

log = logging.getLogger(__name__)

LIVE_KEYS: Final = {
    "autoCreateTopicEnable": "auto_create_topic_enable",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "autoCreateSubscriptionGroup": "auto_create_subscription_group",
    "flushConsumerOffsetInterval": "flush_consumer_offset_interval_ms",
    "registerNameServerPeriod": "register_name_server_period_ms",
    "channelExpiredTimeout": "channel_expired_timeout_ms",
    "brokerPermission": "broker_permission",
}
"""Broker keys UPDATE_BROKER_CONFIG changes at runtime -> BrokerConfig field."""
RESET_NOTIFY_TIMEOUT_S: Final = 3.0
"""Upper bound of one RESET_CONSUMER_CLIENT_OFFSET send."""


class AdminStatsProcessor:
    """Stats, connections, offset resets and runtime config; see the module rules."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        groups: SubscriptionGroupManager,
        clients: ClientService,
        config: BrokerConfig,
        *,
        on_permission_changed: Callable[[], Awaitable[None]] | None = None,
        broker_stats: BrokerStatsManager | None = None,
    ) -> None:
        self.broker_stats = BrokerStatsManager() if broker_stats is None else broker_stats
        """The counts VIEW_BROKER_STATS_DATA and ``consumeTps`` read."""
        self.on_permission_changed = on_permission_changed
        """Re-registers with the name servers: routes carry ``brokerPermission``."""
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.clients = clients
        self.config = config

    # ------------------------------------------------------------------ helpers

    def _store_time(self, topic: str, queue_id: int, logical: int) -> int:
        """Store timestamp of the message at ``logical`` (0 if unknown)."""
        cq = self.store.find_consume_queue(topic, queue_id)
        unit = cq.unit_at(logical) if cq is not None and logical >= 0 else None
        if unit is None or unit[0] < self.store.commitlog.min_offset:
            return 0
        return self.store.commitlog.store_timestamp_at(unit[0])

    def _queue_ids(self, topic: str) -> range:
        """The queues producers write (topic stats, as RocketMQ's)."""
        config = self.topics.select(topic)
        return range(config.write_queue_nums if config is not None else 0)

    def _read_queue_ids(self, topic: str) -> range:
        """The queues consumers read (consume stats, as RocketMQ's): while a topic shrinks
        (write queues first), the queues no longer written still hold a backlog."""
        config = self.topics.select(topic)
        return range(config.read_queue_nums if config is not None else 0)

    def _all_queue_ids(self, topic: str) -> range:
        """Every queue consumers may hold an offset for (offset resets)."""
        config = self.topics.select(topic)
        return range(max(config.read_queue_nums, config.write_queue_nums) if config else 0)

    def _subscribed_topics(self, group: str) -> set[str] | None:
        """The topics the group's online members subscribe to (its ``%RETRY%`` topic
        included), or None when it has no member here or they subscribe to nothing."""
        data = self.clients.manager.consumer_data(group)
        if data is None or not data.subscriptions:
            return None
        return {s.topic for s in data.subscriptions}

    # ------------------------------------------------------------------ stats

    async def topic_stats(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO."""
        topic = header_str(request, "topic")
        if self.topics.select(topic) is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        rows = []
        for qid in self._queue_ids(topic):
            hi = self.store.get_max_offset_in_queue(topic, qid)
            rows.append(
                TopicOffset(
                    topic,
                    self.config.broker_name,
                    qid,
                    self.store.get_min_offset_in_queue(topic, qid),
                    hi,
                    self._store_time(topic, qid, hi - 1) if hi > 0 else 0,
                )
            )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_topic_stats(rows)
        )

    async def consume_stats(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_CONSUME_STATS."""
        group = header_str(request, "consumerGroup")
        topic = opt_str(request, "topic", "")
        topics = {topic} if topic else self.offsets.which_topics_by_group(group)
        per_topic = self._group_consume_stats(group, topics, add_subscribed=not topic)
        rows = tuple(row for stats in per_topic for row in stats.rows)
        tps = sum(stats.consume_tps for stats in per_topic)
        body = encode_consume_stats(ConsumeStats(rows, tps))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def _group_consume_stats(
        self, group: str, topics: set[str], *, add_subscribed: bool = True
    ) -> list[ConsumeStats]:
        """The group's ConsumeStats of each of ``topics`` (and, with ``add_subscribed``, of
        those its online members subscribe to), by topic name (see the module rules)."""
        subscribed = self._subscribed_topics(group)
        if add_subscribed:
            topics = topics | (subscribed or set())
        if subscribed:  # online: only what its members read (RocketMQ's getConsumeStats)
            topics &= subscribed
        return [self._topic_consume_stats(group, t) for t in sorted(topics)]

    def _topic_consume_stats(self, group: str, topic: str) -> ConsumeStats:
        """One topic's rows of the group, and its pull rate over the last minute."""
        committed = self.offsets.query_offsets(group, topic)
        rows: list[QueueConsumeStats] = []
        for qid in self._read_queue_ids(topic):
            consumer = max(0, committed.get(qid, 0))
            rows.append(
                QueueConsumeStats(
                    topic,
                    self.config.broker_name,
                    qid,
                    self.store.get_max_offset_in_queue(topic, qid),
                    consumer,
                    self._store_time(topic, qid, consumer - 1) if consumer > 0 else 0,
                    max(consumer, self.offsets.query_pull_offset(group, topic, qid)),
                )
            )
        return ConsumeStats(tuple(rows), self._pull_tps(group, topic))

    def _pull_tps(self, group: str, topic: str) -> float:
        """Messages ``group`` pulled from ``topic`` a second over the last minute."""
        item = self.broker_stats.item(GROUP_GET_NUMS, stats_key(topic, group))
        return 0.0 if item is None else item.snapshot(MINUTE, trio.current_time()).tps

    async def broker_stats_data(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA."""
        name = header_str(request, "statsName")
        key = header_str(request, "statsKey")
        snaps = self.broker_stats.snapshots(name, key, trio.current_time())
        if snaps is None:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist"
            )
        minute, hour, day = (
            BrokerStatsItem(s.sum, s.tps, s.avgpt)
            for s in (snaps["minute"], snaps["hour"], snaps["day"])
        )
        body = encode_broker_stats_data(BrokerStatsData(minute, hour, day))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def broker_consume_stats(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS."""
        only_order = opt_bool(request, "isOrder", False)
        opt_int(request, "timeoutMillis", 0)  # checked, not used (the caller's timeout)
        topics_of = self._topics_by_group()
        groups: list[tuple[str, tuple[ConsumeStats, ...]]] = []
        for group in sorted(self.groups.groups()):
            per_topic = self._group_consume_stats(group, topics_of.get(group, set()))
            if only_order:
                per_topic = [s for s in per_topic if s.rows and self._is_order(s.rows[0].topic)]
            groups.append((group, tuple(per_topic)))
        rows = [row for _, per_topic in groups for stats in per_topic for row in stats.rows]
        body = encode_consume_stats_list(
            ConsumeStatsList(
                tuple(groups),
                "{}:{}".format(*self.store.config.store_host),
                sum(row.diff for row in rows),
                sum(row.inflight for row in rows),
            )
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def _topics_by_group(self) -> dict[str, set[str]]:
        """Group -> the topics it has committed offsets for (one walk of the offset table)."""
        out: dict[str, set[str]] = {}
        for key in self.offsets.to_wire()["offsetTable"]:
            topic, _, group = str(key).rpartition("@")
            out.setdefault(group, set()).add(topic)
        return out

    def _is_order(self, topic: str) -> bool:
        config = self.topics.select(topic)
        return config is not None and config.order

    # ------------------------------------------------------------------ connections

    async def consumer_connections(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_CONSUMER_CONNECTION_LIST."""
        group = header_str(request, "consumerGroup")
        info = self.clients.manager.consumers.get(group)
        if info is None or not info.clients:
            return error(
                request,
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{group}] not online",
            )
        data = info.data
        cc = ConsumerConnection(
            _connections(info.clients.values()),
            {s.topic: s.sub_string for s in data.subscriptions},
            data.consume_type.value,
            data.message_model.value,
            data.consume_from_where.value,
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_consumer_connection(cc)
        )

    async def producer_connections(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST."""
        group = header_str(request, "producerGroup")
        clients = self.clients.manager.producers.get(group)
        if not clients:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            body=encode_producer_connection(_connections(clients.values())),
        )

    # ------------------------------------------------------------------ config

    async def update_broker_config(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG: apply :data:`LIVE_KEYS` in memory."""
        try:
            props = parse_properties(request.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"bad config body: {exc}")
        if not props:
            return error(request, ResponseCode.SYSTEM_ERROR, "no key=value in the body")
        kinds: dict[str, type] = {
            f.name: f.metadata["type"] for f in dataclasses.fields(BrokerConfig) if f.metadata
        }
        changes: dict[str, Any] = {}
        try:
            for key, raw in props.items():
                name = LIVE_KEYS.get(key)
                if name is None:
                    live = ", ".join(sorted(LIVE_KEYS))
                    return error(
                        request,
                        ResponseCode.SYSTEM_ERROR,
                        f"{key} cannot be changed at runtime (set it in broker.conf and "
                        f"restart); runtime keys: {live}",
                    )
                changes[name] = convert_value(key, raw, kinds[name])
            dataclasses.replace(self.config, **changes)  # validates the combination
        except ValueError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        self._apply(changes)
        log.info("broker config updated at runtime: %s", props)
        if "broker_permission" in changes and self.on_permission_changed is not None:
            await self.on_permission_changed()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def _apply(self, changes: dict[str, Any]) -> None:
        """Change the shared config in place (every holder reads it at use time) and the
        managers that copied a value at start."""
        for name, value in changes.items():
            object.__setattr__(self.config, name, value)
        self.topics.auto_create_enable = self.config.auto_create_topic_enable
        self.topics.default_queue_nums = self.config.default_topic_queue_nums
        self.groups.auto_create = self.config.auto_create_subscription_group
        self.clients.manager.expired_ms = self.config.channel_expired_timeout_ms

    # ------------------------------------------------------------------ offsets

    async def reset_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (see the module rules)."""
        topic = header_str(request, "topic")
        group = header_str(request, "group")
        timestamp = header_int(request, "timestamp")
        force = opt_bool(request, "isForce", True)
        if self.topics.select(topic) is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        queue_ids = self._all_queue_ids(topic)
        known = any(self.offsets.query_offset(group, topic, qid) >= 0 for qid in queue_ids)
        if not known and topic not in (self._subscribed_topics(group) or set()):
            # a typo, say: committing would create the group, which would start from here
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"The consumer group <{group}> not exist"
            )
        queue_id = opt_int(request, "queueId", -1)
        if queue_id >= 0:
            reset = self._reset_one_queue(
                group, topic, queue_id, timestamp, opt_int(request, "offset", -1)
            )
            if isinstance(reset, str):
                return error(request, ResponseCode.SYSTEM_ERROR, reset)
            entries = [reset]
        else:
            entries = self._reset_every_queue(group, topic, timestamp, force)
        body = encode_reset_offset(entries)
        fields: dict[str, ExtValue] = {
            "topic": topic,
            "group": group,
            "timestamp": str(timestamp),
            "isForce": str(force).lower(),
        }
        members = self.clients.manager.consumer_channels(group)
        log.info(
            "reset %s of %s to %s; notifying %d member(s)", topic, group, entries, len(members)
        )
        async with trio.open_nursery() as nursery:
            for member in members:
                nursery.start_soon(_notify_reset, member, fields, body)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def _reset_every_queue(
        self, group: str, topic: str, timestamp: int, force: bool
    ) -> list[QueueOffset]:
        """Commit each queue's offset at ``timestamp`` (see the module rules)."""
        entries: list[QueueOffset] = []
        for qid in self._all_queue_ids(topic):
            if timestamp == -1:
                offset = self.store.get_max_offset_in_queue(topic, qid)
            else:
                offset = self.store.get_offset_in_queue_by_time(topic, qid, timestamp)
            current = self.offsets.query_offset(group, topic, qid)
            if not force and 0 <= current < offset:
                offset = current
            self.offsets.commit_offset(group, topic, qid, offset)
            entries.append(QueueOffset(topic, self.config.broker_name, qid, offset))
        return entries

    def _reset_one_queue(
        self, group: str, topic: str, queue_id: int, timestamp: int, offset: int
    ) -> QueueOffset | str:
        """Commit one queue's offset: ``offset`` when given (not -1), which must lie in the
        queue's ``[min, max]``, else the first stored at or after ``timestamp`` (-1: the max);
        or why not, as RocketMQ's ``resetOffsetInner``."""
        queue_ids = self._all_queue_ids(topic)
        if queue_id not in queue_ids:
            return f"queue {queue_id} of topic {topic} does not exist (it has {len(queue_ids)})"
        lo = self.store.get_min_offset_in_queue(topic, queue_id)
        hi = self.store.get_max_offset_in_queue(topic, queue_id)
        if offset == -1:
            offset = (
                hi
                if timestamp == -1
                else self.store.get_offset_in_queue_by_time(topic, queue_id, timestamp)
            )
        elif not lo <= offset <= hi:
            return f"Target offset {offset} not in consume queue range [{lo}-{hi}]"
        self.offsets.commit_offset(group, topic, queue_id, offset)
        return QueueOffset(topic, self.config.broker_name, queue_id, offset)

    async def clone_group_offset(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """CLONE_GROUP_OFFSET."""
        src = header_str(request, "srcGroup")
        dst = header_str(request, "destGroup")
        topic = opt_str(request, "topic", "")
        topics = [topic] if topic else sorted(self.offsets.which_topics_by_group(src))
        if not opt_bool(request, "offline", False):
            subscribed = self._subscribed_topics(src)  # left-overs stay (RocketMQ's rule)
            topics = [t for t in topics if subscribed is None or t in subscribed]
        try:
            check_key_parts(topic, dst)
            for t in topics:
                self.offsets.clone_offset(src, dst, t)
        except ValueError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def all_consumer_offsets(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_ALL_CONSUMER_OFFSET."""
        body: bytes = msgpack.packb(self.offsets.to_wire(), use_bin_type=True)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.GET_TOPIC_STATS_INFO): guarded(self.topic_stats),
            int(RequestCode.GET_CONSUME_STATS): guarded(self.consume_stats),
            int(RequestCode.GET_CONSUMER_CONNECTION_LIST): guarded(self.consumer_connections),
            int(RequestCode.GET_PRODUCER_CONNECTION_LIST): guarded(self.producer_connections),
            int(RequestCode.UPDATE_BROKER_CONFIG): guarded(self.update_broker_config),
            int(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET): guarded(self.reset_offset),
            int(RequestCode.CLONE_GROUP_OFFSET): guarded(self.clone_group_offset),
            int(RequestCode.GET_ALL_CONSUMER_OFFSET): guarded(self.all_consumer_offsets),
            int(RequestCode.VIEW_BROKER_STATS_DATA): guarded(self.broker_stats_data),
            int(RequestCode.GET_BROKER_CONSUME_STATS): guarded(self.broker_consume_stats),
        }


def _language(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return str(code)


def _connections(infos: Any) -> tuple[Connection, ...]:
    """``Connection`` rows of ClientChannelInfo objects, sorted by client id."""
    return tuple(
        Connection(i.client_id, i.channel.remote_addr, _language(i.language), i.version)
        for i in sorted(infos, key=lambda i: i.client_id)
    )


async def _notify_reset(member: Channel, fields: dict[str, ExtValue], body: bytes) -> None:
    """One oneway RESET_CONSUMER_CLIENT_OFFSET; a failure is logged."""
    cmd = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, fields, body, opaque=0)
    try:
        with trio.fail_after(RESET_NOTIFY_TIMEOUT_S):
            await member.invoke_oneway(cmd)
    except (
        RemotingError,
        OSError,
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
    ) as exc:
        log.warning("sending the offset reset to %s failed: %r", member.remote_addr, exc)
