"""The sans-IO frame codec: feed bytes, assert commands (as h11's tests do)."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import LocalProtocolError, RemoteProtocolError
from remoting.frame import MAX_FRAME_SIZE, FrameDecoder, encode_frame
from tests.remoting.strategies import commands

LENGTH = struct.Struct(">I")


def raw_frame(obj: object) -> bytes:
    """A frame whose payload is ``obj`` packed as msgpack, valid or not."""
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    return LENGTH.pack(len(payload)) + payload


def decode_all(data: bytes, chunk: int | None = None, **kwargs: int) -> list[RemotingCommand]:
    """Feed ``data`` in chunks of ``chunk`` bytes (all at once if None), then EOF; collect."""
    decoder = FrameDecoder(**kwargs)
    out: list[RemotingCommand] = []
    step = chunk or max(len(data), 1)
    for start in range(0, len(data), step):
        decoder.receive_data(data[start : start + step])
        while (cmd := decoder.next_command()) is not None:
            out.append(cmd)
    decoder.receive_data(b"")
    assert decoder.next_command() is None
    assert decoder.at_eof
    return out


def sample_commands() -> list[RemotingCommand]:
    req = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "group", "b": "TopicTest", "e": 3, "z": None, "f": 1.5, "t": True, "x": b"\x00"},
        b"body \x00\xff" * 10,
        opaque=1,
    )
    return [
        req,
        RemotingCommand.response_to(req, ResponseCode.SUCCESS, ext_fields={"queueOffset": 9}),
        RemotingCommand.request(RequestCode.HEART_BEAT, opaque=2, oneway=True),
        RemotingCommand.response_to(req, ResponseCode.SYSTEM_ERROR, remark="boom ✓"),
    ]


def test_default_max_frame_size() -> None:
    assert MAX_FRAME_SIZE == 16 * 1024 * 1024
    assert FrameDecoder().max_frame_size == MAX_FRAME_SIZE


def test_frame_layout() -> None:
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}, b"\x01\x02", opaque=9)
    frame = encode_frame(cmd)
    (size,) = LENGTH.unpack_from(frame)
    assert size == len(frame) - 4
    wire = msgpack.unpackb(frame[4:], raw=False)
    assert wire["code"] == 11
    assert wire["opaque"] == 9
    assert wire["extFields"] == {"topic": "T"}
    assert wire["body"] == b"\x01\x02"
    # body is a msgpack bin (0xc4 = bin 8), not a str
    assert b"\xc4\x02\x01\x02" in frame


@given(st.lists(commands(), max_size=5), st.integers(1, 50))
def test_round_trip_any_split(cmds: list[RemotingCommand], chunk: int) -> None:
    data = b"".join(encode_frame(c) for c in cmds)
    assert decode_all(data) == cmds
    assert decode_all(data, chunk) == cmds


@pytest.mark.parametrize("chunk", [None, 1, 2, 3, 4, 5, 7, 64])
def test_byte_at_a_time_equals_one_chunk(chunk: int | None) -> None:
    cmds = sample_commands()
    data = b"".join(encode_frame(c) for c in cmds)
    assert decode_all(data, chunk) == cmds


def test_many_frames_per_chunk() -> None:
    cmds = [
        RemotingCommand.request(RequestCode.PULL_MESSAGE, {"queueOffset": i}, opaque=i)
        for i in range(20_000)
    ]
    data = b"".join(encode_frame(c) for c in cmds)
    decoder = FrameDecoder()
    decoder.receive_data(data)
    out = []
    while (cmd := decoder.next_command()) is not None:
        out.append(cmd)
    assert out == cmds
    assert decoder.buffered == 0


def test_need_more_data_returns_none() -> None:
    frame = encode_frame(sample_commands()[0])
    decoder = FrameDecoder()
    assert decoder.next_command() is None
    decoder.receive_data(frame[:3])
    assert decoder.next_command() is None
    decoder.receive_data(frame[3:-1])
    assert decoder.next_command() is None
    decoder.receive_data(frame[-1:])
    assert decoder.next_command() == sample_commands()[0]
    assert decoder.next_command() is None
    assert not decoder.at_eof


def test_frame_exactly_at_max_accepted_one_over_rejected() -> None:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"k": "v"}, b"x" * 100, opaque=3)
    frame = encode_frame(cmd)
    size = len(frame) - 4
    assert decode_all(frame, max_frame_size=size) == [cmd]
    assert encode_frame(cmd, max_frame_size=size) == frame

    decoder = FrameDecoder(max_frame_size=size - 1)
    decoder.receive_data(frame)
    with pytest.raises(RemoteProtocolError, match="exceeds the maximum"):
        decoder.next_command()
    with pytest.raises(LocalProtocolError, match="exceeds the maximum"):
        encode_frame(cmd, max_frame_size=size - 1)


def test_oversize_prefix_rejected_before_payload() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    decoder.receive_data(LENGTH.pack(1001)[:3])
    assert decoder.next_command() is None
    decoder.receive_data(LENGTH.pack(1001)[3:])
    with pytest.raises(RemoteProtocolError, match="1001 bytes exceeds the maximum of 1000"):
        decoder.next_command()


def test_oversize_prefix_default_limit() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(LENGTH.pack(MAX_FRAME_SIZE + 1))
    with pytest.raises(RemoteProtocolError):
        decoder.next_command()


def test_encode_rejects_invalid_command() -> None:
    with pytest.raises(LocalProtocolError):
        encode_frame(RemotingCommand(code=10, opaque=-(2**31) - 1))
    with pytest.raises(LocalProtocolError):
        encode_frame(RemotingCommand(code=10, opaque=1, ext_fields={"n": 2**64}))


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(LENGTH.pack(1) + b"\xc1", id="never-used-byte"),
        pytest.param(LENGTH.pack(2) + b"\x92\x01", id="truncated-array"),
        pytest.param(LENGTH.pack(2) + b"\x01\x02", id="extra-data"),
        pytest.param(LENGTH.pack(0), id="empty-payload"),
        pytest.param(LENGTH.pack(3) + b"\xa2\xff\xfe", id="bad-utf8"),
        pytest.param(LENGTH.pack(4) + b"\x81\x91\x01\x01", id="unhashable-key"),
    ],
)
def test_garbage_msgpack_rejected(frame: bytes) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    with pytest.raises(RemoteProtocolError, match="undecodable"):
        decoder.next_command()


def test_too_deeply_nested_payload_is_named_in_the_error() -> None:
    decoder = FrameDecoder()
    payload = b"\x91" * 2000 + b"\xc0"  # 2000 nested one-element arrays
    decoder.receive_data(LENGTH.pack(len(payload)) + payload)
    with pytest.raises(RemoteProtocolError, match="undecodable frame payload: nested too deeply"):
        decoder.next_command()


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        ([10, 1], "must be a map"),
        ("hello", "must be a map"),
        (7, "must be a map"),
        ({"opaque": 1}, "no 'code'"),
        ({"code": 10}, "no 'opaque'"),
        ({"code": "10", "opaque": 1}, "'code' must be an int"),
        ({"code": 10, "opaque": 1, "body": "str"}, "'body' must be bytes"),
        ({"code": 10, "opaque": 1, "extFields": {"a": [1]}}, "extFields"),
        ({"code": 10, "opaque": 1, "extFields": {b"k": "v"}}, "must be a str"),
    ],
)
def test_invalid_command_rejected(obj: object, match: str) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(raw_frame(obj))
    with pytest.raises(RemoteProtocolError, match=match):
        decoder.next_command()


def test_decoder_stays_broken_after_error() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(raw_frame([1]) + encode_frame(sample_commands()[0]))
    with pytest.raises(RemoteProtocolError):
        decoder.next_command()
    with pytest.raises(RemoteProtocolError, match="earlier error"):
        decoder.next_command()
    with pytest.raises(RemoteProtocolError, match="earlier error"):
        decoder.receive_data(b"more")


@pytest.mark.parametrize("cut", [1, 3, 4, 5, -1])
def test_eof_mid_frame_raises(cut: int) -> None:
    frame = encode_frame(sample_commands()[0])
    decoder = FrameDecoder()
    decoder.receive_data(frame + frame[:cut])
    decoder.receive_data(b"")
    assert decoder.next_command() == sample_commands()[0]
    assert not decoder.at_eof
    with pytest.raises(RemoteProtocolError, match="EOF inside"):
        decoder.next_command()


def test_eof_at_boundary() -> None:
    frame = encode_frame(sample_commands()[0])
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    decoder.receive_data(b"")
    assert not decoder.at_eof  # a complete frame is still buffered
    assert decoder.next_command() == sample_commands()[0]
    assert decoder.at_eof
    assert decoder.next_command() is None
    decoder.receive_data(b"")  # repeated EOF is harmless
    assert decoder.at_eof


def test_eof_on_empty_stream() -> None:
    decoder = FrameDecoder()
    assert not decoder.at_eof
    decoder.receive_data(b"")
    assert decoder.at_eof
    assert decoder.next_command() is None


def test_data_after_eof_rejected() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="after EOF"):
        decoder.receive_data(b"\x00")


@pytest.mark.parametrize("bad", [0, -1, 2**32])
def test_bad_max_frame_size(bad: int) -> None:
    with pytest.raises(ValueError, match="max_frame_size"):
        FrameDecoder(max_frame_size=bad)
