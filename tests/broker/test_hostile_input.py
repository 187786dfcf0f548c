"""Hostile input against a live in-process broker (the reliability plan's R5).

- Raw byte streams that are not our protocol (HTTP, a TLS ClientHello, lengths of 0, 2**31-1
  and over the limit, a cut-short header, 8 MiB of garbage, msgpack that is not a command):
  each connection is answered with an error or closed (a cut-short header: the client goes
  away mid-frame), the store's files are untouched, and the broker keeps serving.
- A seeded stream of requests with every request code RocketMQ defines and headers drawn from
  field names and values that are wrong in every way we could think of (missing, empty,
  negative, huge, not numbers, system topics, ``../``, control characters; random bodies):
  every one is answered, none costs a handler traceback in the log, and the broker keeps
  serving.
- The same for valid requests of the codes clients send (send, batch send, pull, offsets,
  queries, heartbeat, send-back, end transaction, locks, topic admin) with one or two header
  fields replaced by such values or removed, or the body replaced, so that every handler's
  checks past the first field are reached too.
"""

from __future__ import annotations

import hashlib
import logging
import random
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import trio

from client import api
from client.message import Message, MessageQueue
from client.producer import encode_batch
from common.subscription import SubscriptionData
from remoting.client import RemotingClient
from remoting.client_bodies import ConsumerData, HeartbeatData, encode_heartbeat
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import req, running_broker, send_req, wait_until

TOPIC = "HostileTopic"
SEED = 20261121
REQUESTS = 600

TLS_CLIENT_HELLO = (
    bytes.fromhex("16030100a5010000a10303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00"
)
RAW_STREAMS = {
    "http": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "tls-client-hello": TLS_CLIENT_HELLO,
    "zero-length": struct.pack(">I", 0),
    "max-length": struct.pack(">I", 2**31 - 1) + b"x" * 64,
    "over-the-limit": struct.pack(">I", 16 * 1024 * 1024 + 1),
    "cut-short-header": b"\x00\x00",
    "garbage-8MiB": struct.pack(">I", 8 * 1024 * 1024)
    + random.Random(1).randbytes(8 * 1024 * 1024),
    "not-a-command": struct.pack(">I", 9) + msgpack.packb([1, 2, 3, 4, 5, 6, 7, 8]),
}

FIELD_NAMES = (
    "topic",
    "queueId",
    "consumerGroup",
    "commitOffset",
    "maxMsgNums",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "offset",
    "timestamp",
    "key",
    "msgId",
    "producerGroup",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueOffset",
    "suspendTimeoutMillis",
    "subscription",
    "subVersion",
    "expressionType",
    "beginTimestamp",
    "endTimestamp",
    "maxNum",
    "group",
    "clientId",
    "readQueueNums",
    "writeQueueNums",
    "perm",
    "topicFilterType",
    "topicSysFlag",
    "order",
    "reconsumeTimes",
    "batch",
    "maxReconsumeTimes",
    "delayLevel",
    "originMsgId",
    "originTopic",
    "commitLogOffset",
    "tranStateTableOffset",
    "commitOrRollback",
    "fromTransactionCheck",
    "transactionId",
    "isForce",
    "srcGroup",
    "destGroup",
    "brokerName",
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "i",
    "j",
    "k",
    "l",
    "m",
    "n",
    "z",
)
FIELD_VALUES = (
    "",
    "0",
    "-1",
    "1",
    "7",
    "99999999999999999999",
    "-99999999999999999999",
    "abc",
    "../x",
    "%RETRY%g",
    "%DLQ%g",
    "T" * 200,
    "\x00",
    "1.5",
    "true",
    "false",
    " 1",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "SCHEDULE_TOPIC_XXXX",
    "TBW102",
    TOPIC,
    "A\x01B\x02",
    "TAGS\x01x\x02",
    "*",
    "TagA || TagB",
    "2147483648",
    "-2147483649",
    "NaN",
    5,
    -1,
    2**40,
    True,
)
BODIES = (
    b"",
    b"x",
    bytes(10),
    b"{}",
    b"[]",
    b'{"a":1}',
    msgpack.packb({"x": 1}),
    msgpack.packb([1, 2]),
    b"\xc1\xc1",
    b"\xff" * 64,
    b'{"topicConfigTable":{}}',
)
SKIPPED = {RequestCode.UPDATE_BROKER_CONFIG}  # a valid random key could reconfigure the broker


def store_files(root: Path) -> dict[str, str]:
    """Digest of every file under the store root except the broker's JSON state."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.parent.name != "config" and p.name != "lock"
    }


def hostile_requests(rng: random.Random) -> Iterator[RemotingCommand]:
    """Requests of every code, headers and bodies drawn from the wrong values above."""
    codes = sorted(int(c) for c in RequestCode if c not in SKIPPED)
    for opaque in range(1, REQUESTS + 1):
        ext = {rng.choice(FIELD_NAMES): rng.choice(FIELD_VALUES) for _ in range(rng.randint(0, 6))}
        body = rng.choice(BODIES) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 300))
        yield RemotingCommand.request(rng.choice(codes), ext, body, opaque=opaque)


def valid_requests(born_ms: int) -> list[RemotingCommand]:
    """One valid request of each code a client sends, on :data:`TOPIC` (queue 0)."""
    mq = MessageQueue(TOPIC, "broker-a", 0)
    send = api.send_request(
        group="pg",
        topic=TOPIC,
        queue_id=0,
        body=b"body",
        properties="KEYS\x01k\x02",
        sys_flag=0,
        flag=0,
        born_timestamp=born_ms,
    )
    batch = api.send_request(
        group="pg",
        topic=TOPIC,
        queue_id=0,
        body=encode_batch([Message(TOPIC, b"a")]),
        properties="",
        sys_flag=0,
        flag=0,
        born_timestamp=born_ms,
        batch=True,
    )
    pull = api.pull_request(
        group="cg",
        mq=mq,
        offset=0,
        max_msgs=8,
        subscription=SubscriptionData(TOPIC),
        suspend_timeout_ms=0,
    )
    heartbeat = encode_heartbeat(
        HeartbeatData(
            "127.0.0.1@1",
            producer_groups=("pg",),
            consumers=(ConsumerData("cg", subscriptions=(SubscriptionData(TOPIC),)),),
        )
    )
    return [
        req(RequestCode.HEART_BEAT, heartbeat),  # first: the group has a consumer
        send,
        batch,
        pull,
        api.query_offset_request("cg", mq),
        api.update_offset_request("cg", mq, 1),
        api.offset_request(RequestCode.GET_MAX_OFFSET, mq),
        api.offset_request(RequestCode.GET_MIN_OFFSET, mq),
        api.offset_request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, born_ms),
        api.offset_request(RequestCode.GET_EARLIEST_MSG_STORETIME, mq),
        api.consumer_list_request("cg"),
        api.lock_batch_request(RequestCode.LOCK_BATCH_MQ, "cg", "127.0.0.1@1", [mq]),
        api.lock_batch_request(RequestCode.UNLOCK_BATCH_MQ, "cg", "127.0.0.1@1", [mq]),
        req(RequestCode.VIEW_MESSAGE_BY_ID, offset="0"),
        req(
            RequestCode.QUERY_MESSAGE,
            topic=TOPIC,
            key="k",
            maxNum="8",
            beginTimestamp="0",
            endTimestamp=str(2**62),
        ),
        req(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            offset="0",
            group="cg",
            delayLevel="0",
            originMsgId="X",
            originTopic=TOPIC,
            unitMode="false",
            maxReconsumeTimes="3",
        ),
        req(
            RequestCode.END_TRANSACTION,
            topic=TOPIC,
            producerGroup="pg",
            tranStateTableOffset="0",
            commitLogOffset="0",
            commitOrRollback="8",
            fromTransactionCheck="false",
            msgId="X",
            transactionId="X",
        ),
        req(RequestCode.UNREGISTER_CLIENT, clientID="127.0.0.1@1", producerGroup="pg"),
        req(RequestCode.GET_TOPIC_STATS_INFO, topic=TOPIC),
        req(RequestCode.GET_CONSUME_STATS, consumerGroup="cg", topic=TOPIC),
        req(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            topic="Other",
            readQueueNums="2",
            writeQueueNums="2",
            perm="6",
        ),
        req(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            msgpack.packb({"groupName": "cg2"}),
        ),
    ]


def mutated(rng: random.Random, template: RemotingCommand, opaque: int) -> RemotingCommand:
    """``template`` with one or two header fields replaced or removed, or its body replaced."""
    ext = dict(template.ext_fields)
    body = template.body
    for _ in range(rng.randint(1, 2)):
        choice = rng.random()
        if choice < 0.2 or not ext:
            body = rng.choice(BODIES) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 99))
        elif choice < 0.3:
            del ext[rng.choice(sorted(ext))]
        else:
            ext[rng.choice(sorted(ext))] = rng.choice(FIELD_VALUES)
    return RemotingCommand.request(template.code, ext, body, opaque=opaque)


async def _send_then_first_answer(stream: trio.SocketStream, data: bytes) -> bytes:
    """Send ``data``; return what the peer sends first (b"" once it has closed)."""
    try:
        await stream.send_all(data)
        return await stream.receive_some(1024)
    except trio.BrokenResourceError:  # closed on us while we still sent
        return b""


@pytest.mark.parametrize("name", sorted(RAW_STREAMS))
async def test_raw_garbage_is_refused_and_touches_nothing(tmp_path: Path, name: str) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            assert (await client.invoke(addr, send_req(TOPIC, b"before"))).code == 0
            store = broker.store
            assert store is not None
            await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 1, "dispatch")
            store.flush_logics()
            before = store_files(tmp_path / "store")
            host, port = addr.split(":")
            raw = await trio.open_tcp_stream(host, int(port))
            async with raw:
                if name == "cut-short-header":  # the broker would wait for the idle timeout
                    await raw.send_all(RAW_STREAMS[name])
                else:  # an error answer or a close, in time
                    with trio.fail_after(10):
                        await _send_then_first_answer(raw, RAW_STREAMS[name])
            health = await client.invoke(addr, req(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert health.code == ResponseCode.SUCCESS
            store.flush_logics()
            assert store_files(tmp_path / "store") == before


async def test_hostile_headers_are_answered_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with trio.fail_after(120):
        async with (
            running_broker(tmp_path) as (_, addr),
            RemotingClient(default_timeout_s=10) as client,
        ):
            assert (await client.invoke(addr, send_req(TOPIC, b"m"))).code == 0
            codes = set()
            for request in hostile_requests(random.Random(SEED)):
                response = await client.invoke(addr, request)
                codes.add(response.code)
            health = await client.invoke(addr, req(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert health.code == ResponseCode.SUCCESS
    print("DBG", len(caplog.records), sorted({(r.name, r.levelname) for r in caplog.records})[:20])
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert tracebacks == [], [r.getMessage() for r in tracebacks[:5]]
    assert {ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED} <= codes


async def test_valid_requests_with_a_bad_field_are_answered_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    rng = random.Random(SEED + 1)
    with trio.fail_after(120):
        async with (
            running_broker(tmp_path) as (_, addr),
            RemotingClient(default_timeout_s=10) as client,
        ):
            assert (await client.invoke(addr, send_req(TOPIC, b"m"))).code == 0
            templates = valid_requests(int(time.time() * 1000))
            for template in templates:  # the templates themselves are well-formed
                response = await client.invoke(addr, template.with_opaque(1, 0))
                if template.code != RequestCode.END_TRANSACTION:  # offset 0 holds no half
                    assert response.code != ResponseCode.SYSTEM_ERROR, (template.code, response)
            answers: dict[int, set[int]] = {}
            for opaque in range(1, REQUESTS + 1):
                request = mutated(rng, rng.choice(templates), opaque)
                response = await client.invoke(addr, request)
                answers.setdefault(request.code, set()).add(response.code)
            health = await client.invoke(addr, req(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert health.code == ResponseCode.SUCCESS
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert tracebacks == [], [r.getMessage() for r in tracebacks[:5]]
    assert len(answers) == len({t.code for t in templates})  # every code was tried
