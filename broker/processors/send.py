"""SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (RocketMQ's ``SendMessageProcessor``).

Request header (``ext_fields``; V2 uses the single letters ``a``..``n``, read straight from
them when every field has its usual type and renamed first otherwise): producerGroup, topic,
queueId (-1 or missing: round robin over the writable queues), sysFlag, bornTimestamp, flag,
properties (``k\\x01v\\x02``), reconsumeTimes, batch.

Bodies:

- SEND_MESSAGE / SEND_MESSAGE_V2: the message body.
- SEND_BATCH_MESSAGE: **minimq's own encoding**, not RocketMQ's §7 batch frames: a msgpack
  array of ``[body, properties, flag]`` entries (:mod:`common.batch_body`; ``properties`` and
  ``flag`` may be nil, and the older ``{"body", "properties", "flag"}`` maps are accepted).
  Every message goes to the header's topic and queue; header properties/flag are the defaults
  each entry overrides.

Checks, in order, all before the store is touched: topic name (MESSAGE_ILLEGAL), system topics
clients may not send to (NO_PERMISSION, as RocketMQ), topic exists or is auto-created
(TOPIC_NOT_EXIST), write permission (NO_PERMISSION), queue id range (SYSTEM_ERROR, as RocketMQ's
``msgCheck``), properties parse and size (MESSAGE_ILLEGAL), body size <= maxMessageSize
(MESSAGE_ILLEGAL). A message with a DELAY property is redirected to ``SCHEDULE_TOPIC_XXXX`` by
the ``transform`` hook (:mod:`broker.schedule`; a non-integer DELAY is MESSAGE_ILLEGAL); a batch
with a DELAY level above 0 (or not an integer) is MESSAGE_ILLEGAL, as RocketMQ's. The same hook
turns a message with the PREPARED sysflag into a half message (:mod:`broker.transaction`); a
prepared batch is MESSAGE_ILLEGAL. The put outcome is mapped by
:func:`broker.status_codes.put_response_code`.

A single message sent to a retry topic ``%RETRY%<group>`` (a push consumer's fallback when
CONSUMER_SEND_MSG_BACK failed, :mod:`client.send_back`; RocketMQ's ``handleRetryAndDLQ``)
needs the group (else SUBSCRIPTION_GROUP_NOT_EXIST) and is stored with the header's
reconsumeTimes; when that is over the maximum (the header's maxReconsumeTimes when >= 0, else
the group's ``retryMaxTimes``) it goes to ``%DLQ%<group>`` instead (created on demand, its DELAY
dropped), as CONSUMER_SEND_MSG_BACK sends it there. A batch to a retry topic is
MESSAGE_ILLEGAL ("batch request does not support retry group ...", as RocketMQ's
``sendBatchMessage``), answered before the topic is looked up or created.

Response header: msgId (offsetMsgId of the store host and physical offset; comma-separated for a
batch), queueId, queueOffset (of the first message); a half message adds transactionId (its
UNIQ_KEY) and its msgId / queueOffset are those of the half record.

BatchCQ topics (``queue.type=BatchCQ``, :mod:`common.topic_attributes`): a SEND_BATCH_MESSAGE
passes the same checks with the same answers, then is stored as ONE inner-batch record
(:mod:`common.inner_batch`: SYSFLAG ``INNER_BATCH | NEED_UNWRAP``, the header's properties plus
``INNER_NUM`` and the batch ``UNIQ_KEY`` (the header's, else a new one), the body as received)
with no per-message work beyond the C-level batch validation. Its answer: msgId = the record's
offset id, queueOffset = the first message's, ``batchUniqId`` = the batch UNIQ_KEY (RocketMQ's
response field); the send is counted as INNER_NUM messages. A single message to a BatchCQ
topic is stored as today (a batch of one in its queue).
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import NamedTuple

import trio

from broker.broker_stats import BrokerStatsManager
from broker.config import BrokerConfig
from broker.processors.send_back import DLQ_NUMS_PER_GROUP, DLQ_PERM, create_topic_in_send_back
from broker.processors.send_checks import (
    BatchEntry,
    IllegalMessageError,
    check_properties,
    decode_batch_body,
    encode_batch_body,
    parse_properties,
)
from broker.schedule import delay_level_in, delay_level_of
from broker.status_codes import put_response_code
from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from common.deferred import Deferred
from common.digits import parse_uint
from common.inner_batch import INNER_BATCH_BITS
from common.message import MessageConst, MessageSysFlag
from common.message_id import UniqKeyGenerator, joined_offset_msg_ids
from common.record import MessageRecord, pack_host
from common.route import PermName, TopicConfig
from common.topic import (
    RETRY_GROUP_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
    dlq_topic,
    is_not_allowed_send_topic,
    topic_problem,
)
from common.topic_attributes import CQType, queue_type_of
from remoting.channel import Channel, Handler
from remoting.client import split_addr
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (
    error,
    failure_response,
    guarded,
    header_str,
    opt_bool,
    opt_int,
    opt_str,
)
from remoting.reply import Reply, Response
from store import MessageStore
from store.services import StoreServices
from store.status import PutResult

DELAY = MessageConst.DELAY
INNER_NUM = MessageConst.PROPERTY_INNER_NUM
_body_of = itemgetter(0)
_properties_of = itemgetter(1)
_BATCH_IDS = UniqKeyGenerator()
"""The UNIQ_KEY of an inner batch whose request has none."""

V2_FIELD_NAMES: Mapping[str, str] = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
"""SendMessageRequestHeaderV2's single-letter fields -> SendMessageRequestHeader names."""


def born_host_of(channel: Channel) -> bytes:
    """The peer's address packed as a born host (IPv4 only in the store; else 0.0.0.0)."""
    return _born_host(channel.remote_addr)


@functools.lru_cache(maxsize=4096)
def _born_host(addr: str) -> bytes:
    """:func:`born_host_of` by address (parsed once per peer, not once per request)."""
    try:
        host, port = split_addr(addr)
        if ipaddress.ip_address(host).version == 4:
            return pack_host(host, port)
    except (RemotingError, ValueError):
        pass
    return pack_host("0.0.0.0", 0)


class _SendHeader(NamedTuple):
    """The header fields of a send request (V1 names)."""

    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    batch: bool

    @classmethod
    def of(cls, request: RemotingCommand) -> _SendHeader:
        """Parse the fields (BadRequestError for a missing topic or a mistyped field)."""
        return cls(
            header_str(request, "topic"),
            opt_int(request, "queueId", -1),
            opt_int(request, "sysFlag", 0),
            opt_int(request, "bornTimestamp", 0),
            opt_int(request, "flag", 0),
            opt_str(request, "properties", ""),
            opt_int(request, "reconsumeTimes", 0),
            request.code == RequestCode.SEND_BATCH_MESSAGE or opt_bool(request, "batch"),
        )

    @classmethod
    def of_v2(cls, request: RemotingCommand) -> _SendHeader | None:
        """The fields of a V2 header read straight from its short names, when each one
        present has its usual exact type (ints as ints: what minimq's clients send); None for
        anything else, which :meth:`of` parses after renaming (and names a bad field)."""
        f = request.ext_fields
        topic = f.get("b")
        queue_id = f.get("e", -1)
        sys_flag = f.get("f", 0)
        born = f.get("g", 0)
        flag = f.get("h", 0)
        props = f.get("i", "")
        reconsume = f.get("j", 0)
        batch = f.get("m", False)
        if not (
            type(topic) is str
            and topic
            and type(queue_id) is int
            and type(sys_flag) is int
            and type(born) is int
            and type(flag) is int
            and type(props) is str
            and type(reconsume) is int
            and type(batch) is bool
        ):
            return None
        batch = batch or request.code == RequestCode.SEND_BATCH_MESSAGE
        return cls(topic, queue_id, sys_flag, born, flag, props, reconsume, batch)


async def _resolved(answer: Deferred[Response]) -> Response:
    """Wait for a deferred answer from a task (a send that also waited for a registration).
    Not cancellable: the messages are stored, and the store answers within syncFlushTimeout."""
    done = trio.Event()
    box: list[Response] = []

    def got(response: Response) -> None:
        box.append(response)
        done.set()

    answer.on_resolved(got)
    with trio.CancelScope(shield=True):
        await done.wait()
    return box[0]


def _queue_nums(request: RemotingCommand) -> int | None:
    """The producer's ``defaultTopicQueueNums`` (V1 or V2 name), when an int."""
    raw = request.ext_fields.get("d", request.ext_fields.get("defaultTopicQueueNums"))
    if isinstance(raw, str):
        return parse_uint(raw, max_digits=4)
    return raw if type(raw) is int else None


def _header_of(request: RemotingCommand) -> _SendHeader:
    """The send header of a V1 or V2 request (BadRequestError names a missing or bad field)."""
    if request.code not in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        return _SendHeader.of(request)
    header = _SendHeader.of_v2(request)
    if header is not None:
        return header
    renamed = {V2_FIELD_NAMES.get(k, k): v for k, v in request.ext_fields.items()}
    return _SendHeader.of(
        RemotingCommand(
            request.code,
            request.opaque,
            request.flag,
            request.remark,
            renamed,
            request.body,
            request.language,
            request.version,
        )
    )


class SendProcessor:
    """Validates and stores sent messages."""

    def __init__(
        self,
        store: MessageStore,
        services: StoreServices,
        topic_config: TopicConfigManager,
        broker_config: BrokerConfig,
        on_topic_created: Callable[[], Awaitable[None]] | None = None,
        transform: Callable[[MessageRecord], object] | None = None,
        groups: SubscriptionGroupManager | None = None,
        *,
        stats: BrokerStatsManager | None = None,
    ) -> None:
        self.stats = stats
        """Counts each stored send under its header's topic (None: not counted)."""
        self.on_topic_created = on_topic_created
        self.groups = groups
        """The subscription groups, for messages sent to a retry topic (None: stored as sent)."""
        self.transform = transform
        """Applied to every single message before the put (the delay-level redirect of
        :mod:`broker.schedule`); a ValueError from it answers MESSAGE_ILLEGAL."""
        self.store = store
        self.services = services
        self.topic_config = topic_config
        self.broker_config = broker_config
        self._round_robin: dict[str, itertools.count[int]] = {}

    def _pick_queue(self, config: TopicConfig) -> int:
        counter = self._round_robin.setdefault(config.topic_name, itertools.count())
        return next(counter) % config.write_queue_nums

    def round_robin_topics(self) -> int:
        """How many topics have a round-robin position (sends without a queue id)."""
        return len(self._round_robin)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's round-robin position, so topic churn does not grow the
        table; sends to a topic created again under the name start over at queue 0."""
        self._round_robin.pop(topic, None)

    def send(self, request: RemotingCommand, channel: Channel) -> Reply:
        """Handle SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.

        The answer comes at once (the channel sends it inline) unless the send must wait: for
        the flush covering its messages under SYNC_FLUSH it is a deferred answer, resolved
        from the group commit's hand-back (no task); for the name servers to learn of a topic
        it created, an awaitable of the answer.
        """
        header = _header_of(request)
        topic = header.topic
        reason = topic_problem(topic)
        if reason is not None:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, reason)
        if is_not_allowed_send_topic(topic):
            return error(
                request,
                ResponseCode.NO_PERMISSION,
                f"Sending message to topic[{topic}] is forbidden.",
            )
        if header.batch and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return error(
                request,
                ResponseCode.MESSAGE_ILLEGAL,
                f"batch request does not support retry group {topic}",
            )
        known = topic in self.topic_config
        config = self.topic_config.create_on_send(topic, None if known else _queue_nums(request))
        if config is not None and not known and self.on_topic_created is not None:
            # RocketMQ registers with the name servers at once, before answering, so the new
            # topic's route exists when the producer learns its message was stored
            return self._send_after_registering(request, channel, header, config)
        return self._send_to(request, channel, header, config)

    async def _send_after_registering(
        self,
        request: RemotingCommand,
        channel: Channel,
        header: _SendHeader,
        config: TopicConfig,
    ) -> Response:
        assert self.on_topic_created is not None
        await self.on_topic_created()
        answer = self._send_to(request, channel, header, config)
        if isinstance(answer, Deferred):
            return await _resolved(answer)
        return answer if isinstance(answer, RemotingCommand) else await answer

    def _send_to(
        self,
        request: RemotingCommand,
        channel: Channel,
        header: _SendHeader,
        config: TopicConfig | None,
    ) -> RemotingCommand | Awaitable[RemotingCommand] | Deferred[Response]:
        """Validate against the topic's config, store, and answer (see :meth:`send`)."""
        topic, queue_id, sys_flag, born_ts, flag, raw_props, reconsume, batch = header
        if config is None:
            return error(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!",
            )
        if not self.broker_config.broker_permission & PermName.PERM_WRITE:
            return error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.broker_config.broker_ip1}] sending message is forbidden",
            )
        if not config.perm & PermName.PERM_WRITE:
            return error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{topic}] sending message is forbidden",
            )
        if queue_id < 0:
            queue_id = self._pick_queue(config)
        if queue_id >= max(config.write_queue_nums, config.read_queue_nums):
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic {topic} has "
                f"{config.write_queue_nums} write queues",
            )
        try:
            props = check_properties(parse_properties(raw_props))
            if batch:
                entries = decode_batch_body(request.body)
            else:
                entries = [(request.body, None, None)]
        except IllegalMessageError as exc:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        max_size = self.store.config.max_message_size
        if max(map(len, map(_body_of, entries))) > max_size:  # one C-level pass
            size = next(n for n in map(len, map(_body_of, entries)) if n > max_size)
            return error(
                request,
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {size} is over the limit {max_size}",
            )
        if batch and config.attributes and queue_type_of(config.attributes) is CQType.BATCH_CQ:
            return self._send_inner_batch(request, channel, header, queue_id, props, entries)

        dead_letter: tuple[str, bool] | None = None
        if self.groups is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # not a batch
            target = self._dead_letter_target(request, topic, reconsume, self.groups)
            if isinstance(target, RemotingCommand):
                return target
            dead_letter = target
        born_host = born_host_of(channel)
        # positional up to born_host (keywords cost twice as much per message); store-side
        # fields keep their defaults
        msgs = [
            MessageRecord(
                topic,
                body,
                queue_id,
                flag if e_flag is None else e_flag,
                dict(props) if e_props is None else e_props,
                sys_flag,
                born_ts,
                born_host,
            )
            for body, e_props, e_flag in entries
        ]
        if reconsume:
            for m in msgs:
                m.reconsume_times = reconsume
        if dead_letter is not None:
            _redirect(msgs, dead_letter[0])
        refused = self._apply_transform(request, msgs, batch)
        if refused is not None:
            return refused
        if dead_letter is not None and dead_letter[1] and self.on_topic_created is not None:
            return self._store_after_registering(request, topic, msgs, queue_id)
        put = self.services.put_messages_deferred(msgs)
        if isinstance(put, PutResult):
            return self._answer(request, topic, msgs, queue_id, put)
        return self._answer_when_flushed(request, channel, topic, msgs, queue_id, put)

    def _send_inner_batch(
        self,
        request: RemotingCommand,
        channel: Channel,
        header: _SendHeader,
        queue_id: int,
        props: dict[str, str],
        entries: list[BatchEntry],
    ) -> RemotingCommand | Deferred[Response]:
        """Store a validated batch to a BatchCQ topic as one inner-batch record (module
        docstring) and answer as for a batch."""
        refused = _inner_batch_refusal(request, header.sys_flag, props, entries)
        if refused is not None:
            return refused
        max_size = self.store.config.max_message_size
        if len(request.body) > max_size:  # one record holds the whole batch
            return error(
                request,
                ResponseCode.MESSAGE_ILLEGAL,
                f"the batch body size {len(request.body)} is over the limit {max_size} "
                f"(a BatchCQ topic stores a batch as one message)",
            )
        props = dict(props)
        props[INNER_NUM] = str(len(entries))
        if MessageConst.UNIQ_KEY not in props:
            props[MessageConst.UNIQ_KEY] = _BATCH_IDS.next()
        try:
            check_properties(props)
        except IllegalMessageError as exc:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        record = MessageRecord(
            header.topic,
            request.body,
            queue_id,
            header.flag,
            props,
            header.sys_flag | INNER_BATCH_BITS,
            header.born_timestamp,
            born_host_of(channel),
        )
        record.reconsume_times = header.reconsume_times
        msgs = [record]
        put = self.services.put_messages_deferred(msgs)
        inner = len(entries)
        if isinstance(put, PutResult):
            return self._answer(request, header.topic, msgs, queue_id, put, inner_num=inner)
        return self._answer_when_flushed(
            request, channel, header.topic, msgs, queue_id, put, inner_num=inner
        )

    def _dead_letter_target(
        self,
        request: RemotingCommand,
        topic: str,
        reconsume_times: int,
        groups: SubscriptionGroupManager,
    ) -> RemotingCommand | tuple[str, bool] | None:
        """A message sent to ``%RETRY%<group>`` (RocketMQ's ``handleRetryAndDLQ``): an error
        for an unknown group; ``(dead-letter topic, created now)`` when its ``reconsumeTimes``
        is over the maximum (the header's ``maxReconsumeTimes`` when given and >= 0, else the
        group's ``retryMaxTimes``; RocketMQ 5's ``>``, so a consumer's fallback reaches the DLQ
        exactly when CONSUMER_SEND_MSG_BACK would); None to store it as sent."""
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        config = groups.find(group)
        if config is None:
            return error(
                request,
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {group}",
            )
        max_times = opt_int(request, "l" if "l" in request.ext_fields else "maxReconsumeTimes", -1)
        if max_times < 0:
            max_times = config.retry_max_times
        if reconsume_times <= max_times:
            return None
        dlq = dlq_topic(group)
        _, created = create_topic_in_send_back(self.topic_config, dlq, DLQ_NUMS_PER_GROUP, DLQ_PERM)
        return dlq, created

    async def _store_after_registering(
        self, request: RemotingCommand, topic: str, msgs: list[MessageRecord], queue_id: int
    ) -> RemotingCommand:
        """Store ``msgs`` once the name servers know the topic just created for them."""
        assert self.on_topic_created is not None
        await self.on_topic_created()
        put = self.services.put_messages_now(msgs)
        result = put if isinstance(put, PutResult) else await put
        return self._answer(request, topic, msgs, queue_id, result)

    def _answer_when_flushed(
        self,
        request: RemotingCommand,
        channel: Channel,
        topic: str,
        msgs: list[MessageRecord],
        queue_id: int,
        put: Deferred[PutResult],
        *,
        inner_num: int = 0,
    ) -> Deferred[Response]:
        """The answer to a put waiting for its flush, once it is flushed (or timed out)."""

        def answer(result: PutResult) -> Response:
            return self._answer(request, topic, msgs, queue_id, result, inner_num=inner_num)

        def failed(result: PutResult, exc: Exception) -> Response:
            return failure_response(request, channel, exc)

        return put.map(answer, failed)

    def _answer(
        self,
        request: RemotingCommand,
        topic: str,
        msgs: list[MessageRecord],
        queue_id: int,
        result: PutResult,
        *,
        inner_num: int = 0,
    ) -> RemotingCommand:
        """The response to a put: its status, and the stored messages' ids and offsets (counted
        under ``topic``, the header's: where a delayed, half or dead-letter message went is
        not where its sender sent it). ``inner_num`` > 0: the put was one inner batch of
        that many messages."""
        code, remark = put_response_code(result.status)
        if not result.phys_offsets:  # not stored: no id to give
            return error(request, code, result.remark or remark)
        if self.stats is not None:
            count = inner_num or len(result.phys_offsets)
            self.stats.inc_topic_put(topic, count, len(request.body))
        packed_host = pack_host(*self.store.config.store_host)  # cached
        fields: dict[str, ExtValue] = {
            "msgId": joined_offset_msg_ids(packed_host, result.phys_offsets),
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offsets[0]),
        }
        if msgs[0].topic == TRANS_HALF_TOPIC and msgs[0].uniq_key is not None:
            fields["transactionId"] = msgs[0].uniq_key  # a half message (broker.transaction)
        if inner_num:
            fields["batchUniqId"] = msgs[0].properties[MessageConst.UNIQ_KEY]
        return RemotingCommand.response_to(
            request, code, remark=result.remark or remark, ext_fields=fields
        )

    def _apply_transform(
        self, request: RemotingCommand, msgs: list[MessageRecord], batch: bool
    ) -> RemotingCommand | None:
        """Run :attr:`transform` on a single message; refuse a delayed batch."""
        if batch:
            prepared = MessageSysFlag.TRANSACTION_PREPARED_TYPE
            if any(MessageSysFlag.transaction_value(m.sys_flag) == prepared for m in msgs):
                return error(
                    request,
                    ResponseCode.MESSAGE_ILLEGAL,
                    "batch message does not support transaction",
                )
            try:  # as RocketMQ: only a level above 0 delays, so only that is refused
                delayed = any(delay_level_of(m) > 0 for m in msgs if DELAY in m.properties)
            except ValueError as exc:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, str(exc))
            if delayed:
                return error(
                    request,
                    ResponseCode.MESSAGE_ILLEGAL,
                    "TimeDelayLevel is not supported for batching",
                )
            return None
        if self.transform is not None:
            try:
                for m in msgs:
                    self.transform(m)
            except ValueError as exc:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        return None

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        h = guarded(self.send)
        return {
            int(RequestCode.SEND_MESSAGE): h,
            int(RequestCode.SEND_MESSAGE_V2): h,
            int(RequestCode.SEND_BATCH_MESSAGE): h,
        }


def _inner_batch_refusal(
    request: RemotingCommand,
    sys_flag: int,
    props: Mapping[str, str],
    entries: Sequence[BatchEntry],
) -> RemotingCommand | None:
    """The refusals of :meth:`SendProcessor._apply_transform` for a batch (a prepared one, or
    one with a DELAY level above 0 or not an integer), made on the entries' property maps
    without a record per message: C-level passes over every property name, and a walk only
    when a DELAY is there."""
    if MessageSysFlag.transaction_value(sys_flag) == MessageSysFlag.TRANSACTION_PREPARED_TYPE:
        return error(
            request, ResponseCode.MESSAGE_ILLEGAL, "batch message does not support transaction"
        )
    own = list(map(_properties_of, entries))
    names = set(chain.from_iterable(filter(None, own)))
    if DELAY not in names and (DELAY not in props or None not in own):
        return None
    effective = [props if p is None else p for p in own]
    try:  # as RocketMQ: only a level above 0 delays, so only that is refused
        delayed = any(delay_level_in(p) > 0 for p in effective if DELAY in p)
    except ValueError as exc:
        return error(request, ResponseCode.MESSAGE_ILLEGAL, str(exc))
    if delayed:
        return error(
            request, ResponseCode.MESSAGE_ILLEGAL, "TimeDelayLevel is not supported for batching"
        )
    return None


def _redirect(msgs: list[MessageRecord], dlq: str) -> None:
    """Send retry-topic messages that used up their retries to the dead-letter topic ``dlq``
    (its one queue, at once: no DELAY, as CONSUMER_SEND_MSG_BACK's DLQ messages)."""
    for m in msgs:
        m.topic = dlq
        m.queue_id = 0
        m.properties.pop(DELAY, None)


def make_send_handlers(
    store: MessageStore,
    services: StoreServices,
    topic_config: TopicConfigManager,
    broker_config: BrokerConfig,
    on_topic_created: Callable[[], Awaitable[None]] | None = None,
    transform: Callable[[MessageRecord], object] | None = None,
    groups: SubscriptionGroupManager | None = None,
) -> dict[int, Handler]:
    """The send handler table over the real store and topic manager.

    ``on_topic_created`` is awaited after a send auto-created its topic, before the answer;
    ``transform`` is applied to each non-batch message before the put (delay levels);
    ``groups`` sends a retry-topic message that used up its retries to the dead-letter queue.
    """
    processor = SendProcessor(
        store, services, topic_config, broker_config, on_topic_created, transform, groups
    )
    return processor.handlers()


__all__ = [
    "SendProcessor",
    "decode_batch_body",
    "encode_batch_body",
    "make_send_handlers",
    "parse_properties",
]
