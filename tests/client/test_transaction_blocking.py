"""The blocking transactional producer: what it refuses before any network call, the budget
of its half send, and closing while a check runs."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from client import Message, TransactionProducer
from client import transaction as aio_tx
from client.errors import MessageInvalidError, MQClientError
from client.loop_thread import LoopThread
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from tests.client.test_transaction import (
    UNREACHABLE,
    BlockedChecker,
    FakeBroker,
    check_request,
    never,
    refuse,
)

TOPIC = "Orders"


@contextmanager
def producer(**options: Any) -> Iterator[TransactionProducer]:
    with TransactionProducer("tx-pg", UNREACHABLE, checker=never, **options) as p:
        yield p


@pytest.mark.parametrize(
    "msg", [[Message(TOPIC, b"x")], (Message(TOPIC, b"x"),)], ids=["list", "tuple"]
)
def test_a_batch_is_refused_before_any_network_call(msg: object) -> None:
    with producer() as p, pytest.raises(MQClientError, match="cannot be sent as a batch"):
        p.send_in_transaction(msg, refuse)  # type: ignore[arg-type]


@pytest.mark.parametrize("execute", [None, 42], ids=["none", "not-callable"])
def test_an_execute_that_is_not_callable_is_refused_before_any_network_call(
    execute: object,
) -> None:
    with producer() as p, pytest.raises(MQClientError, match=r"tranExecutor is null|callable"):
        p.send_in_transaction(Message(TOPIC, b"x"), execute)  # type: ignore[arg-type]


def test_something_else_than_a_message_is_refused() -> None:
    with producer() as p, pytest.raises(MessageInvalidError, match="got bytes"):
        p.send_in_transaction(b"paid", refuse)  # type: ignore[arg-type]


def test_an_infinite_timeout_is_refused_up_front() -> None:
    """``timeout=math.inf`` used to be taken, then a failed send raised "cannot convert float
    NaN to integer"."""
    with producer() as p:
        for call in (
            lambda: p.send_in_transaction(Message(TOPIC, b"x"), refuse, timeout=math.inf),
            lambda: p.send(Message(TOPIC, b"x"), timeout=math.inf),
            lambda: p.send_batch([Message(TOPIC, b"x")], timeout=math.inf),
            lambda: p.send_orderly(Message(TOPIC, b"x"), "k", timeout=math.inf),
        ):
            with pytest.raises(ValueError, match="finite"):
                call()


def test_timeout_is_the_half_sends_whole_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """``send_in_transaction(timeout=T)`` used to give the half send the producer's
    ``send_timeout`` (3 s) whatever T said; now T is its budget, as ``send(timeout=T)``'s."""
    budgets: list[float | None] = []
    send_half = aio_tx.TransactionProducer.send_half

    async def spy(
        self: aio_tx.TransactionProducer, msg: Message, *, send_timeout: float | None = None
    ) -> Any:
        budgets.append(send_timeout)
        return await send_half(self, msg, send_timeout=send_timeout)

    monkeypatch.setattr(aio_tx.TransactionProducer, "send_half", spy)
    with producer(send_timeout=3.0) as p:
        with pytest.raises(MQClientError):  # the name server is unreachable
            p.send_in_transaction(Message(TOPIC, b"x"), refuse, timeout=10)
        with pytest.raises(MQClientError):
            p.send_in_transaction(Message(TOPIC, b"x"), refuse)
    assert budgets == [10, 3.0]


def test_close_abandons_a_running_check(caplog: pytest.LogCaptureFixture) -> None:
    """close() while the checker runs used to wait 10 s, log "closing the client instance
    failed" and abandon the loop thread: the check's answer is dropped anyway."""
    checker = BlockedChecker(hold_s=15.0)
    broker = FakeBroker()
    loop = LoopThread("fake-broker")
    loop.start()
    try:
        port = loop.start_service(broker.server.run, timeout=5.0)
        broker.addr = f"127.0.0.1:{port}"
        p = TransactionProducer("tx-pg", UNREACHABLE, checker=checker).start()
        try:
            ping = RemotingCommand.request(RequestCode.HEART_BEAT, {}, opaque=0)
            p._run(p._tx().instance.invoke, broker.addr, ping, timeout=5.0)
            (channel,) = broker.server.channels
            loop.run(channel.invoke_oneway, check_request("U-1", "tx-pg"), timeout=5.0)
            deadline = time.monotonic() + 10.0
            while checker.started == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert checker.started == 1
        except BaseException:
            p.close()
            raise
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            began = time.monotonic()
            p.close()
            took = time.monotonic() - began
        assert took < 5.0  # the checker holds on for 15 s
        assert not checker.release.is_set()
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert "did not stop" not in caplog.text
    finally:
        checker.release.set()
        loop.stop()


def test_the_checker_runs_in_the_producers_check_pool() -> None:
    """The pool options reach the trio producer."""
    with producer(check_threads=3, check_request_hold_max=7) as p:
        tx = p._tx()
        assert tx._check_limiter.total_tokens == 3
        assert tx.check_request_hold_max == 7
