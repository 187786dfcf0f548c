"""SEND_MESSAGE to a retry topic (a push consumer's send-back fallback): the broker sends a
message over its group's maximum reconsume times to the dead-letter queue, as RocketMQ's
``handleRetryAndDLQ``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from client import api
from client.message import Message
from client.producer import encode_batch
from common.topic import dlq_topic, retry_topic
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import LIMIT, broker_and_client, req


async def create_retry_topic(client: RemotingClient, addr: str) -> None:
    """``%RETRY%g`` with one read-write queue on the broker at ``addr``."""
    cmd = req(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        topic=retry_topic("g"),
        readQueueNums="1",
        writeQueueNums="1",
        perm="6",
    )
    assert (await client.invoke(addr, cmd)).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    ("reconsume", "max_header", "stored_in"),
    [
        (16, None, retry_topic("g")),  # the group's retryMaxTimes, 16
        (17, None, dlq_topic("g")),
        (2, 2, retry_topic("g")),
        (3, 2, dlq_topic("g")),
    ],
)
async def test_a_retry_message_over_its_maximum_goes_to_the_dlq(
    tmp_path: Path, reconsume: int, max_header: int | None, stored_in: str
) -> None:
    with trio.fail_after(LIMIT):
        async with broker_and_client(tmp_path) as (_, addr, client):  # group g auto-created
            await create_retry_topic(client, addr)
            send = api.send_request(
                group="CLIENT_INNER_PRODUCER",
                topic=retry_topic("g"),
                queue_id=0,
                body=b"x",
                properties="",
                sys_flag=0,
                flag=0,
                born_timestamp=0,
                reconsume_times=reconsume,
                max_reconsume_times=max_header,
            )
            resp = await client.invoke(addr, send)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            max_offset = req(RequestCode.GET_MAX_OFFSET, topic=stored_in, queueId="0")
            resp = await client.invoke(addr, max_offset)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert int(resp.ext_fields["offset"]) == 1


async def test_a_batch_to_a_retry_topic_is_refused_and_stores_nothing(tmp_path: Path) -> None:
    """RocketMQ's ``sendBatchMessage``: a batch skips the dead-letter check of single
    messages, so it may not go to ``%RETRY%<group>`` at all (even one spent long ago)."""
    with trio.fail_after(LIMIT):
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_retry_topic(client, addr)
            send = api.send_request(
                group="pg",
                topic=retry_topic("g"),
                queue_id=0,
                body=encode_batch([Message(retry_topic("g"), b"x")]),
                properties="",
                sys_flag=0,
                flag=0,
                born_timestamp=0,
                batch=True,
                reconsume_times=99,
            )
            resp = await client.invoke(addr, send)
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL
            assert resp.remark == f"batch request does not support retry group {retry_topic('g')}"
            for topic in (retry_topic("g"), dlq_topic("g")):
                max_offset = req(RequestCode.GET_MAX_OFFSET, topic=topic, queueId="0")
                resp = await client.invoke(addr, max_offset)
                assert int(resp.ext_fields.get("offset", 0)) == 0, (topic, resp.remark)
