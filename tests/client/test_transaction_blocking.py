"""The blocking transactional producer: what it refuses before any network call, and closing
while a check runs (the half send's budget: tests/e2e/test_call_budget.py)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from client import Message, TransactionProducer
from client.errors import MessageInvalidError, MQClientError
from tests.client.inproc_cluster import LIMIT, cluster
from tests.client.test_transaction import (
    PATIENT,
    UNKNOW,
    UNREACHABLE,
    BlockedChecker,
    never,
    refuse,
    returns,
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


async def test_close_abandons_a_running_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """close() while the checker runs used to wait 10 s, log "closing the client instance
    failed" and abandon the loop thread: the check's answer is dropped anyway."""
    checker = BlockedChecker()

    def run(namesrv: str) -> None:
        p = TransactionProducer("tx-pg", namesrv, checker=checker).start()
        try:
            result = p.send_in_transaction(Message(TOPIC, b"hung"), returns(UNKNOW))
            assert result.local_state is UNKNOW
            deadline = time.monotonic() + LIMIT
            while checker.started == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert checker.started == 1
        except BaseException:
            p.close()
            raise
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            p.close()
        assert checker.running == 1  # closed while the checker still held on
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert "did not stop" not in caplog.text

    try:
        async with cluster(tmp_path, brokers=("broker-a",), overrides=PATIENT) as c:
            await trio.to_thread.run_sync(run, c.namesrv)
    finally:
        checker.release.set()


def test_the_checker_runs_in_the_producers_check_pool() -> None:
    """The pool options reach the trio producer."""
    with producer(check_threads=3, check_request_hold_max=7) as p:
        tx = p._tx()
        assert tx._check_limiter.total_tokens == 3
        assert tx.check_request_hold_max == 7
