"""What a request needs: its resources with their permissions, and whether only an admin may
send it (RocketMQ's ``PlainAccessValidator#parse`` and ``Permission.ADMIN_CODE``).

Rules:

- :func:`needed_perms` maps a request to ``{resource: permission bits}``. A group is checked
  as its retry topic ``%RETRY%<group>``. A header field the table needs but the request lacks
  adds nothing (RocketMQ's ``addResourceAndPerm(null)``): the handler then refuses the request
  for the missing field. A code not in the table needs no resource permission, only a valid
  signature (and admin when in :data:`ADMIN_CODES`).
- RocketMQ 4.9's rows: SEND_MESSAGE / SEND_MESSAGE_V2 (and SEND_BATCH_MESSAGE, which carries
  the V2 header here) need PUB on the topic, or SUB on it when it is a retry topic (a consumer
  sending back); CONSUMER_SEND_MSG_BACK, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP need SUB
  on the group; PULL_MESSAGE and UPDATE_CONSUMER_OFFSET SUB on the topic and the group;
  QUERY_MESSAGE SUB on the topic; HEART_BEAT SUB on each consumer group of its body and on each
  topic they subscribe. minimq adds QUERY_CONSUMER_OFFSET and LITE_PULL_MESSAGE (as
  UPDATE_CONSUMER_OFFSET and PULL_MESSAGE) so that a group's offsets are read as they are written.
- RocketMQ 5's rows (``DefaultAuthorizationContextBuilder`` and the ``@RocketMQAction`` of the
  request headers), in ACL 1.0's bits: END_TRANSACTION needs PUB on its header ``topic``;
  GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME, SEARCH_OFFSET_BY_TIMESTAMP and
  VIEW_MESSAGE_BY_ID need ``GET`` on the header ``topic``, which plain_acl.yml cannot grant:
  minimq asks SUB (only readers send them). LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (RocketMQ 5: SUB,
  with no resource field, so nothing is checked) need SUB on the body's ``consumerGroup`` and
  on each topic of its ``mqSet``.
- What only the stored message tells (its topic) is a :data:`NeedsLookup` the server gives
  per code, asked after the signature is checked: :func:`half_message_needs` (END_TRANSACTION:
  PUB on the half message's real topic, whatever the header says) and
  :func:`viewed_message_needs` (VIEW_MESSAGE_BY_ID: SUB on the topic of the message read). A
  lookup that cannot tell (bytes at the offset that are not a stored message's start) makes
  :func:`needed_perms` None: the request is refused, never let through unchecked.
- :data:`ADMIN_CODES` is RocketMQ's five (create/update and delete topic, update broker config,
  create/update and delete subscription group) plus every other request that writes config or
  offsets here: offset resets and clones, the write-permission switches, the name server's
  config, KV and topic writes, and broker (un)registration (CVE-2023-33246 / CVE-2023-37582),
  and the five plain-ACL admin requests (50-54: RocketMQ 4.x lets any valid account change or
  read the accounts with them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, TypeAlias

from common.message import MessageConst
from common.record import MessageRecord
from common.topic import RETRY_GROUP_TOPIC_PREFIX, SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from remoting.acl.permission import PUB, SUB
from remoting.client_bodies import decode_heartbeat, decode_lock_batch
from remoting.codes import RequestCode
from remoting.command import ExtValue, RemotingCommand

Needs: TypeAlias = dict[str, int]
NeedsLookup: TypeAlias = Callable[[RemotingCommand], Needs | None]
"""More needs of a request, found by the server in what it stores (asked once the request's
signature was checked); None when the server cannot tell what the request touches (the
request is then refused)."""

ADMIN_CODES: Final = frozenset(
    int(code)
    for code in (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        RequestCode.RESET_CONSUMER_OFFSET_IN_BROKER,
        RequestCode.RESET_CONSUMER_OFFSET_IN_CONSUMER,
        RequestCode.CLONE_GROUP_OFFSET,
        RequestCode.CONSUME_MESSAGE_DIRECTLY,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
    )
)
"""Request codes only an ``admin: true`` account may send (see the module rules)."""


def retry_resource(group: str) -> str:
    """The resource a group is checked as: ``%RETRY%<group>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def needed_perms(request: RemotingCommand, lookup: NeedsLookup | None = None) -> Needs | None:
    """The resources ``request`` touches and the permission each needs (module rules), with
    those ``lookup`` finds; None when ``lookup`` cannot tell."""
    needs: Needs = {}
    rule = _RULES.get(request.code)
    if rule is not None:
        rule(request, needs)
    if lookup is not None:
        found = lookup(request)
        if found is None:
            return None
        for resource, perm in found.items():
            _add(needs, resource, perm)
    return needs


def stored_topic(record: MessageRecord) -> str:
    """The topic a stored message belongs to: its ``REAL_TOPIC`` while it waits as a half or
    delayed message (``RMQ_SYS_TRANS_HALF_TOPIC``, ``SCHEDULE_TOPIC_XXXX``), else its topic."""
    if record.topic in (TRANS_HALF_TOPIC, SCHEDULE_TOPIC):
        return record.properties.get(MessageConst.REAL_TOPIC) or record.topic
    return record.topic


def half_message_needs(record: MessageRecord | None) -> Needs:
    """END_TRANSACTION on ``record``: PUB on the real topic of a half message; nothing for
    anything else (the handler refuses it as no prepared message)."""
    if record is None or record.topic != TRANS_HALF_TOPIC:
        return {}
    topic = record.properties.get(MessageConst.REAL_TOPIC)
    return {topic: PUB} if topic else {}


def viewed_message_needs(record: MessageRecord | None) -> Needs:
    """VIEW_MESSAGE_BY_ID of ``record``: SUB on the topic it belongs to (:func:`stored_topic`);
    nothing when there is no record (the handler answers that)."""
    return {} if record is None else {stored_topic(record): SUB}


def _text(fields: Mapping[str, ExtValue], *names: str) -> str | None:
    """The first of ``names`` present as non-empty text."""
    for name in names:
        value = fields.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _add(needs: Needs, resource: str | None, perm: int) -> None:
    if resource is not None:
        needs[resource] = needs.get(resource, 0) | perm


def _add_group(needs: Needs, group: str | None) -> None:
    if group is not None:
        _add(needs, retry_resource(group), SUB)


def _send(request: RemotingCommand, needs: Needs) -> None:
    topic = _text(request.ext_fields, "topic", "b")
    if topic is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        _add(needs, topic, SUB)
    else:
        _add(needs, topic, PUB)


def _send_back(request: RemotingCommand, needs: Needs) -> None:
    _add_group(needs, _text(request.ext_fields, "group"))


def _group_only(request: RemotingCommand, needs: Needs) -> None:
    _add_group(needs, _text(request.ext_fields, "consumerGroup"))


def _topic_and_group(request: RemotingCommand, needs: Needs) -> None:
    _add(needs, _text(request.ext_fields, "topic"), SUB)
    _add_group(needs, _text(request.ext_fields, "consumerGroup"))


def _topic_sub(request: RemotingCommand, needs: Needs) -> None:
    _add(needs, _text(request.ext_fields, "topic"), SUB)


def _topic_pub(request: RemotingCommand, needs: Needs) -> None:
    _add(needs, _text(request.ext_fields, "topic"), PUB)


def _lock_batch(request: RemotingCommand, needs: Needs) -> None:
    """SUB on the body's group and on each topic of its queues; a body that does not parse
    adds nothing (the handler answers it)."""
    try:
        body = decode_lock_batch(request.body)
    except ValueError:
        return
    _add_group(needs, body.consumer_group or None)
    for mq in body.mqs:
        _add(needs, mq.topic or None, SUB)


def _heartbeat(request: RemotingCommand, needs: Needs) -> None:
    """SUB on each consumer group and each topic it subscribes; a body that does not parse
    adds nothing (the handler answers it)."""
    try:
        data = decode_heartbeat(request.body)
    except ValueError:
        return
    for consumer in data.consumers:
        _add_group(needs, consumer.group_name or None)
        for sub in consumer.subscriptions:
            _add(needs, sub.topic or None, SUB)


_RULES: Final[dict[int, Callable[[RemotingCommand, Needs], None]]] = {
    int(RequestCode.SEND_MESSAGE): _send,
    int(RequestCode.SEND_MESSAGE_V2): _send,
    int(RequestCode.SEND_BATCH_MESSAGE): _send,
    int(RequestCode.CONSUMER_SEND_MSG_BACK): _send_back,
    int(RequestCode.PULL_MESSAGE): _topic_and_group,
    int(RequestCode.LITE_PULL_MESSAGE): _topic_and_group,
    int(RequestCode.QUERY_MESSAGE): _topic_sub,
    int(RequestCode.HEART_BEAT): _heartbeat,
    int(RequestCode.UNREGISTER_CLIENT): _group_only,
    int(RequestCode.GET_CONSUMER_LIST_BY_GROUP): _group_only,
    int(RequestCode.UPDATE_CONSUMER_OFFSET): _topic_and_group,
    int(RequestCode.QUERY_CONSUMER_OFFSET): _topic_and_group,
    int(RequestCode.LOCK_BATCH_MQ): _lock_batch,
    int(RequestCode.UNLOCK_BATCH_MQ): _lock_batch,
    int(RequestCode.END_TRANSACTION): _topic_pub,
    int(RequestCode.VIEW_MESSAGE_BY_ID): _topic_sub,
    int(RequestCode.GET_MAX_OFFSET): _topic_sub,
    int(RequestCode.GET_MIN_OFFSET): _topic_sub,
    int(RequestCode.GET_EARLIEST_MSG_STORETIME): _topic_sub,
    int(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP): _topic_sub,
}
