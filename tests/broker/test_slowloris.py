"""Slowloris against a live in-process broker and name server (the reliability plan's S1).

Many connections each begin a frame and then dribble its bytes, never finishing it. With
``serverFrameReadTimeoutSeconds=1`` every one of them is closed by the frame-read deadline (the
idle timeout, ``serverChannelMaxIdleTimeSeconds``, stays at 120 s, longer than the test may
run, so nothing else can close them), while a legitimate client on the same broker keeps being
answered throughout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.frame import encode_frame
from tests.broker.inprocess import LIMIT, req, running_broker, wait_until
from tests.processes import REPO

SLOW_CONNECTIONS = 100
DRIBBLE_EVERY_S = 0.2
DEADLINE = {"serverFrameReadTimeoutSeconds": "1"}

pytestmark = pytest.mark.timeout(120)


async def dribble_until_closed(port: int, closed: list[int]) -> None:
    """Begin a frame, then send one more byte of it every :data:`DRIBBLE_EVERY_S` until the
    server closes the connection; then count it in ``closed``."""
    frame = encode_frame(req(RequestCode.GET_BROKER_RUNTIME_INFO, b"x" * 4096))
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(frame[:5])
        for byte in frame[5:-1]:  # never the last one
            if await closed_within(stream, DRIBBLE_EVERY_S):
                break
            try:
                await stream.send_all(bytes([byte]))
            except trio.BrokenResourceError:  # closed (reset: it had unread bytes)
                break
        else:
            raise AssertionError("the whole frame but one byte went out: never closed")
    closed.append(port)


async def closed_within(stream: trio.SocketStream, wait_s: float) -> bool:
    """True if the server closed ``stream`` (end of stream or reset) within ``wait_s``."""
    with trio.move_on_after(wait_s):
        try:
            return await stream.receive_some() == b""
        except trio.BrokenResourceError:
            return True
    return False


async def test_slowloris_connections_are_closed_while_a_client_is_served(tmp_path: Path) -> None:
    closed: list[int] = []
    with trio.fail_after(90):
        async with (
            running_broker(tmp_path, overrides=DEADLINE) as (broker, addr),
            RemotingClient(default_timeout_s=LIMIT) as client,
        ):
            assert broker.server is not None
            assert broker.server.frame_read_timeout_s == 1
            assert broker.server.idle_timeout_s == 120
            runtime = req(RequestCode.GET_BROKER_RUNTIME_INFO)
            port = int(addr.rsplit(":", 1)[1])
            answered = 0
            async with trio.open_nursery() as nursery:
                for _ in range(SLOW_CONNECTIONS):
                    nursery.start_soon(dribble_until_closed, port, closed)
                while len(closed) < SLOW_CONNECTIONS:
                    assert (await client.invoke(addr, runtime)).code == ResponseCode.SUCCESS
                    answered += 1
                    await trio.sleep(0.05)
            assert answered > 0
            await wait_until(lambda: len(broker.server.channels) == 1, "only the client left")
            assert (await client.invoke(addr, runtime)).code == ResponseCode.SUCCESS


async def test_the_name_server_closes_a_frame_left_unfinished(tmp_path: Path) -> None:
    config = NamesrvConfig.from_properties(
        {"listenPort": "0", "bindAddress": "127.0.0.1", **DEADLINE}
    )
    closed: list[int] = []
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(NameServer(config).run)
            async with trio.open_nursery() as slow:
                for _ in range(10):
                    slow.start_soon(dribble_until_closed, port, closed)
            async with RemotingClient(default_timeout_s=LIMIT) as client:
                topics = req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
                resp = await client.invoke(f"127.0.0.1:{port}", topics)
                assert resp.code == ResponseCode.SUCCESS
            nursery.cancel_scope.cancel()
    assert len(closed) == 10


def test_the_connection_timeouts_are_settings_printed_by_p() -> None:
    """``mqbroker -p`` / ``mqnamesrv -p`` show both keys with their defaults; a value is read
    back, and a negative one is refused naming the key."""
    for module in ("broker", "namesrv"):
        printed = subprocess.run(
            [sys.executable, "-m", module, "-p"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert "serverChannelMaxIdleTimeSeconds=120" in printed.splitlines()
        assert "serverFrameReadTimeoutSeconds=30" in printed.splitlines()
    props = {"serverChannelMaxIdleTimeSeconds": "0", "serverFrameReadTimeoutSeconds": "45"}
    broker = BrokerConfig.from_properties(props)
    assert broker.server_channel_max_idle_time_seconds == 0
    assert broker.server_frame_read_timeout_seconds == 45
    assert NamesrvConfig.from_properties(props).server_frame_read_timeout_seconds == 45
    with pytest.raises(ValueError, match="serverFrameReadTimeoutSeconds must be >= 0"):
        BrokerConfig.from_properties({"serverFrameReadTimeoutSeconds": "-1"})
    with pytest.raises(ValueError, match="serverFrameReadTimeoutSeconds must be >= 0"):
        NamesrvConfig.from_properties({"serverFrameReadTimeoutSeconds": "-1"})
