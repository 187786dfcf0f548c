"""PULL_MESSAGE and the offset / query requests (RocketMQ's ``PullMessageProcessor``,
``ConsumerManageProcessor``, ``AdminBrokerProcessor`` offset requests, ``QueryMessageProcessor``).

::

    PULL_MESSAGE                11  consumerGroup topic queueId queueOffset maxMsgNums
                                    [subscription "*" | "A || B" | SQL92 text]
                                    [expressionType TAG | SQL92] [subVersion]
                                    [sysFlag 0] [commitOffset -1] [suspendTimeoutMillis]
                                    -> body = raw records end to end;
                                    nextBeginOffset minOffset maxOffset suggestWhichBrokerId=0
    QUERY_CONSUMER_OFFSET       14  consumerGroup topic queueId -> offset | QUERY_NOT_FOUND
    UPDATE_CONSUMER_OFFSET      15  consumerGroup topic queueId commitOffset
    GET_MAX_OFFSET              30  topic queueId -> offset
    GET_MIN_OFFSET              31  topic queueId -> offset
    GET_EARLIEST_MSG_STORETIME  32  topic queueId -> timestamp (-1 if the queue has none)
    SEARCH_OFFSET_BY_TIMESTAMP  29  topic queueId timestamp -> offset
    VIEW_MESSAGE_BY_ID          33  offset -> raw record | SYSTEM_ERROR
    QUERY_MESSAGE               12  topic key maxNum beginTimestamp endTimestamp
                                    [_UNIQUE_KEY_QUERY] -> raw records | QUERY_NOT_FOUND
                                    (maxNum <= 0 finds nothing; answered after a walk that
                                    lets other requests run, see ``query_message``)

Pull codes and ``nextBeginOffset`` come from :mod:`broker.status_codes` only. Tag filtering
(facts §4): ``"*"`` or empty matches everything; otherwise the ``||``-separated tags' Java hash
codes filter the consume queue units (the client re-checks the exact tag).

PULL_MESSAGE first checks the subscription group when a
:class:`broker.subscription_group.SubscriptionGroupManager` is given (unknown and not
auto-creatable -> SUBSCRIPTION_GROUP_NOT_EXIST, ``consumeEnable`` false -> NO_PERMISSION
"subscription group no permission, <group>"), then the topic as RocketMQ's
``PullMessageProcessor``: unknown topic -> TOPIC_NOT_EXIST, no read permission -> NO_PERMISSION,
``queueId`` outside ``readQueueNums`` -> SYSTEM_ERROR. Then the filter:

- ``expressionType`` TAG (or empty, or absent): the tag filter above;
- SQL92 with ``enablePropertyFilter=false`` (RocketMQ's default), or any other type ->
  SYSTEM_ERROR "The broker does not support consumer to filter message by <type>";
- SQL92 on a BatchCQ topic (``queue.type=BatchCQ``) -> SYSTEM_ERROR "SQL92 filtering is not
  supported on the BatchCQ topic[<topic>] ...", whatever ``enablePropertyFilter`` says;
- SQL92 with ``enablePropertyFilter=true``: the ``subscription`` is compiled once per
  ``(group, topic, subVersion)`` (:mod:`broker.consumer_filter`; empty or malformed ->
  SUBSCRIPTION_PARSE_FAILED "parse the consumer's subscription failed: <why>") and each record
  read is kept only if its properties match (:mod:`common.sql_filter`); the others are skipped
  as tag-filtered ones are, so the statuses and ``nextBeginOffset`` are the tag filter's (none
  matched -> PULL_RETRY_IMMEDIATELY past the scanned ones, or a long-polling hold at the end of
  the queue).

Long polling
(:mod:`broker.long_polling`): a pull answered PULL_NOT_FOUND whose ``sysFlag`` has the SUSPEND
bit and whose ``suspendTimeoutMillis`` > 0 is parked until a matching message arrives in its
queue (a message the pull's filter skips does not end the hold) or the suspend time elapses;
then, as RocketMQ re-runs the whole request, the group and
topic checks above are made again (a topic deleted or made unreadable meanwhile is answered
with its refusal) and the read is re-run and answered. With ``longPollingEnable=false`` such a
pull is held for the broker's ``shortPollingTimeMills`` (default 1 s) instead, whatever its
suspend time, and answered then: an arrival does not end it early (RocketMQ's short polling,
see :func:`broker.long_polling.short_poll`).

Each read a pull is answered from (and a held pull's first read) records its ``nextBeginOffset``
as the group's pull offset of the queue (RocketMQ's ``commitPullOffset``, in memory), whatever
the status: ``mqadmin consumerProgress`` shows ``pullOffset - consumerOffset`` as ``#Inflight``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator
from functools import partial

import trio

from broker.broker_stats import BrokerStatsManager
from broker.config import BrokerConfig
from broker.consumer_filter import ConsumerFilterManager, commit_log_matcher
from broker.consumer_offset import ConsumerOffsetManager
from broker.long_polling import (
    CHECK_INTERVAL_S,
    SHORT_POLLING_MS,
    PullHoldTable,
    hold,
    short_poll,
    suspend_seconds,
)
from broker.status_codes import pull_response_code
from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from common.hashing import java_string_hash
from common.message import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUSPEND
from common.record import RecordError
from common.route import PermName
from common.sql_filter import EXPRESSION_SQL92
from common.subscription import EXPRESSION_TAG
from common.topic_attributes import CQType, queue_type_of
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.headers import error, guarded, header_int, header_str, opt_bool, opt_int, opt_str
from store import GetResult, GetStatus, MessageStore, QueryResult

log = logging.getLogger(__name__)

SUB_ALL = "*"


def subscription_tag_codes(subscription: str) -> frozenset[int] | None:
    """Tag hash codes of a TAG subscription; None for ``"*"`` / empty (match everything)."""
    text = subscription.strip()
    if not text or text == SUB_ALL:
        return None
    tags = [t.strip() for t in text.split("||")]
    return frozenset(java_string_hash(t) for t in tags if t)


def sql92_on_batch_cq(topic: str) -> str:
    """The remark refusing an SQL92 pull of a BatchCQ topic."""
    return (
        f"SQL92 filtering is not supported on the BatchCQ topic[{topic}] (queue.type=BatchCQ: "
        "the broker filters a batch as one record); subscribe by tags instead"
    )


class PullProcessor:
    """Reads from the store and manages committed offsets."""

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        topics: TopicConfigManager,
        holds: PullHoldTable | None = None,
        *,
        long_polling: bool = True,
        short_polling_ms: int = SHORT_POLLING_MS,
        check_interval_s: float = CHECK_INTERVAL_S,
        groups: SubscriptionGroupManager | None = None,
        broker_config: BrokerConfig | None = None,
        stats: BrokerStatsManager | None = None,
        consumer_filters: ConsumerFilterManager | None = None,
    ) -> None:
        self.consumer_filters = consumer_filters
        """Compiled SQL92 subscriptions; None refuses SQL92 pulls (``enablePropertyFilter``
        off)."""
        self.stats = stats
        """Counts each FOUND pull's records and bytes under ``topic@group`` (None: not
        counted)."""
        self.groups = groups
        """Subscription groups checked before a pull (None: no group check)."""
        self.broker_config = broker_config
        """Its ``brokerPermission`` (read at each pull: it changes at runtime) must allow
        reads (None: no check)."""
        self.store = store
        self.offsets = offsets
        self.topics = topics
        self.holds = PullHoldTable() if holds is None else holds
        """Parked pulls; the owner wires ``holds.notify`` to ``store.arrival_listener``."""
        self.long_polling = long_polling
        self.short_polling_ms = short_polling_ms
        """How long an empty pull is held when ``long_polling`` is off
        (``shortPollingTimeMills``)."""
        self.check_interval_s = check_interval_s

    def pull(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """PULL_MESSAGE: the answer at once (sent inline), or an awaitable of it when the pull
        found nothing and is held for long polling."""
        group = header_str(request, "consumerGroup")
        topic = header_str(request, "topic")
        queue_id = header_int(request, "queueId")
        offset = header_int(request, "queueOffset")
        max_msgs = header_int(request, "maxMsgNums")
        subscription = opt_str(request, "subscription", SUB_ALL)
        sys_flag = opt_int(request, "sysFlag", 0)
        # RocketMQ's PullSysFlag: the commit offset counts only with its bit set (its pull and
        # lite-pull consumers send commitOffset=0 without it; that must not rewind the group),
        # and so does the suspend time (its pull consumer's non-blocking pull sends 20000
        # without the bit, and gives up after 10 s)
        commits = sys_flag & PULL_FLAG_COMMIT_OFFSET
        commit_offset = opt_int(request, "commitOffset", -1) if commits else -1
        suspends = sys_flag & PULL_FLAG_SUSPEND
        suspend_ms = opt_int(request, "suspendTimeoutMillis", 0) if suspends else 0
        if offset < 0 or max_msgs <= 0:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"illegal pull: queueId={queue_id} queueOffset={offset} maxMsgNums={max_msgs}",
            )
        refused = self._refusal(request, group, topic, queue_id)
        if refused is not None:
            return refused
        expression_type = opt_str(request, "expressionType", EXPRESSION_TAG)
        read: Callable[[], GetResult]
        if expression_type in ("", EXPRESSION_TAG):
            codes = subscription_tag_codes(subscription)
            read = partial(
                self.store.get_messages, topic, queue_id, offset, max_msgs, tag_codes=codes
            )
        else:
            if expression_type == EXPRESSION_SQL92 and self._batch_cq(topic):
                return error(request, ResponseCode.SYSTEM_ERROR, sql92_on_batch_cq(topic))
            sql_read = self._sql_read(request, group, topic, queue_id, expression_type, max_msgs)
            if isinstance(sql_read, RemotingCommand):
                return sql_read
            read = sql_read
        result = read()
        self.offsets.commit_pull_offset(group, topic, queue_id, result.next_begin_offset)
        code = pull_response_code(result.status, offset)
        if commit_offset >= 0:
            self.offsets.commit_offset(
                group, topic, queue_id, self._within_queue(topic, queue_id, commit_offset)
            )
        suspend_s = suspend_seconds(
            suspend_ms, long_polling=self.long_polling, short_polling_ms=self.short_polling_ms
        )
        if code == ResponseCode.PULL_NOT_FOUND and suspend_s > 0:
            return self._answer_when_held(request, group, topic, queue_id, suspend_s, read)
        return self._counted(_pull_response(request, code, result), group, topic, result)

    async def _answer_when_held(
        self,
        request: RemotingCommand,
        group: str,
        topic: str,
        queue_id: int,
        suspend_s: float,
        read: Callable[[], GetResult],
    ) -> RemotingCommand:
        """Hold the pull (a short poll with long polling off), then answer it: with the refusal
        of its group or topic if they changed meanwhile (RocketMQ re-runs the whole request),
        else with the last read."""
        offset = header_int(request, "queueOffset")
        if self.long_polling:
            result = await hold(
                self.holds,
                topic,
                queue_id,
                offset,
                suspend_s,
                read,
                _worth_answering,
                self.check_interval_s,
            )
        else:
            result = await short_poll(self.holds, topic, queue_id, offset, suspend_s, read)
        refused = self._refusal(request, group, topic, queue_id)
        if refused is not None:
            return refused
        self.offsets.commit_pull_offset(group, topic, queue_id, result.next_begin_offset)
        response = _pull_response(request, pull_response_code(result.status, offset), result)
        return self._counted(response, group, topic, result)

    def _counted(
        self, response: RemotingCommand, group: str, topic: str, result: GetResult
    ) -> RemotingCommand:
        """``response``, its records counted first when it is FOUND (SUCCESS)."""
        if self.stats is not None and response.code == ResponseCode.SUCCESS:
            self.stats.inc_group_get(group, topic, len(result.records), len(response.body))
        return response

    def _sql_read(
        self,
        request: RemotingCommand,
        group: str,
        topic: str,
        queue_id: int,
        expression_type: str,
        max_msgs: int,
    ) -> Callable[[], GetResult] | RemotingCommand:
        """The read of a pull filtering by ``expression_type`` (not TAG), or its refusal.

        Refused as RocketMQ refuses it: with SYSTEM_ERROR "The broker does not support consumer
        to filter message by <type>" when ``enablePropertyFilter`` is off (read as tags, the
        expression would match no tag and the pull would skip every message it passed over)
        or the type is not SQL92; with SUBSCRIPTION_PARSE_FAILED when the expression is empty
        or does not parse. The read keeps the records whose properties the selector accepts,
        and starts each re-read of a held pull where the previous one stopped when that one
        matched nothing: a held pull tests each new message once.
        """
        filters = self.consumer_filters
        if filters is None or expression_type != EXPRESSION_SQL92:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {expression_type}",
            )
        expression = opt_str(request, "subscription", "")
        version = opt_int(request, "subVersion", 0)
        try:
            if not expression:
                raise ValueError("Expression can't be null! SQL92")
            selector = filters.selector_for_pull(topic, group, expression, version)
        except ValueError as exc:
            log.warning("pull of %s on %s: the subscription does not parse: %s", group, topic, exc)
            return error(
                request,
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"parse the consumer's subscription failed: {exc}",
            )
        matches = commit_log_matcher(selector)
        start = [header_int(request, "queueOffset")]

        def read() -> GetResult:
            result = self.store.get_messages(
                topic, queue_id, start[0], max_msgs, record_filter=matches
            )
            if result.status is GetStatus.NO_MATCHED_MESSAGE:
                start[0] = result.next_begin_offset
            return result

        return read

    def _batch_cq(self, topic: str) -> bool:
        """True when ``topic`` is a BatchCQ topic."""
        config = self.topics.select(topic)
        return config is not None and queue_type_of(config.attributes) is CQType.BATCH_CQ

    def _refusal(
        self, request: RemotingCommand, group: str, topic: str, queue_id: int
    ) -> RemotingCommand | None:
        """The refusal of a pull by its group, broker permission, topic or queue, else None."""
        return self._check_group(request, group) or self._check_topic(
            request, topic, queue_id, group
        )

    def _check_group(self, request: RemotingCommand, group: str) -> RemotingCommand | None:
        """The refusal of a pull by an unknown group or one with consumeEnable off, else None."""
        if self.groups is None:
            return None
        config = self.groups.find(group)
        if config is None:
            return error(
                request,
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{group}] does not exist",
            )
        if not config.consume_enable:
            return error(
                request, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}"
            )
        return None

    def _check_topic(
        self, request: RemotingCommand, topic: str, queue_id: int, group: str
    ) -> RemotingCommand | None:
        """The refusal of a pull from an unknown / unreadable topic or queue, else None."""
        broker = self.broker_config
        if broker is not None and not broker.broker_permission & PermName.PERM_READ:
            return error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.broker_ip1}] pulling message is forbidden",
            )
        config = self.topics.select(topic)
        if config is None:
            return error(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!",
            )
        if not config.perm & PermName.PERM_READ:
            return error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{topic}] pulling message is forbidden",
            )
        if not 0 <= queue_id < config.read_queue_nums:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] consumer:[{group}]",
            )
        return None

    def query_consumer_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET: the committed offset; 0 if none and the queue starts at 0."""
        group = header_str(request, "consumerGroup")
        topic = header_str(request, "topic")
        queue_id = header_int(request, "queueId")
        offset = self.offsets.query_offset(group, topic, queue_id)
        if offset < 0:
            set_zero = opt_bool(request, "setZeroIfNotFound", True)
            if not set_zero or self.store.get_min_offset_in_queue(topic, queue_id) > 0:
                return error(request, ResponseCode.QUERY_NOT_FOUND, "Not found")
            offset = 0
        return _offset_response(request, offset)

    def _within_queue(self, topic: str, queue_id: int, offset: int) -> int:
        """``offset``, at most the queue's max offset: an offset committed past the end would
        skip, unread, the messages the queue gets later up to it."""
        return min(offset, self.store.get_max_offset_in_queue(topic, queue_id))

    def update_consumer_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET."""
        group = header_str(request, "consumerGroup")
        topic = header_str(request, "topic")
        queue_id = header_int(request, "queueId")
        offset = header_int(request, "commitOffset")
        config = self.topics.select(topic)
        if config is None:  # offsets of no topic would only pile up (and outlive it)
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist!")
        if not 0 <= queue_id < max(config.read_queue_nums, config.write_queue_nums):
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] consumer:[{group}]",
            )
        try:
            self.offsets.commit_offset(
                group, topic, queue_id, self._within_queue(topic, queue_id, offset)
            )
        except ValueError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def get_max_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_MAX_OFFSET."""
        topic, queue_id = header_str(request, "topic"), header_int(request, "queueId")
        return _offset_response(request, self.store.get_max_offset_in_queue(topic, queue_id))

    def get_min_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_MIN_OFFSET."""
        topic, queue_id = header_str(request, "topic"), header_int(request, "queueId")
        return _offset_response(request, self.store.get_min_offset_in_queue(topic, queue_id))

    def get_earliest_msg_store_time(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_EARLIEST_MSG_STORETIME: store time of the queue's first readable message."""
        topic, queue_id = header_str(request, "topic"), header_int(request, "queueId")
        timestamp = self.store.get_earliest_message_time(topic, queue_id)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)}
        )

    def search_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """SEARCH_OFFSET_BY_TIMESTAMP: first offset stored at or after ``timestamp``."""
        topic, queue_id = header_str(request, "topic"), header_int(request, "queueId")
        timestamp = header_int(request, "timestamp")
        offset = self.store.get_offset_in_queue_by_time(topic, queue_id, timestamp)
        return _offset_response(request, offset)

    def view_message_by_id(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the raw record at commitlog ``offset``."""
        offset = header_int(request, "offset")
        try:
            raw = self.store.lookup_message_by_offset(offset) if offset >= 0 else None
        except (RecordError, ValueError):
            raw = None
        if raw is None:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=raw)

    def query_message(
        self, request: RemotingCommand, channel: Channel
    ) -> Awaitable[RemotingCommand]:
        """QUERY_MESSAGE: records of ``topic`` with ``key`` in the time range.

        A ``maxNum`` of 0 or less finds nothing (QUERY_NOT_FOUND), as RocketMQ's
        ``min(maxNum, maxMsgsNumBatch)`` does. The answer is awaited: the index walk pauses
        every :attr:`IndexService.walk_step` entries (:meth:`MessageStore.query_steps`), so a
        key many messages share, queried for an old time window, does not hold up the
        broker's other requests while millions of entries are read. The walk stays on the
        event loop, where every index write happens, so it sees whole batches only; in a
        worker thread it would read entries while the loop writes them, and compete with the
        loop for the GIL.
        """
        topic = header_str(request, "topic")
        key = header_str(request, "key")
        max_num = header_int(request, "maxNum")
        begin = header_int(request, "beginTimestamp")
        end = header_int(request, "endTimestamp")
        if opt_bool(request, "_UNIQUE_KEY_QUERY"):
            max_num = self.store.config.default_query_max_num
        max_num = min(max_num, self.store.config.max_msgs_num_batch)
        steps = self.store.query_steps(topic, key, max_num, begin, end)
        return _answer_query(request, steps)

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.PULL_MESSAGE): guarded(self.pull),
            int(RequestCode.QUERY_CONSUMER_OFFSET): guarded(self.query_consumer_offset),
            int(RequestCode.UPDATE_CONSUMER_OFFSET): guarded(self.update_consumer_offset),
            int(RequestCode.GET_MAX_OFFSET): guarded(self.get_max_offset),
            int(RequestCode.GET_MIN_OFFSET): guarded(self.get_min_offset),
            int(RequestCode.GET_EARLIEST_MSG_STORETIME): guarded(self.get_earliest_msg_store_time),
            int(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP): guarded(self.search_offset),
            int(RequestCode.VIEW_MESSAGE_BY_ID): guarded(self.view_message_by_id),
            int(RequestCode.QUERY_MESSAGE): guarded(self.query_message),
        }


def _pull_response(
    request: RemotingCommand, code: ResponseCode, result: GetResult
) -> RemotingCommand:
    fields: dict[str, ExtValue] = {
        "nextBeginOffset": str(result.next_begin_offset),
        "minOffset": str(result.min_offset),
        "maxOffset": str(result.max_offset),
        "suggestWhichBrokerId": "0",
    }
    return RemotingCommand.response_to(
        request,
        code,
        remark=result.status.value,
        ext_fields=fields,
        body=b"".join(result.records),
    )


async def _answer_query(
    request: RemotingCommand, steps: Generator[None, None, QueryResult]
) -> RemotingCommand:
    """Run a query's steps, letting the loop's other tasks run between two; its answer."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: QueryResult = done.value
            break
        await trio.lowlevel.checkpoint()
    fields: dict[str, ExtValue] = {
        "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
        "indexLastUpdatePhyoffset": str(result.index_last_update_phy_offset),
    }
    if not result.records:
        return RemotingCommand.response_to(
            request,
            ResponseCode.QUERY_NOT_FOUND,
            remark="can not find message, maybe time range not correct",
            ext_fields=fields,
        )
    return RemotingCommand.response_to(
        request, ResponseCode.SUCCESS, ext_fields=fields, body=b"".join(result.records)
    )


def _offset_response(request: RemotingCommand, offset: int) -> RemotingCommand:
    return RemotingCommand.response_to(
        request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)}
    )


def _worth_answering(result: GetResult) -> bool:
    """Whether a parked pull should answer ``result`` now rather than keep waiting.

    Nothing new (a PULL_NOT_FOUND status), or only messages the tag filter skipped up to the end
    of the queue, keeps it waiting; anything else (found, moved, a partial filtered scan) answers.
    """
    if result.status is GetStatus.NO_MATCHED_MESSAGE:
        return result.next_begin_offset < result.max_offset
    return pull_response_code(result.status) != ResponseCode.PULL_NOT_FOUND


def make_pull_handlers(
    store: MessageStore,
    offsets_mgr: ConsumerOffsetManager,
    topics: TopicConfigManager,
    holds: PullHoldTable | None = None,
    *,
    long_polling: bool = True,
    short_polling_ms: int = SHORT_POLLING_MS,
    check_interval_s: float = CHECK_INTERVAL_S,
    groups: SubscriptionGroupManager | None = None,
    broker_config: BrokerConfig | None = None,
    stats: BrokerStatsManager | None = None,
    consumer_filters: ConsumerFilterManager | None = None,
) -> dict[int, Handler]:
    """The pull/offset/query handler table over the real store, offsets and topic table.

    ``holds`` is where pulls park; wire its ``notify`` to ``store.arrival_listener`` (a fresh,
    unwired table is used when None: parked pulls then only see the periodic re-check every
    ``check_interval_s``).
    """
    processor = PullProcessor(
        store,
        offsets_mgr,
        topics,
        holds,
        long_polling=long_polling,
        short_polling_ms=short_polling_ms,
        check_interval_s=check_interval_s,
        groups=groups,
        broker_config=broker_config,
        stats=stats,
        consumer_filters=consumer_filters,
    )
    return processor.handlers()
