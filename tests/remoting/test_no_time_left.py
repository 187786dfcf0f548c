"""A request with no time left (``timeout_s`` 0 or less) is refused before it is written, as
RocketMQ's ``invokeSync`` throws ``RemotingTimeoutException`` when ``left <= 0``: one written
anyway could be carried out by the broker and still be reported as timed out."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.errors import RemotingTimeoutError
from tests.broker.inprocess import LIMIT, broker_and_client, req, send_req
from tests.broker.pulls import pull_all, send

TOPIC = "NoTimeLeft"


async def test_a_send_with_no_time_left_is_not_written(tmp_path: Path) -> None:
    """It used to be written (and stored) and then reported as a timeout."""
    with trio.fail_after(LIMIT):
        async with broker_and_client(tmp_path) as (_, addr, client):
            create = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=TOPIC, readQueueNums="1",
                         writeQueueNums="1", perm="6")  # fmt: skip
            assert (await client.invoke(addr, create)).code == ResponseCode.SUCCESS
            for timeout_s in (0.0, -1.0):
                with pytest.raises(RemotingTimeoutError):
                    await client.invoke(addr, send_req(TOPIC, b"late"), timeout_s=timeout_s)
            # written after them on the same connection: stored after anything they stored
            await send(client, addr, TOPIC, b"in time")
            assert [m.body for m in await pull_all(client, addr, TOPIC)] == [b"in time"]


async def test_a_nan_timeout_is_a_value_error(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT):
        async with broker_and_client(tmp_path) as (_, addr, client):
            with pytest.raises(ValueError, match="timeout_s"):
                await client.invoke(addr, send_req(TOPIC, b"late"), timeout_s=math.nan)
