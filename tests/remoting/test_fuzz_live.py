"""Hostile requests against a live broker and name server (property-based, deterministic).

Every request is well framed, but its contents are hostile: headers missing, of the wrong type
(str for int, int for str, None, bytes, NaN, ints past a Java long, strings with NUL, very
long ones), bodies that are garbage, truncated or of the wrong shape, for every request code
the two servers dispatch. The properties, after each example:

- a request (not oneway) is answered on its connection: a response with its opaque, a known
  response code and, unless SUCCESS, a remark naming the problem (never a traceback); a
  merely invalid header never costs the connection, nor a wait until the client's timeout;
- no request makes a server log an error (an unexpected exception in a handler is one);
- a well-behaved client on another connection still gets a real send + pull round trip
  through the broker and an answer from the name server, and every message acknowledged to it
  is still there at the end; the servers' task tree never crashed.

Frames the protocol cannot accept (not a command map, fields of types a command cannot hold,
extension types, deep nesting, declared lengths far past the bytes sent, a frame cut short)
close that one connection, as RocketMQ's ``NettyDecoder`` does, and nothing else.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.record import encode_properties
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.remoting.live_wire import (
    LIMIT,
    LiveServers,
    WireClient,
    command_map,
    frame_of,
    wire_client,
)

C = RequestCode
TOPIC: Final = "FuzzTopic"
"""An existing topic the hostile requests aim at (so they get past the first checks)."""
CANARY: Final = "FuzzCanary"
"""The well-behaved client's topic; no hostile value ever names it."""
GROUP: Final = "FuzzGroup"
FAKE_BROKER: Final = "127.0.0.1:1"


def bounded(max_examples: int) -> settings:
    """Deterministic settings for ``max_examples`` examples (each one does real I/O)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


KNOWN_CODES: Final = frozenset(int(c) for c in ResponseCode)
MAX_RSS_GROWTH_KB: Final = 200 * 1024
"""Far below what any declared length (up to 4 GiB) would take if it were allocated."""


# ---------------------------------------------------------------------- plausible requests


def _heartbeat() -> dict[str, Any]:
    return {
        "clientID": "fuzz-client",
        "producerDataSet": [{"groupName": "FuzzProducer"}],
        "consumerDataSet": [
            {
                "groupName": GROUP,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}],
            }
        ],
    }


def _lock_body() -> dict[str, Any]:
    return {
        "consumerGroup": GROUP,
        "clientId": "fuzz-client",
        "mqSet": [{"topic": TOPIC, "brokerName": "broker-a", "queueId": 0}],
    }


_SEND_V2: Final[dict[str, Any]] = {
    "a": "FuzzProducer", "b": TOPIC, "e": 0, "f": 0, "g": 1700000000000, "h": 0, "i": "", "j": 0,
}  # fmt: skip
_PULL: Final[dict[str, Any]] = {
    "consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "queueOffset": "0",
    "maxMsgNums": "4", "sysFlag": "0", "commitOffset": "0", "subscription": "*",
    "suspendTimeoutMillis": "0",
}  # fmt: skip
_QUEUE: Final[dict[str, Any]] = {"topic": TOPIC, "queueId": "0"}
_REGISTER: Final[dict[str, Any]] = {
    "brokerName": "fuzz-b", "brokerAddr": FAKE_BROKER, "clusterName": "FuzzCluster",
    "haServerAddr": "", "brokerId": "0",
}  # fmt: skip

BASE: Final[dict[int, tuple[dict[str, Any], object]]] = {
    C.SEND_MESSAGE: (
        {
            "producerGroup": "FuzzProducer",
            "topic": TOPIC,
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": "1700000000000",
            "flag": "0",
            "properties": "TAGS\x01a\x02",
        },
        b"payload",
    ),
    C.SEND_MESSAGE_V2: (_SEND_V2, b"payload"),
    C.SEND_BATCH_MESSAGE: (_SEND_V2, [{"body": b"one"}, {"body": b"two", "flag": 1}]),
    C.PULL_MESSAGE: (_PULL, b""),
    C.QUERY_MESSAGE: (
        {
            "topic": TOPIC,
            "key": "k",
            "maxNum": "4",
            "beginTimestamp": "0",
            "endTimestamp": str(2**62),
        },
        b"",
    ),
    C.QUERY_CONSUMER_OFFSET: ({"consumerGroup": GROUP, **_QUEUE}, b""),
    C.UPDATE_CONSUMER_OFFSET: ({"consumerGroup": GROUP, **_QUEUE, "commitOffset": "1"}, b""),
    C.UPDATE_AND_CREATE_TOPIC: (
        {"topic": "FuzzNew", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"},
        b"",
    ),
    C.UPDATE_BROKER_CONFIG: ({}, b"autoCreateTopicEnable=true\n"),
    C.SEARCH_OFFSET_BY_TIMESTAMP: ({**_QUEUE, "timestamp": "0"}, b""),
    C.GET_MAX_OFFSET: (_QUEUE, b""),
    C.GET_MIN_OFFSET: (_QUEUE, b""),
    C.GET_EARLIEST_MSG_STORETIME: (_QUEUE, b""),
    C.VIEW_MESSAGE_BY_ID: ({"offset": "0"}, b""),
    C.HEART_BEAT: ({}, _heartbeat()),
    C.UNREGISTER_CLIENT: (
        {"clientID": "fuzz-client", "producerGroup": "FuzzProducer", "consumerGroup": GROUP},
        b"",
    ),
    C.CONSUMER_SEND_MSG_BACK: (
        {
            "offset": "0",
            "group": GROUP,
            "delayLevel": "0",
            "originMsgId": "x",
            "originTopic": TOPIC,
            "maxReconsumeTimes": "16",
        },
        b"",
    ),
    C.END_TRANSACTION: (
        {
            "producerGroup": "FuzzProducer",
            "tranStateTableOffset": "0",
            "commitLogOffset": "0",
            "commitOrRollback": "8",
            "fromTransactionCheck": "false",
            "msgId": "x",
        },
        b"",
    ),
    C.GET_CONSUMER_LIST_BY_GROUP: ({"consumerGroup": GROUP}, b""),
    C.LOCK_BATCH_MQ: ({}, _lock_body()),
    C.UNLOCK_BATCH_MQ: ({}, _lock_body()),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ({}, {"groupName": "FuzzGroup2"}),
    C.GET_TOPIC_STATS_INFO: ({"topic": TOPIC}, b""),
    C.GET_CONSUMER_CONNECTION_LIST: ({"consumerGroup": GROUP}, b""),
    C.GET_PRODUCER_CONNECTION_LIST: ({"producerGroup": "FuzzProducer"}, b""),
    C.DELETE_SUBSCRIPTIONGROUP: ({"groupName": "FuzzGroup2"}, b""),
    C.GET_CONSUME_STATS: ({"consumerGroup": GROUP, "topic": TOPIC}, b""),
    C.DELETE_TOPIC_IN_BROKER: ({"topic": "FuzzNew"}, b""),
    C.INVOKE_BROKER_TO_RESET_OFFSET: (
        {"topic": TOPIC, "group": GROUP, "timestamp": "0", "isForce": "true"},
        b"",
    ),
    C.CLONE_GROUP_OFFSET: ({"srcGroup": GROUP, "destGroup": "FuzzGroup3", "topic": TOPIC}, b""),
    C.GET_PENDING_HALF_MESSAGES: ({"producerGroup": "FuzzProducer"}, b""),
    C.REGISTER_BROKER: (
        _REGISTER,
        {"topicConfigTable": {"FuzzRoute": {"topicName": "FuzzRoute", "perm": 6}}},
    ),
    C.UNREGISTER_BROKER: (_REGISTER, b""),
    C.GET_ROUTEINFO_BY_TOPIC: ({"topic": TOPIC}, b""),
    C.DELETE_TOPIC_IN_NAMESRV: ({"topic": "FuzzRoute"}, b""),
    C.GET_TOPICS_BY_CLUSTER: ({"cluster": "FuzzCluster"}, b""),
}
"""Per code, a header and body that pass its checks; examples start from these and break
them (codes not listed start from nothing)."""

FIELD_NAMES: Final = sorted(
    {name for header, _ in BASE.values() for name in header}
    | {"defaultTopicQueueNums", "reconsumeTimes", "batch", "isForce", "order", "key",
       "topicSysFlag", "topicFilterType", "d", "k", "l", "m", "n"}
)  # fmt: skip


# ---------------------------------------------------------------------- hostile values

_NAMED_INTS: Final = [-1, 0, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2**64 - 1,
                      -(2**63), 100_000]  # fmt: skip
_NAMED_STRS: Final = [
    "", " ", "a\x00b", "\x00", "T/X", "x" * 128, "y" * 5000, "-1", "99999999999999999999999",
    "1e3", "0x10", " 7 ", "true", "*", "||", "%RETRY%x", "%DLQ%x", "TBW102", "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC", "a@b", "é", "\u202e", "DELAY\x013\x02", "k\x01\x02", "NaN",
]  # fmt: skip

ints = st.one_of(st.sampled_from(_NAMED_INTS), st.integers(-(2**63), 2**64 - 1))
texts = st.one_of(
    st.sampled_from(_NAMED_STRS),
    st.text(max_size=40).filter(lambda s: CANARY not in s),
    ints.map(str),
)
header_values: st.SearchStrategy[object] = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=24),
    st.sampled_from([b"\xff\xfe", b"\x00", b"x" * 200]),
    texts,
)
"""Every type a command's header may carry, with the values that break parsers."""

wire_leaves = st.one_of(st.none(), st.booleans(), ints, st.floats(), st.binary(max_size=16), texts)
wire_values: st.SearchStrategy[object] = st.recursive(
    wire_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Anything msgpack can carry, nested (for bodies)."""


@st.composite
def broken_structures(draw: st.DrawFn, wire: object) -> object:
    """``wire`` (a body's msgpack object) with values replaced, dropped or retyped."""
    if isinstance(wire, dict):
        out = {}
        for key, value in wire.items():
            choice = draw(st.integers(0, 5))
            if choice == 0:
                continue
            out[key] = draw(wire_values) if choice == 1 else draw(broken_structures(value))
        return out
    if isinstance(wire, list):
        items = [draw(broken_structures(v)) for v in wire]
        return items * draw(st.sampled_from([1, 1, 0, 3]))
    return draw(st.one_of(st.just(wire), wire_values))


@st.composite
def hostile_bodies(draw: st.DrawFn, base: object) -> bytes:
    """A body derived from ``base``: kept, restructured, truncated, garbage or empty."""
    whole = packed(base)
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return whole
    if kind == 1 and not isinstance(base, bytes):
        return bytes(msgpack.packb(draw(broken_structures(base)), use_bin_type=True))
    if kind == 2 and whole:
        return whole[: draw(st.integers(0, len(whole) - 1))]
    if kind == 3:
        return bytes(msgpack.packb(draw(wire_values), use_bin_type=True))
    if kind == 4:
        return draw(st.binary(max_size=64))
    return b""


@st.composite
def hostile_headers(draw: st.DrawFn, base: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with one to three fields (its own or stray ones) dropped or given hostile
    values; the others stay valid, so the request gets as far as its broken field."""
    ext = dict(base)
    names = st.sampled_from(FIELD_NAMES)
    if base:
        names = st.one_of(st.sampled_from(sorted(base)), st.sampled_from(sorted(base)), names)
    for name in draw(st.lists(names, min_size=1, max_size=3)):
        if name in ext and draw(st.integers(0, 4)) == 0:
            del ext[name]
        else:
            ext[name] = draw(header_values)
    return ext


@st.composite
def hostile_requests(draw: st.DrawFn, codes: list[int]) -> tuple[int, dict[str, Any], bytes]:
    """(code, header, body) of a request for one of ``codes``."""
    code = draw(st.sampled_from(codes))
    header, body = BASE.get(code, ({}, b""))
    return code, draw(hostile_headers(header)), draw(hostile_bodies(body))


def no_long_poll(code: int, ext: dict[str, Any]) -> dict[str, Any]:
    """A pull that could park (a positive suspend time) is not a hostile input: drop it."""
    if code == C.PULL_MESSAGE and "suspendTimeoutMillis" in ext:
        ext = {**ext, "suspendTimeoutMillis": "0"}
    return ext


# ---------------------------------------------------------------------- the live servers


class Canary:
    """The well-behaved client: a send + pull round trip, and what was acknowledged."""

    def __init__(self, servers: LiveServers) -> None:
        self.servers = servers
        self.broker = WireClient(servers.broker_addr)
        self.namesrv = WireClient(servers.namesrv_addr)
        self.acked: list[tuple[int, bytes]] = []

    def round_trip(self) -> None:
        """Send one message to CANARY, pull it back by its offset; ask the name server."""
        body = f"canary-{len(self.acked)}".encode()  # + the b"\\n" after it in a record
        sent = self.broker.call(
            C.SEND_MESSAGE,
            {"producerGroup": "CanaryProducer", "topic": CANARY, "queueId": "0"},
            body,
        )
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        offset = int(str(sent.ext_fields["queueOffset"]))
        self.acked.append((offset, body))
        assert body in self._pull_found(offset, 1).body
        cluster = self.namesrv.call(C.GET_BROKER_CLUSTER_INFO)
        assert cluster.code == ResponseCode.SUCCESS, cluster.remark
        assert self.servers.alive()

    def assert_nothing_lost(self) -> None:
        """Every acknowledged message is still in CANARY at its offset (pulled from 0 on,
        each pull going on from the last one's ``nextBeginOffset``)."""
        stored = b""
        offset = 0
        while offset < len(self.acked):
            pulled = self._pull_found(offset, 32)
            stored += pulled.body
            offset = int(str(pulled.ext_fields["nextBeginOffset"]))
        for _, body in self.acked:
            assert body + b"\n" in stored, body

    def _pull_found(self, offset: int, count: int) -> RemotingCommand:
        """Pull until the messages are there (dispatch to the queue runs after the put)."""
        deadline = time.monotonic() + LIMIT
        while True:
            pulled = self.broker.call(C.PULL_MESSAGE, self._pull(offset, count))
            if pulled.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                assert pulled.code == ResponseCode.SUCCESS, pulled.remark
                return pulled
            time.sleep(0.005)

    @staticmethod
    def _pull(offset: int, count: int) -> dict[str, Any]:
        return {
            "consumerGroup": "CanaryGroup", "topic": CANARY, "queueId": "0",
            "queueOffset": str(offset), "maxMsgNums": str(count),
        }  # fmt: skip

    def close(self) -> None:
        self.broker.close()
        self.namesrv.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServers, Canary]]:
    """The live servers, TOPIC and CANARY created, a few messages (one half) in TOPIC."""
    root: Path = tmp_path_factory.mktemp("fuzz-live")
    servers = LiveServers(root, overrides={"diskMaxUsedSpaceRatio": "95"})
    servers.start()
    canary: Canary | None = None
    try:
        with wire_client(servers.broker_addr) as admin:
            for topic in (TOPIC, CANARY):
                made = admin.call(
                    C.UPDATE_AND_CREATE_TOPIC,
                    {"topic": topic, "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"},
                )
                assert made.code == ResponseCode.SUCCESS, made.remark
            _seed_topic(admin)
        canary = Canary(servers)
        canary.round_trip()
        yield servers, canary
    finally:
        if canary is not None:
            canary.close()
        servers.stop()


def _seed_topic(admin: WireClient) -> None:
    """Plain messages with keys and a half message in TOPIC, for pulls, queries, send-backs
    and END_TRANSACTION to find."""
    for n in range(3):
        props = encode_properties({"KEYS": "k", "TAGS": "a"}).decode()
        sent = admin.call(
            C.SEND_MESSAGE, {"producerGroup": "FuzzProducer", "topic": TOPIC, "queueId": "0",
                             "properties": props}, b"seed-%d" % n,
        )  # fmt: skip
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    props = encode_properties({"PGROUP": "FuzzProducer", "TRAN_MSG": "true"}).decode()
    half = admin.call(
        C.SEND_MESSAGE,
        {"producerGroup": "FuzzProducer", "topic": TOPIC, "queueId": "0", "sysFlag": "4",
         "properties": props},
        b"half",
    )  # fmt: skip
    assert half.code == ResponseCode.SUCCESS, half.remark


def codes_of(servers: LiveServers, which: str) -> list[int]:
    """The sorted codes the broker or the name server dispatches."""
    return sorted(servers.broker_codes if which == "broker" else servers.namesrv_codes)


def check_answer(request: str, answer: RemotingCommand) -> None:
    """An answer says what went wrong: a known code, and a remark unless it succeeded."""
    assert answer.code in KNOWN_CODES, f"{request}: unknown response code {answer.code}"
    if answer.code != ResponseCode.SUCCESS:
        assert answer.remark.strip(), f"{request}: error {answer.code} without a remark"
    assert "Traceback" not in answer.remark, f"{request}: {answer.remark}"


def check_quiet(servers: LiveServers, mark: int, request: str) -> None:
    """No error logged since ``mark`` (an unexpected exception in a handler logs one)."""
    errors = servers.errors_since(mark)
    assert not errors, f"{request}: the server logged {errors}"


# ---------------------------------------------------------------------- the properties


ONE_BAD_VALUE: Final[list[object]] = [
    None, True, -1, 0, 2**31, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), float("nan"), float("inf"),
    1.5, b"\xff", "", "a\x00b", "x" * 300, "-1", "99999999999999999999999", "T/X", "%RETRY%x",
]  # fmt: skip
"""Set one at a time in every field of every code's plausible header."""


def packed(body: object) -> bytes:
    """A body as sent: bytes as they are, a structure msgpack-packed."""
    return body if isinstance(body, bytes) else bytes(msgpack.packb(body, use_bin_type=True))


def one_field_broken(code: int) -> Iterator[tuple[dict[str, Any], bytes]]:
    """The code's plausible request with nothing, then with each field missing or holding
    each of :data:`ONE_BAD_VALUE` (the others valid); the body garbage for an empty header."""
    header, base_body = BASE.get(code, ({}, b""))
    body = packed(base_body)
    yield {}, b"\xc1"
    for name in header:
        yield {k: v for k, v in header.items() if k != name}, body
        for bad in ONE_BAD_VALUE:
            yield no_long_poll(code, {**header, name: bad}), body


@pytest.mark.parametrize("which", ["broker", "namesrv"])
def test_every_field_of_every_code_broken_alone_gets_an_error_answer(
    live: tuple[LiveServers, Canary], which: str
) -> None:
    servers, canary = live
    addr = servers.broker_addr if which == "broker" else servers.namesrv_addr
    with wire_client(addr) as client:
        for code in codes_of(servers, which):
            for ext, body in one_field_broken(code):
                mark = len(servers.records)
                request = f"code {code} {ext!r} body {body!r}"
                check_answer(request, client.call(code, ext, body))
                check_quiet(servers, mark, request)
            canary.round_trip()


@pytest.mark.parametrize("which", ["broker", "namesrv"])
def test_hostile_headers_and_bodies_get_an_error_answer_and_harm_nothing(
    live: tuple[LiveServers, Canary], which: str
) -> None:
    servers, canary = live
    addr = servers.broker_addr if which == "broker" else servers.namesrv_addr

    @bounded(500 if which == "broker" else 200)
    @given(hostile_requests(codes_of(servers, which)), st.sampled_from([0, 0, 4, 1 << 20]))
    def example(req: tuple[int, dict[str, Any], bytes], flag: int) -> None:
        code, ext, body = req
        ext = no_long_poll(code, ext)
        mark = len(servers.records)
        request = f"code {code} flag {flag} {ext!r} body {body!r}"
        with wire_client(addr) as client:
            opaque = client.next_opaque()
            client.send_frame(frame_of(command_map(code, opaque, ext, body, flag=flag)))
            answer = client.receive_response()
            assert answer is not None, f"{request}: connection closed instead of an answer"
            assert answer.opaque == opaque, f"{request}: answered {answer}"
            check_answer(request, answer)
        check_quiet(servers, mark, request)
        canary.round_trip()

    example()
    canary.assert_nothing_lost()


def _nested(depth: int) -> bytes:
    """A command map whose one header holds ``depth`` nested one-element arrays."""
    head = msgpack.packb({"code": int(C.GET_MAX_OFFSET), "opaque": 1})
    return b"\x83" + head[1:] + b"\xa9extFields\x81\xa1x" + b"\x91" * depth + b"\xc0"


def _declared(prefix: bytes, size: int) -> bytes:
    """A msgpack value whose header declares ``size`` entries/bytes, followed by only a few."""
    return prefix + size.to_bytes(4, "big") + b"\xa1a\x01\x02"


unacceptable_frames = st.one_of(
    # not a map at the top
    wire_values.filter(lambda v: not isinstance(v, dict)).map(frame_of),
    st.builds(lambda v: frame_of(msgpack.ExtType(5, v)), st.binary(max_size=8)),
    # a map that is not a command: a field of a type a command cannot hold
    st.builds(
        lambda v: frame_of(command_map(int(C.GET_MAX_OFFSET), 1, {"topic": v})),
        st.one_of(
            st.lists(wire_leaves, max_size=3),
            st.dictionaries(st.text(max_size=4), wire_leaves, min_size=1, max_size=3),
            st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8)),
        ),
    ),
    st.builds(
        lambda field, v: frame_of({**command_map(int(C.GET_MAX_OFFSET), 1), field: v}),
        st.sampled_from(["code", "opaque", "flag", "language", "version", "remark", "body"]),
        st.one_of(st.floats(), st.lists(ints, max_size=2), st.just(2**40)),
    ),
    st.builds(lambda k: frame_of(command_map(1, 1, {k: "v"})), ints),
    # nesting and declared lengths past the frame
    st.integers(200, 20_000).map(lambda d: frame_of(_nested(d))),
    st.builds(
        lambda p, n: frame_of(_declared(p, n)),
        st.sampled_from([b"\xdf", b"\xdd", b"\xc6", b"\xdb"]),  # map32, array32, bin32, str32
        st.integers(1 << 20, 2**32 - 1),
    ),
    # raw garbage, a frame cut short, a length past the maximum
    st.binary(min_size=1, max_size=64).map(lambda b: frame_of(b"\xc1" + b)),
    st.builds(
        lambda n: frame_of(msgpack.packb(command_map(int(C.GET_MAX_OFFSET), 1)))[:-n],
        st.integers(1, 20),
    ),
    st.integers(16 * 1024 * 1024 + 1, 2**32 - 1).map(lambda n: n.to_bytes(4, "big") + b"\x80"),
)


def test_unacceptable_frames_close_only_their_connection(
    live: tuple[LiveServers, Canary],
) -> None:
    servers, canary = live
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @bounded(300)
    @given(unacceptable_frames, st.sampled_from(["broker", "namesrv"]))
    def example(data: bytes, which: str) -> None:
        addr = servers.broker_addr if which == "broker" else servers.namesrv_addr
        mark = len(servers.records)
        with wire_client(addr) as client:
            client.send_frame(data)
            assert client.closed_by_server(), f"{data[:80]!r}: answered instead of closed"
        check_quiet(servers, mark, repr(data[:80]))
        canary.round_trip()

    example()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown < MAX_RSS_GROWTH_KB, f"peak memory grew by {grown} KiB"
    canary.assert_nothing_lost()


def test_requests_that_expect_no_answer_get_none_and_the_connection_goes_on(
    live: tuple[LiveServers, Canary],
) -> None:
    """Oneway requests (whatever their contents) and requests flagged as responses are never
    answered; the next real request on the same connection is."""
    servers, canary = live

    @bounded(200)
    @given(
        st.lists(
            st.tuples(
                hostile_requests(codes_of(servers, "broker")), st.sampled_from([1, 2, 3, -1])
            ),
            min_size=1,
            max_size=4,
        )
    )
    def example(silent: list[tuple[tuple[int, dict[str, Any], bytes], int]]) -> None:
        mark = len(servers.records)
        with wire_client(servers.broker_addr) as client:
            for (code, ext, body), flag in silent:
                ext = no_long_poll(code, ext)
                client.send_frame(
                    frame_of(command_map(code, client.next_opaque(), ext, body, flag=flag))
                )
            answer = client.call(C.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        check_quiet(servers, mark, repr(silent))
        canary.round_trip()

    example()


def test_pipelined_requests_sharing_one_opaque_are_each_answered(
    live: tuple[LiveServers, Canary],
) -> None:
    servers, canary = live
    pull_ahead = {**_PULL, "queueOffset": "1000"}  # nothing there: answered PULL_NOT_FOUND
    requests = [
        (C.GET_MAX_OFFSET, _QUEUE),
        (C.PULL_MESSAGE, _PULL),
        (C.PULL_MESSAGE, pull_ahead),
        (C.GET_ROUTEINFO_BY_TOPIC, {"topic": 5}),
        (C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, **_QUEUE, "commitOffset": "-1"}),
        (C.GET_BROKER_RUNTIME_INFO, {}),
        (4242, {}),
    ]
    with wire_client(servers.broker_addr) as client:
        client.send_frame(b"".join(frame_of(command_map(c, 7, ext)) for c, ext in requests))
        answers = [client.receive() for _ in requests]
    for (code, ext), answer in zip(requests, answers, strict=True):
        assert answer is not None, (code, ext)
        assert answer.opaque == 7, (code, ext)
        check_answer(f"code {code} {ext!r}", answer)
    canary.round_trip()


# ---------------------------------------------------------------------- what the fuzz found


def test_a_language_past_a_java_int_closes_the_connection(
    live: tuple[LiveServers, Canary],
) -> None:
    """Was answered as if valid: the fast check of a decoded command skipped the range of
    ``language`` (the wire rule: every int field fits a signed 32-bit int)."""
    servers, canary = live
    with wire_client(servers.broker_addr) as client:
        client.send_frame(frame_of({**command_map(int(C.GET_MAX_OFFSET), 1), "language": 2**40}))
        assert client.closed_by_server()
    canary.round_trip()


def test_cloning_offsets_to_a_group_holding_the_key_separator_is_refused(
    live: tuple[LiveServers, Canary],
) -> None:
    """Was SUCCESS, filing the copy under key ``FuzzTopic@x@y``: group ``y`` of topic
    ``FuzzTopic@x`` for every reader that splits keys (UPDATE_CONSUMER_OFFSET refuses it)."""
    servers, canary = live
    with wire_client(servers.broker_addr) as client:
        committed = client.call(
            C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "CloneSrc", **_QUEUE, "commitOffset": "1"}
        )
        assert committed.code == ResponseCode.SUCCESS, committed.remark
        for topic in (TOPIC, ""):
            cloned = client.call(
                C.CLONE_GROUP_OFFSET, {"srcGroup": "CloneSrc", "destGroup": "x@y", "topic": topic}
            )
            assert cloned.code == ResponseCode.SYSTEM_ERROR
            assert cloned.remark == "topic and group must not contain '@'"
        offsets = msgpack.unpackb(client.call(C.GET_ALL_CONSUMER_OFFSET).body, raw=False)
        assert not [key for key in offsets["offsetTable"] if key.count("@") > 1]
    canary.round_trip()
