"""The per-resource ACL checks of the queue-lock, transaction, message-view and queue-offset
requests on a real in-process broker (real sockets on 127.0.0.1), each with an account it
lets through and one it refuses with the reason; and the group checks of the offset and
consumer-list requests."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.controller import BrokerController
from common.message_id import decode_offset_msg_id
from common.record import MessageRecord, decode_record, encode_record
from common.topic import TRANS_HALF_TOPIC
from remoting.acl.signing import SessionCredentials
from remoting.client_bodies import (
    LockBatchBody,
    LockedQueue,
    decode_lock_batch_response,
    encode_lock_batch,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from tests.broker.inprocess import req, running_broker, send_req, wait_until
from tests.broker.test_acl import ADMIN, acl_overrides, create_topic, signed_client, write_accounts
from tests.broker.txn_helpers import COMMIT, end_fields, end_tx, queue_records, send_half

TOPIC, DECOY, GROUP = "Orders", "Decoy", "cg"
READER = SessionCredentials("reader01", "s3cret-key-r")  # SUB on Orders and group cg
WRITER = SessionCredentials("writer01", "s3cret-key-w")  # PUB on Orders, PUB|SUB on Decoy, cg
ACCOUNTS = """
accounts:
  - accessKey: reader01
    secretKey: s3cret-key-r
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=SUB]
    groupPerms: [cg=SUB]
  - accessKey: writer01
    secretKey: s3cret-key-w
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=PUB, Decoy=PUB|SUB]
    groupPerms: [cg=SUB]
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: true
"""


@asynccontextmanager
async def broker(tmp_path: Path) -> AsyncIterator[tuple[BrokerController, str]]:
    """A broker with ACL on over :data:`ACCOUNTS`, with topics Orders and Decoy."""
    acl_file = write_accounts(tmp_path / "plain_acl.yml", ACCOUNTS)
    overrides = {**acl_overrides(acl_file), "transactionCheckInterval": "3600000"}
    async with running_broker(tmp_path, overrides=overrides) as (controller, addr):
        await create_topic(addr, TOPIC)
        await create_topic(addr, DECOY)
        yield controller, addr


def command(code: int, fields: dict[str, ExtValue]) -> RemotingCommand:
    """A request of ``code`` with header ``fields`` (:func:`req` of a dict)."""
    return dataclasses.replace(req(code), ext_fields=dict(fields))


async def call(creds: SessionCredentials, addr: str, request: RemotingCommand) -> RemotingCommand:
    """``request`` signed by ``creds``, answered."""
    async with signed_client(creds) as client:
        return await client.invoke(addr, request)


def assert_refused(resp: RemotingCommand, creds: SessionCredentials, reason: str) -> None:
    assert resp.code == ResponseCode.NO_PERMISSION, (resp.code, resp.remark)
    assert f"accessKey {creds.access_key!r}" in resp.remark
    assert reason in resp.remark, resp.remark


async def send_one(addr: str, body: bytes = b"hello") -> int:
    """A message sent to Orders by the writer; its commitlog offset."""
    resp = await call(WRITER, addr, send_req(TOPIC, body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return decode_offset_msg_id(str(resp.ext_fields["msgId"]))[2]


# ---------------------------------------------------------------------- queue locks


def lock_req(code: int, group: str, *topics: str) -> RemotingCommand:
    mqs = tuple(LockedQueue(t, "broker-a", 0) for t in topics)
    return req(code, encode_lock_batch(LockBatchBody(group, "client-1", mqs)))


@pytest.mark.parametrize("code", [RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])
async def test_lock_batch_needs_sub_on_the_group_and_each_topic(tmp_path: Path, code: int) -> None:
    async with broker(tmp_path) as (controller, addr):
        ok = await call(READER, addr, lock_req(code, GROUP, TOPIC))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        if code == RequestCode.LOCK_BATCH_MQ:
            assert decode_lock_batch_response(ok.body) == (LockedQueue(TOPIC, "broker-a", 0),)
        # the writer holds only PUB on Orders: no SUB on a topic of the body
        topic_refused = await call(WRITER, addr, lock_req(code, GROUP, DECOY, TOPIC))
        assert_refused(topic_refused, WRITER, "no SUB permission on topic:Orders")
        # the reader has no permission on group "other" (default DENY)
        group_refused = await call(READER, addr, lock_req(code, "other", TOPIC))
        assert_refused(group_refused, READER, "no SUB permission on group:other")
        assert controller.locks.holder("other", LockedQueue(TOPIC, "broker-a", 0)) is None


# ---------------------------------------------------------------------- transactions


def end_req(fields: dict[str, ExtValue]) -> RemotingCommand:
    return command(RequestCode.END_TRANSACTION, fields)


async def test_end_transaction_needs_pub_on_the_half_message_topic(tmp_path: Path) -> None:
    async with broker(tmp_path) as (controller, addr), signed_client(WRITER) as writer:
        sent = await send_half(writer, addr, b"pay 10", topic=TOPIC)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        await wait_until(lambda: len(queue_records(controller, TRANS_HALF_TOPIC)) == 1, "half")
        fields = end_fields(sent, COMMIT)
        # the header names the topic (RocketMQ 5): the reader has no PUB on it
        refused = await call(READER, addr, end_req({**fields, "topic": TOPIC}))
        assert_refused(refused, READER, "no PUB permission on topic:Orders")
        # no topic in the header (a RocketMQ 4.9 client): the half message's is checked
        no_topic = await call(READER, addr, end_req(fields))
        assert_refused(no_topic, READER, "no PUB permission on topic:Orders")
        # a header naming a topic the caller may publish to does not hide the real one
        lying = await call(READER, addr, end_req({**fields, "topic": DECOY}))
        assert_refused(lying, READER, "topic:")
        # the header's topic is checked too (RocketMQ 5), even when the half's is allowed
        wrong = await call(WRITER, addr, end_req({**fields, "topic": "Secret"}))
        assert_refused(wrong, WRITER, "no PUB permission on topic:Secret")
        assert controller.store is not None
        assert controller.store.get_max_offset_in_queue(TOPIC, 0) == 0  # nothing committed
        # the writer, who may publish to Orders, commits it
        ok = await end_tx(writer, addr, {**fields, "topic": TOPIC})
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        await wait_until(lambda: len(queue_records(controller, TOPIC)) == 1, "the commit")


async def test_end_transaction_checks_the_stored_topic_not_the_header(tmp_path: Path) -> None:
    """An account that may publish to Decoy only cannot commit Orders' half message by
    naming Decoy in the header: the lookup reads the half message's REAL_TOPIC."""
    decoy_only = SessionCredentials("decoy01", "s3cret-key-d")
    accounts = ACCOUNTS + (
        "  - accessKey: decoy01\n    secretKey: s3cret-key-d\n"
        "    defaultTopicPerm: DENY\n    topicPerms: [Decoy=PUB]\n"
    )
    async with broker(tmp_path) as (controller, addr):
        assert controller.acl is not None
        write_accounts(controller.acl.path, accounts)
        assert controller.acl.reload()
        async with signed_client(WRITER) as writer:
            sent = await send_half(writer, addr, b"pay 20", topic=TOPIC)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        fields = end_fields(sent, COMMIT)
        lying = await call(decoy_only, addr, end_req({**fields, "topic": DECOY}))
        assert_refused(lying, decoy_only, "no PUB permission on topic:Orders")
        assert controller.store is not None
        assert controller.store.get_max_offset_in_queue(TOPIC, 0) == 0


# ---------------------------------------------------------------------- reading messages


async def test_view_message_by_id_needs_sub_on_the_message_topic(tmp_path: Path) -> None:
    async with broker(tmp_path) as (_, addr):
        phys = await send_one(addr, b"secret order")
        view = req(RequestCode.VIEW_MESSAGE_BY_ID, offset=str(phys))
        ok = await call(READER, addr, view)
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert decode_record(ok.body).body == b"secret order"
        # the writer may publish to Orders, not read it
        refused = await call(WRITER, addr, req(RequestCode.VIEW_MESSAGE_BY_ID, offset=str(phys)))
        assert_refused(refused, WRITER, "no SUB permission on topic:Orders")
        assert b"secret order" not in refused.body
        # naming a readable topic in the header does not help: the stored one is checked
        lying = req(RequestCode.VIEW_MESSAGE_BY_ID, offset=str(phys), topic=DECOY)
        assert_refused(await call(WRITER, addr, lying), WRITER, "no SUB permission on topic:Orders")
        # an offset where no message starts is refused (fail closed); the admin gets the
        # handler's answer
        for offset in (str(phys + 1), "999999"):
            nothing = req(RequestCode.VIEW_MESSAGE_BY_ID, offset=offset)
            assert_refused(await call(READER, addr, nothing), READER, "not a message")
            nothing = req(RequestCode.VIEW_MESSAGE_BY_ID, offset=offset)
            assert (await call(ADMIN, addr, nothing)).code == ResponseCode.SYSTEM_ERROR


FAKE_BODY_LEN = 4096


def fake_record_head() -> bytes:
    """The head (everything up to the body) of a record of topic "" whose body claims the
    next :data:`FAKE_BODY_LEN` bytes: planted at the end of a message's body, it makes the
    bytes stored after that message (other topics' messages) read as its body."""
    whole = encode_record(MessageRecord(topic="", body=bytes(FAKE_BODY_LEN)))
    return whole[: len(whole) - FAKE_BODY_LEN - 3]


async def test_view_message_refuses_a_record_planted_in_a_body(tmp_path: Path) -> None:
    """An account that may read every topic but Orders plants a fake record in a message of
    its own, then zeros after the victim's message so that the fake one decodes (topic "",
    which its default permission covers) with the victim's message as its body. The lookup
    finds no dispatched message at that offset: refused, nothing leaked."""
    sprayer = SessionCredentials("spray01", "s3cret-key-s")
    accounts = ACCOUNTS + (
        "  - accessKey: spray01\n    secretKey: s3cret-key-s\n"
        "    defaultTopicPerm: PUB|SUB\n    topicPerms: [Orders=DENY]\n"
    )
    async with broker(tmp_path) as (controller, addr):
        assert controller.acl is not None
        assert controller.store is not None
        write_accounts(controller.acl.path, accounts)
        assert controller.acl.reload()
        head = fake_record_head()
        planted = await call(sprayer, addr, send_req(DECOY, b"x" * 64 + head))
        assert planted.code == ResponseCode.SUCCESS, planted.remark
        await send_one(addr, b"victim secret")
        zeros = await call(sprayer, addr, send_req(DECOY, bytes(2 * FAKE_BODY_LEN)))
        assert zeros.code == ResponseCode.SUCCESS, zeros.remark
        phys = decode_offset_msg_id(str(planted.ext_fields["msgId"]))[2]
        raw = controller.store.lookup_message_by_offset(phys)
        assert raw is not None
        fake_at = phys + raw.index(head)
        fake = controller.store.lookup_message_by_offset(fake_at)  # the attack is real:
        assert fake is not None
        assert b"victim secret" in decode_record(fake).body
        view = req(RequestCode.VIEW_MESSAGE_BY_ID, offset=str(fake_at))
        refused = await call(sprayer, addr, view)
        assert_refused(refused, sprayer, "not a message the server can check")
        assert b"victim secret" not in refused.body


async def test_query_message_needs_sub_on_the_topic(tmp_path: Path) -> None:
    async with broker(tmp_path) as (_, addr):
        await send_one(addr)
        query: dict[str, ExtValue] = {
            "topic": TOPIC,
            "key": "k",
            "maxNum": "8",
            "beginTimestamp": "0",
            "endTimestamp": str(2**62),
        }
        ok = await call(READER, addr, command(RequestCode.QUERY_MESSAGE, query))
        assert ok.code == ResponseCode.QUERY_NOT_FOUND, ok.remark  # let through: no such key
        refused = await call(WRITER, addr, command(RequestCode.QUERY_MESSAGE, query))
        assert_refused(refused, WRITER, "no SUB permission on topic:Orders")


# ---------------------------------------------------------------------- queue offsets


@pytest.mark.parametrize(
    "code",
    [
        RequestCode.GET_MAX_OFFSET,
        RequestCode.GET_MIN_OFFSET,
        RequestCode.GET_EARLIEST_MSG_STORETIME,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    ],
)
async def test_queue_offset_requests_need_sub_on_the_topic(tmp_path: Path, code: int) -> None:
    async with broker(tmp_path) as (_, addr):
        await send_one(addr)
        fields: dict[str, ExtValue] = {"topic": TOPIC, "queueId": "0", "timestamp": "0"}
        ok = await call(READER, addr, command(code, fields))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        if code == RequestCode.GET_MAX_OFFSET:
            assert ok.ext_fields["offset"] == "1"
        refused = await call(WRITER, addr, command(code, fields))
        assert_refused(refused, WRITER, "no SUB permission on topic:Orders")
        admin = await call(ADMIN, addr, command(code, fields))
        assert admin.code == ResponseCode.SUCCESS, admin.remark


# ---------------------------------------------------------------------- consumer groups


@pytest.mark.parametrize(
    ("code", "fields"),
    [
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {}),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"topic": TOPIC, "queueId": "0"}),
        (
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"topic": TOPIC, "queueId": "0", "commitOffset": "0"},
        ),
    ],
)
async def test_group_requests_need_sub_on_the_group(
    tmp_path: Path, code: int, fields: dict[str, ExtValue]
) -> None:
    async with broker(tmp_path) as (_, addr):
        ok = await call(READER, addr, command(code, {"consumerGroup": GROUP, **fields}))
        assert ok.code != ResponseCode.NO_PERMISSION, ok.remark
        refused = await call(READER, addr, command(code, {"consumerGroup": "other", **fields}))
        assert_refused(refused, READER, "no SUB permission on group:other")


async def test_consumer_send_back_needs_sub_on_the_group(tmp_path: Path) -> None:
    """RocketMQ 4.9 and 5.3 check SUB on the group's retry topic only (5.0-5.2's PUB on
    ``originTopic`` is not followed: a consumer may not publish to what it consumes)."""
    async with broker(tmp_path) as (_, addr):
        phys = await send_one(addr)
        back: dict[str, ExtValue] = {"offset": str(phys), "delayLevel": "-1", "originTopic": TOPIC}
        send_back = RequestCode.CONSUMER_SEND_MSG_BACK
        ok = await call(READER, addr, command(send_back, {"group": GROUP, **back}))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        refused = await call(READER, addr, command(send_back, {"group": "other", **back}))
        assert_refused(refused, READER, "no SUB permission on group:other")
