"""Requests a client sends and how it reads the answers (RocketMQ's ``MQClientAPIImpl``), pure.

Every ``*_request`` builds a :class:`RemotingCommand`; every ``parse_*`` turns a response into a
value or raises :class:`~client.errors.MQBrokerError` carrying the code and remark. Nothing here
does I/O, so the producer and consumer shells stay thin and this module is tested on its own.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from client.errors import MQBrokerError, TopicRouteError
from client.message import (
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
    received_from_raw_fields,
)
from common.errors import caused_by
from common.inner_batch import InnerBatchError, any_inner_batch, unwrap_all
from common.message import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUSPEND
from common.record import (
    RawRecordFields,
    RecordError,
    decode_raw_fields,
    decode_records,
    raw_fields_of,
)
from common.route import PermName, TopicRouteData
from common.subscription import SubscriptionData
from remoting.client_bodies import (
    LockBatchBody,
    LockedQueue,
    decode_consumer_list,
    decode_lock_batch_response,
    encode_lock_batch,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.headers import BadRequestError
from remoting.route_bodies import decode_route_body

SEND_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
"""Response codes that mean "stored" (``processSendResponse``)."""

RETRIABLE_SEND_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    }
)
"""Broker answers after which a send is retried on another broker (``retryResponseCodes``)."""


class PullStatus(enum.Enum):
    """Outcome of a pull (RocketMQ's ``PullStatus``)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


PULL_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True, slots=True)
class PullResult:
    """A pull's answer; ``messages`` are only those whose exact tag matches the subscription."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[ReceivedMessage]


def _fail(resp: RemotingCommand, addr: str) -> MQBrokerError:
    return MQBrokerError(resp.code, resp.remark or f"request failed with code {resp.code}", addr)


def _int_field(resp: RemotingCommand, name: str, addr: str) -> int:
    raw = resp.ext_fields.get(name)
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise caused_by(
            MQBrokerError(
                ResponseCode.SYSTEM_ERROR, f"response lacks a valid {name!r}: {raw!r}", addr
            ),
            None,
        )


# ---------------------------------------------------------------------- name server


def route_request(topic: str) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC."""
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, opaque=0)


def parse_route(resp: RemotingCommand, topic: str, addr: str) -> TopicRouteData:
    """The route, or TopicRouteError when the name server knows no such topic."""
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        raise TopicRouteError(topic, resp.remark or "")
    if resp.code != ResponseCode.SUCCESS:
        raise _fail(resp, addr)
    try:
        return decode_route_body(resp.body)
    except BadRequestError as exc:
        raise caused_by(
            MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad route body: {exc}", addr), None
        )


# ---------------------------------------------------------------------- send


def send_request(
    *,
    group: str,
    topic: str,
    queue_id: int,
    body: bytes,
    properties: str,
    sys_flag: int,
    flag: int,
    born_timestamp: int,
    batch: bool = False,
    default_topic_queue_nums: int = 8,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE with ``batch``), RocketMQ's short header names.

    ``reconsume_times`` and ``max_reconsume_times`` are given for a message to a retry topic
    (the broker sends it to the dead-letter queue when the first is over the second)."""
    header: dict[str, ExtValue] = {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": default_topic_queue_nums,
        "e": queue_id,
        "f": sys_flag,
        "g": born_timestamp,
        "h": flag,
        "i": properties,
        "j": reconsume_times,
        "k": False,
    }
    if max_reconsume_times is not None:
        header["l"] = max_reconsume_times
    if batch:
        header["m"] = True
        return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header, body, opaque=0)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body, opaque=0)


def parse_send(resp: RemotingCommand, mq: MessageQueue, msg_id: str, addr: str) -> SendResult:
    """A SendResult for a stored message; MQBrokerError for any other answer."""
    status = SEND_STATUS_BY_CODE.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise _fail(resp, addr)
    fields = resp.ext_fields
    return SendResult(
        status=status,
        msg_id=msg_id,
        offset_msg_id=str(fields.get("msgId", "")),
        queue=MessageQueue(mq.topic, mq.broker_name, _int_field(resp, "queueId", addr)),
        queue_offset=_int_field(resp, "queueOffset", addr),
    )


# ---------------------------------------------------------------------- pull


def pull_request(
    *,
    group: str,
    mq: MessageQueue,
    offset: int,
    max_msgs: int,
    subscription: SubscriptionData,
    suspend_timeout_ms: int,
    commit_offset: int = -1,
) -> RemotingCommand:
    """PULL_MESSAGE; ``suspend_timeout_ms`` > 0 asks the broker to hold an empty pull (with
    RocketMQ's SUSPEND ``sysFlag`` bit, without which brokers answer at once)."""
    sys_flag = PULL_FLAG_COMMIT_OFFSET if commit_offset >= 0 else 0
    if suspend_timeout_ms > 0:
        sys_flag |= PULL_FLAG_SUSPEND
    header: dict[str, ExtValue] = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": mq.queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_msgs,
        "sysFlag": sys_flag,
        "commitOffset": commit_offset,
        "suspendTimeoutMillis": suspend_timeout_ms,
        "subscription": subscription.sub_string,
        "subVersion": subscription.sub_version,
        "expressionType": subscription.expression_type,
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header, opaque=0)


def parse_pull(
    resp: RemotingCommand,
    mq: MessageQueue,
    subscription: SubscriptionData,
    addr: str,
    offset: int = 0,
) -> PullResult:
    """Decode the answer to a pull at ``offset``; drop messages whose exact tag the
    subscription does not name (an SQL92 subscription is not re-checked: RocketMQ's
    ``PullAPIWrapper`` re-checks tags only).

    Inner batches (records of a BatchCQ topic, :mod:`common.inner_batch`) are unwrapped into
    their messages, those below ``offset`` dropped (the broker answers from the batch that
    holds ``offset``), before the tag check: the broker passes batches through its tag-code
    filter whole."""
    status = PULL_STATUS_BY_CODE.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise _fail(resp, addr)
    messages: list[ReceivedMessage] = []
    if status is PullStatus.FOUND and resp.body:
        messages = _pulled_messages(resp.body, mq.broker_name, subscription, addr, offset)
    return PullResult(
        status=status,
        next_begin_offset=_int_field(resp, "nextBeginOffset", addr),
        min_offset=_int_field(resp, "minOffset", addr),
        max_offset=_int_field(resp, "maxOffset", addr),
        messages=messages,
    )


def _pulled_messages(
    body: bytes, broker_name: str, subscription: SubscriptionData, addr: str, offset: int
) -> list[ReceivedMessage]:
    """The messages of a pull body (at ``offset``) whose exact tag the subscription names."""
    fields = decode_raw_fields(body) if isinstance(body, bytes) else None
    if fields is None:  # not the common layout: the checked decoder, which names what is wrong
        try:
            fields = [raw_fields_of(rec) for rec in decode_records(body)]
        except RecordError as exc:
            raise caused_by(
                MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad pull body: {exc}", addr), None
            )
    if any_inner_batch(fields):  # one C-level pass per pull, not a check per message
        fields = _unwrapped(fields, offset, addr)
    msgs = received_from_raw_fields(fields, broker_name)
    if not subscription.tags_set:  # "*", or SQL92: the broker alone filters
        return msgs
    return [m for m in msgs if subscription.matches_tag(m.tags)]


def _unwrapped(fields: list[RawRecordFields], offset: int, addr: str) -> list[RawRecordFields]:
    """:func:`common.inner_batch.unwrap_all`; a batch that does not decode is a bad answer."""
    try:
        return unwrap_all(fields, offset)
    except InnerBatchError as exc:
        raise caused_by(
            MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad pull body: {exc}", addr), None
        )


# ---------------------------------------------------------------------- offsets


def _queue_header(group: str | None, mq: MessageQueue) -> dict[str, ExtValue]:
    header: dict[str, ExtValue] = {"topic": mq.topic, "queueId": mq.queue_id}
    if group is not None:
        header["consumerGroup"] = group
    return header


def query_offset_request(group: str, mq: MessageQueue) -> RemotingCommand:
    """QUERY_CONSUMER_OFFSET (not found stays not found: ``setZeroIfNotFound`` false)."""
    header = _queue_header(group, mq)
    header["setZeroIfNotFound"] = False
    return RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header, opaque=0)


def parse_query_offset(resp: RemotingCommand, addr: str) -> int | None:
    """The committed offset, or None when the group has none for the queue."""
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    if resp.code != ResponseCode.SUCCESS:
        raise _fail(resp, addr)
    return _int_field(resp, "offset", addr)


def update_offset_request(group: str, mq: MessageQueue, offset: int) -> RemotingCommand:
    """UPDATE_CONSUMER_OFFSET."""
    header = _queue_header(group, mq)
    header["commitOffset"] = offset
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header, opaque=0)


def offset_request(code: RequestCode, mq: MessageQueue, timestamp: int = 0) -> RemotingCommand:
    """GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP."""
    header = _queue_header(None, mq)
    if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
        header["timestamp"] = timestamp
    return RemotingCommand.request(code, header, opaque=0)


def parse_offset(resp: RemotingCommand, addr: str) -> int:
    """The ``offset`` of a successful answer."""
    if resp.code != ResponseCode.SUCCESS:
        raise _fail(resp, addr)
    return _int_field(resp, "offset", addr)


def check_success(resp: RemotingCommand, addr: str) -> None:
    """Raise MQBrokerError unless the answer is SUCCESS."""
    if resp.code != ResponseCode.SUCCESS:
        raise _fail(resp, addr)


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The readable queues of ``topic`` (``topicRouteData2TopicSubscribeInfo``), sorted."""
    out = [
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if PermName.is_readable(qd.perm)
        for i in range(qd.read_queue_nums)
    ]
    return sorted(out)


__all__: Sequence[str] = (
    "PullResult",
    "PullStatus",
    "parse_pull",
    "parse_route",
    "parse_send",
    "pull_request",
    "route_request",
    "send_request",
)


# ---------------------------------------------------------------------- consumer groups


def consumer_list_request(group: str) -> RemotingCommand:
    """GET_CONSUMER_LIST_BY_GROUP."""
    return RemotingCommand.request(
        RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}, opaque=0
    )


def parse_consumer_list(resp: RemotingCommand, addr: str) -> list[str]:
    """The group's client ids (an empty list when the broker knows no member)."""
    if resp.code != ResponseCode.SUCCESS:
        raise _fail(resp, addr)
    try:
        return decode_consumer_list(resp.body)
    except BadRequestError as exc:
        raise caused_by(
            MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad consumer list: {exc}", addr), None
        )


def send_back_request(
    group: str, msg: ReceivedMessage, delay_level: int, max_reconsume_times: int
) -> RemotingCommand:
    """CONSUMER_SEND_MSG_BACK: store ``msg`` (by its commitlog offset) in the group's retry
    topic at ``delay_level`` (0: the broker picks ``3 + reconsume times``; -1: straight to the
    dead-letter queue). ``reconsumeTimes`` (a minimq field) carries the client's count, which
    an orderly consumer keeps without the broker seeing it."""
    header: dict[str, ExtValue] = {
        "offset": msg.commitlog_offset,
        "group": group,
        "delayLevel": delay_level,
        "originMsgId": msg.msg_id,
        "originTopic": msg.topic,
        "unitMode": False,
        "maxReconsumeTimes": max_reconsume_times,
        "reconsumeTimes": msg.reconsume_times,
    }
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header, opaque=0)


def lock_batch_request(
    code: RequestCode, group: str, client_id: str, mqs: Sequence[MessageQueue]
) -> RemotingCommand:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for ``mqs`` (all on one broker)."""
    body = encode_lock_batch(
        LockBatchBody(
            consumer_group=group,
            client_id=client_id,
            mqs=tuple(LockedQueue(m.topic, m.broker_name, m.queue_id) for m in mqs),
        )
    )
    return RemotingCommand.request(code, {}, body, opaque=0)


def parse_lock_batch(resp: RemotingCommand, addr: str) -> set[MessageQueue]:
    """The queues a LOCK_BATCH_MQ answer says are locked to us."""
    if resp.code != ResponseCode.SUCCESS:
        raise _fail(resp, addr)
    try:
        locked = decode_lock_batch_response(resp.body)
    except BadRequestError as exc:
        raise caused_by(
            MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad lock answer: {exc}", addr), None
        )
    return {MessageQueue(q.topic, q.broker_name, q.queue_id) for q in locked}
