"""The blocking API against an in-process cluster: send_async callbacks and close, a send's
budget, and errors that name the user's topic."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import trio

from client import Message, Producer, SendResult, SendStatus, TopicRouteError
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster


async def test_a_send_async_callback_may_block_and_use_the_blocking_api(tmp_path: Path) -> None:
    """Callbacks run in the instance's callback thread: one that waits for another send, or
    sends, must not stop the loop every client of the process shares."""
    async with cluster(tmp_path) as c:

        def run() -> list[SendStatus]:
            statuses: list[SendStatus] = []
            finished = threading.Event()
            with Producer("pg", c.namesrv) as producer, Producer("pg2", c.namesrv) as other:

                def callback(result: SendResult | None, error: BaseException | None) -> None:
                    assert result is not None, error
                    follow_up = producer.send_async(Message(TOPIC, b"follow-up"))
                    statuses.append(follow_up.result(timeout=LIMIT).status)
                    statuses.append(producer.send(Message(TOPIC, b"in the callback")).status)
                    finished.set()

                producer.send_async(Message(TOPIC, b"first"), callback)
                statuses.append(other.send(Message(TOPIC, b"meanwhile"), timeout=LIMIT).status)
                assert finished.wait(LIMIT)
            return statuses

        assert await trio.to_thread.run_sync(run) == [SendStatus.SEND_OK] * 3


async def test_close_waits_for_the_accepted_send_async_calls(tmp_path: Path) -> None:
    """As the trio producer does: closing right after send_async calls used to cut them off
    with ClientClosedError (some may have been stored)."""
    async with cluster(tmp_path) as c:

        def run() -> list[BaseException | None]:
            with Producer("pg", c.namesrv) as producer:
                futures = [producer.send_async(Message(TOPIC, b"%d" % i)) for i in range(1000)]
            return [f.exception(timeout=LIMIT) for f in futures]

        errors = await trio.to_thread.run_sync(run)
        assert [e for e in errors if e is not None] == []


async def test_a_send_timeout_is_the_whole_budget_of_the_send(tmp_path: Path) -> None:
    """``send(msg, timeout=T)`` gives the send T, retries included, as RocketMQ's
    ``send(msg, timeout)``: it used to be cut to the producer's ``send_timeout``."""
    async with cluster(tmp_path) as c:

        def run() -> list[SendStatus]:
            with Producer("pg", c.namesrv, send_timeout=1e-6) as producer:  # no time at all
                message = Message(TOPIC, b"x")
                return [
                    producer.send(message, timeout=LIMIT).status,
                    producer.send_batch([Message(TOPIC, b"b")], timeout=LIMIT).status,
                    producer.send_orderly(message, "key", timeout=LIMIT).status,
                ]

        assert await trio.to_thread.run_sync(run) == [SendStatus.SEND_OK] * 3


async def test_a_topic_no_broker_creates_is_named_in_the_error(tmp_path: Path) -> None:
    async with cluster(tmp_path, overrides={"autoCreateTopicEnable": "false"}) as c:

        def run() -> None:
            with Producer("pg", c.namesrv) as producer:
                producer.send(Message("NoSuchTopic", b"x"))

        with pytest.raises(TopicRouteError, match="NoSuchTopic") as failed:
            await trio.to_thread.run_sync(run)
        assert failed.value.topic == "NoSuchTopic"


async def test_close_returns_after_the_callbacks_of_its_sends_ran(tmp_path: Path) -> None:
    """Callbacks still queued when close() returned used to be lost at the process's exit
    (a daemon thread): close waits for them (bounded)."""
    async with cluster(tmp_path) as c:

        def run() -> int:
            ran: list[int] = []

            def callback(result: SendResult | None, error: BaseException | None) -> None:
                time.sleep(0.005)  # a callback with some work in it
                ran.append(1)

            with Producer("pg", c.namesrv) as producer:
                for i in range(100):
                    producer.send_async(Message(TOPIC, b"%d" % i), callback)
            return len(ran)  # right after close(): every callback has run

        assert await trio.to_thread.run_sync(run) == 100
