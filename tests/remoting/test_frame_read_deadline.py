"""The frame-read deadline (the reliability plan's §4.3 "idle / slowloris" row): once part of a
frame arrived, the rest must come within ``frame_read_timeout_s``.

A channel over trio's in-memory stream pair, in virtual time (autojump clock): the peer is
this test, writing the frame's bytes when it likes; the times asserted are trio's virtual ones.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from remoting.channel import Channel
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import Connection, FrameReadTimeoutError
from remoting.frame import FrameDecoder, encode_frame

IDLE_S = 120.0
DEADLINE_S = 30.0
LIMIT = 1000.0  # virtual seconds


def answer(request: RemotingCommand, ctx: Channel) -> RemotingCommand:
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=request.body)


def served_channel(stream: trio.abc.Stream) -> Channel:
    """A server-side channel with the idle timeout and the frame-read deadline under test."""
    connection = Connection(stream, "peer:1", frame_read_timeout_s=DEADLINE_S)
    return Channel(connection, {RequestCode.HEART_BEAT: answer}, idle_timeout_s=IDLE_S)


def request_frame(body: bytes) -> bytes:
    return encode_frame(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body, opaque=7))


async def read_response(stream: trio.abc.ReceiveStream) -> RemotingCommand:
    decoder = FrameDecoder()
    while (cmd := decoder.next_command()) is None:
        data = await stream.receive_some()
        assert data, "the channel closed the connection"
        decoder.receive_data(bytes(data))  # a memory stream's chunk may be a bytearray
    return cmd


async def test_a_frame_dribbled_past_the_deadline_closes_its_connection(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A byte a second (each one would reset a per-byte idle timer): closed at the frame-read
    deadline, long before the idle timeout, with one warning naming the peer."""
    ours, theirs = trio.testing.memory_stream_pair()
    channel = served_channel(ours)
    frame = request_frame(bytes(1000))

    async def dribble() -> None:
        for byte in frame:
            await theirs.send_all(bytes([byte]))
            await trio.sleep(1.0)

    start = trio.current_time()
    with caplog.at_level(logging.WARNING, logger="remoting.channel"), trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dribble)
            await channel.run()
            nursery.cancel_scope.cancel()
    assert DEADLINE_S <= trio.current_time() - start < DEADLINE_S + 2.0
    assert channel.closed
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "peer:1" in warnings[0]
    assert "still incomplete 30 s" in warnings[0]


async def test_a_stalled_length_prefix_counts_as_a_begun_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two of the four length bytes, then nothing: closed at the deadline too."""
    ours, theirs = trio.testing.memory_stream_pair()
    channel = served_channel(ours)
    await theirs.send_all(request_frame(b"x")[:2])
    start = trio.current_time()
    with trio.fail_after(LIMIT):
        await channel.run()
    assert DEADLINE_S <= trio.current_time() - start < IDLE_S


async def test_frames_each_completed_within_the_deadline_are_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each frame gets its own deadline: three frames, each sent in halves 20 s apart (60 s
    in all, twice the deadline), are all answered, and the connection stays open."""
    ours, theirs = trio.testing.memory_stream_pair()
    channel = served_channel(ours)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.run)
            for i in range(3):
                frame = request_frame(b"slow-%d" % i)
                await theirs.send_all(frame[:3])
                await trio.sleep(DEADLINE_S - 10.0)
                await theirs.send_all(frame[3:])
                response = await read_response(theirs)
                assert response.code == ResponseCode.SUCCESS
                assert response.body == b"slow-%d" % i
            assert not channel.closed
            nursery.cancel_scope.cancel()


async def test_the_deadline_error_says_how_much_of_the_frame_came() -> None:
    """The error closing the connection names the deadline and the bytes received of the
    frame's whole size."""
    ours, theirs = trio.testing.memory_stream_pair()
    connection = Connection(ours, "peer:1", frame_read_timeout_s=0.05)
    frame = request_frame(b"abc")
    await theirs.send_all(frame[:6])
    with trio.fail_after(10), pytest.raises(FrameReadTimeoutError) as raised:
        await connection.receive()
    assert f"(6 of {len(frame)} bytes received)" in str(raised.value)
