"""Warnings about peers' bad input are limited per kind (remoting.log_limit): the pure limiter,
and a live server flooded with unknown codes, malformed headers and garbage connections."""

from __future__ import annotations

import logging
import math
import struct

import pytest
import trio

from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import guarded, header_int
from remoting.log_limit import WarningLimiter, suppressed_note
from remoting.server import RemotingServer

LIMIT = 20
FLOOD = 50


class FakeTime:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_warning_of_a_kind_passes_then_drops_until_the_interval_ends() -> None:
    clock = FakeTime()
    limiter = WarningLimiter(10.0, clock)
    assert limiter.allow("a") == 0
    assert [limiter.allow("a") for _ in range(3)] == [None, None, None]
    assert limiter.allow("b") == 0  # kinds are independent
    clock.now += 9.9
    assert limiter.allow("a") is None
    clock.now += 0.1
    assert limiter.allow("a") == 4  # the four dropped since the last one let through
    assert limiter.allow("a") is None
    clock.now += 10
    assert limiter.allow("a") == 1


def test_suppressed_note() -> None:
    assert suppressed_note(0) == ""
    assert suppressed_note(3) == " (3 more like it not logged)"


def _needs_queue_id(request: RemotingCommand, channel: Channel) -> RemotingCommand:
    header_int(request, "queueId")
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return [m for m in messages if text in m]


async def _garbage_connection(host: str, port: int) -> None:
    """Send a frame too large to accept and wait until the server closes the connection."""
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(struct.pack(">I", 0xFFFFFFFF) + b"x" * 16)
        while await stream.receive_some(4096):
            pass


async def test_a_flood_of_bad_input_logs_one_warning_per_kind_and_is_still_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handlers = {int(RequestCode.QUERY_MESSAGE): guarded(_needs_queue_id)}
    server = RemotingServer(handlers, port=0, warning_interval_s=math.inf)  # no wall clock
    with caplog.at_level(logging.WARNING), trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run)
            addr = f"127.0.0.1:{port}"
            async with RemotingClient() as client:
                for _ in range(FLOOD):
                    unknown = RemotingCommand.request(RequestCode.POP_MESSAGE, {}, b"", opaque=0)
                    resp = await client.invoke(addr, unknown)
                    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                    bad = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {}, b"", opaque=0)
                    resp = await client.invoke(addr, bad)
                    assert resp.code == ResponseCode.SYSTEM_ERROR
                    assert "queueId" in (resp.remark or "")
            for _ in range(FLOOD // 5):
                await _garbage_connection("127.0.0.1", port)
            nursery.cancel_scope.cancel()
    assert len(_warnings(caplog, "not supported")) == 1
    assert len(_warnings(caplog, "bad request")) == 1
    assert len(_warnings(caplog, "protocol error")) == 1
