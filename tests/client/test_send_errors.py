"""The error of a send whose every attempt failed says each thing once, with the broker's
response code when a broker refused it."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.aio import ClientInstance, Producer
from client.config import ClientConfig
from client.errors import MQBrokerError, MQClientError, RequestTimeoutError
from client.message import Message
from client.producer import _exhausted
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req
from tests.client.inproc_cluster import TOPIC, cluster


def test_a_send_that_timed_out_says_so_once_with_a_readable_time() -> None:
    inner = RequestTimeoutError("request 310 to 127.0.0.1:10911", 2.9999913)
    assert str(inner).endswith("request 310 to 127.0.0.1:10911 timed out after 3 s")
    what = f"Send [1] times, still failed, cost [3000]ms, Topic: T, errors: broker-b: {inner}"
    outer = _exhausted(what, inner, 3.0)
    assert isinstance(outer, RequestTimeoutError)  # the outcome is unknown
    assert outer.__cause__ is inner
    assert str(outer).count("timed out after") == 1
    assert str(outer).endswith("timed out after 3 s")


def test_a_send_refused_everywhere_is_a_plain_client_error() -> None:
    refused = MQClientError(17, "no route")
    outer = _exhausted("Send [2] times, still failed", refused, 3.0)
    assert type(outer) is MQClientError
    assert "timed out" not in str(outer)


async def test_a_send_refused_by_every_attempt_carries_the_brokers_code(tmp_path: Path) -> None:
    """RocketMQ's ``sendDefaultImpl`` gives the final MQClientException the response code of
    the last MQBrokerException: a caller can tell NO_PERMISSION from SYSTEM_BUSY by ``code``."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        config = ClientConfig.create(c.namesrv, poll_name_server_interval_s=3600)
        async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
            await p.send(Message(TOPIC, b"warm"))  # the route, writable, is cached
            read_only = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=TOPIC, perm="4",
                            readQueueNums="4", writeQueueNums="4")  # fmt: skip
            async with RemotingClient() as admin:
                resp = await admin.invoke(c.brokers["broker-a"], read_only)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            with pytest.raises(MQClientError) as single:
                await p.send(Message(TOPIC, b"refused"))
            with pytest.raises(MQClientError) as batch:
                await p.send_batch([Message(TOPIC, b"b1"), Message(TOPIC, b"b2")])
    for refused in (single.value, batch.value):
        assert isinstance(refused.__cause__, MQBrokerError)
        assert refused.__cause__.code == ResponseCode.NO_PERMISSION
        assert refused.code == ResponseCode.NO_PERMISSION
