"""Bad arguments to a producer fail at once, clearly, before any network call: not at the
first send, not after a route lookup, and never by sending a message whose outcome nobody
can learn."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from client import Producer as BlockingProducer
from client.aio import ClientInstance, Producer
from client.config import ClientConfig
from client.errors import MessageInvalidError, MQClientError
from client.message import Message, MessageQueue
from common.message import MessageConst
from tests.compiled import refused_type

TOPIC = "Orders"
UNROUTABLE = "127.0.0.1:1"
"""A name server nobody answers at: any network call fails with "no name server answered"."""


@asynccontextmanager
async def unrouted_producer() -> AsyncIterator[Producer]:
    config = ClientConfig(namesrv_addrs=(UNROUTABLE,), client_ip="127.0.0.1")
    async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
        yield p


BAD_OPTIONS = [
    ({"retry_times": 1.5}, TypeError),
    ({"retry_times": True}, TypeError),
    ({"retry_times": -1}, ValueError),
    ({"default_topic_queue_nums": 0}, ValueError),
    ({"default_topic_queue_nums": "8"}, TypeError),
    ({"compress_over": 4096.0}, TypeError),
    ({"max_message_size": 0}, ValueError),
    ({"send_timeout": "3"}, TypeError),
    ({"send_timeout": math.inf}, ValueError),
    ({"latency_fault_tolerance": "yes"}, TypeError),
    ({"retry_time": 2}, TypeError),  # a misspelt option
    ({"check_threads": 2}, TypeError),  # a transactional producer's option
]


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS)
@pytest.mark.parametrize("make", [Producer, BlockingProducer], ids=["aio", "blocking"])
def test_bad_producer_options_are_refused_when_made(
    options: dict[str, Any], error: type[Exception], make: Callable[..., object]
) -> None:
    name = next(iter(options))
    with pytest.raises(error, match=name):
        make("pg", UNROUTABLE, **options)


def test_good_producer_options_are_taken() -> None:
    p = Producer("pg", UNROUTABLE, send_timeout=1, retry_times=0, compress_over=0)
    assert (p.send_timeout, p.retry_times, p.compress_over) == (1, 0, 0)
    assert (p.max_message_size, p.default_topic_queue_nums) == (4 * 1024 * 1024, 8)
    assert BlockingProducer("pg", UNROUTABLE, send_timeout=2.5).send_timeout == 2.5


async def test_a_sharding_key_that_is_not_a_str_is_refused_before_the_route_lookup() -> None:
    async with unrouted_producer() as p:
        with pytest.raises(TypeError, match=refused_type("sharding_key must be a str")):
            await p.send_orderly(Message(TOPIC, b"x"), 42)  # type: ignore[arg-type]


async def test_an_orderly_message_is_checked_before_the_route_and_the_selector() -> None:
    chosen: list[object] = []

    def selector(queues: object, msg: object, arg: object) -> Any:
        chosen.append(queues)
        raise AssertionError("the selector ran for an invalid message")

    async with unrouted_producer() as p:
        with pytest.raises(MessageInvalidError, match="topic"):
            await p.send_orderly(Message("bad topic!", b"x"), "k")
        with pytest.raises(MessageInvalidError, match="length is zero"):
            await p.send_orderly(Message(TOPIC, b""), selector=selector)
        assert chosen == []
        with pytest.raises(MQClientError, match="no name server answered"):
            await p.send_orderly(Message(TOPIC, b"fine"), "k")  # valid: the route is asked


async def test_send_async_refuses_a_callback_it_could_not_call() -> None:
    async with unrouted_producer() as p:
        msg = Message(TOPIC, b"x")
        with pytest.raises(TypeError, match="callback must be callable"):
            p.send_async(msg, None)  # type: ignore[arg-type]
        assert MessageConst.UNIQ_KEY not in msg.properties  # refused before anything


def test_the_blocking_send_async_refuses_a_callback_it_could_not_call() -> None:
    with (
        BlockingProducer("pg", UNROUTABLE) as p,
        pytest.raises(TypeError, match="callback must be callable or None"),
    ):
        p.send_async(Message(TOPIC, b"x"), "not a function")  # type: ignore[arg-type]


SendCall = Callable[[Producer], Awaitable[object]]
NOT_MESSAGES: list[tuple[str, SendCall, str]] = [
    ("send", lambda p: p.send("hello"), "got str 'hello'"),  # type: ignore[arg-type]
    ("send to a queue", lambda p: p.send(b"x", queue=MessageQueue(TOPIC, "b", 0)), "got bytes"),  # type: ignore[arg-type]
    ("send_oneway", lambda p: p.send_oneway({"topic": TOPIC}), "got dict"),  # type: ignore[arg-type]
    ("send_orderly", lambda p: p.send_orderly(None, "key"), "got NoneType"),  # type: ignore[arg-type]
    ("batch item", lambda p: p.send_batch([Message(TOPIC, b"x"), "y"]), r"got str 'y' at \[1\]"),  # type: ignore[list-item]
    ("batch of one", lambda p: p.send_batch(Message(TOPIC, b"x")), "sequence of Messages"),  # type: ignore[arg-type]
]  # fmt: skip


@pytest.mark.parametrize(("what", "call", "names"), NOT_MESSAGES, ids=[c[0] for c in NOT_MESSAGES])
async def test_something_that_is_not_a_message_is_a_type_error_naming_it(
    what: str, call: SendCall, names: str
) -> None:
    """Not an AttributeError from deep inside, and before any network call (the name server
    does not answer: a lookup would fail with "no name server answered")."""
    async with unrouted_producer() as p:
        with pytest.raises(TypeError, match=names):
            await call(p)
        with pytest.raises(TypeError, match="got str"):
            p.send_async("hello", lambda result, error: None)  # type: ignore[arg-type]


def test_the_blocking_producer_refuses_what_is_not_a_message_with_a_type_error() -> None:
    with BlockingProducer("pg", UNROUTABLE) as p:
        with pytest.raises(TypeError, match="got str"):
            p.send("hello")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"at \[0\]"):
            p.send_batch([b"x"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="got int"):
            p.send_async(7)  # type: ignore[arg-type]
