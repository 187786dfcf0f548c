"""A second blocking ``close()`` while another thread closes: it waits for that close, except
where the closing thread cannot end without it, or where the closing thread is not there.

- A ``send_async`` callback closing its producer while the main thread closes it: the main
  thread's close waits for the callback thread (the last user stops it), so the callback's
  close must not wait for the main thread's. It did: the close stalled the callback thread's
  whole stop bound (5 s) and logged "callbacks still running".
- A forked child closing a client that a thread of its parent was closing at the fork: that
  thread is not in the child, so its close never ends there. The child's ``close()`` hung for
  ever (before the start/close state machine it returned at once, as it does again).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import trio

from client import ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage, SendResult
from client.aio import ConsumeFrom
from client.blocking import CLOSE_TIMEOUT_S
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster
from tests.client.test_push_close_abandon import send


def wait_until(cond: object, what: str) -> None:
    """Check ``cond()`` every 1 ms until true; fail after ``LIMIT`` seconds."""
    assert callable(cond)
    deadline = time.monotonic() + LIMIT
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


async def test_a_send_callback_closing_its_producer_while_it_closes_does_not_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:

        def run() -> list[str]:
            returned: list[str] = []
            producer = Producer("pg_cb_close", c.namesrv).start()

            def callback(result: SendResult | None, error: BaseException | None) -> None:
                wait_until(lambda: producer._closed, "the main thread's close")
                producer.close()
                returned.append("callback")

            producer.send_async(Message(TOPIC, b"x"), callback).result(LIMIT)
            producer.close()  # the last user: it stops the callback thread
            returned.append("main")
            return returned

        with caplog.at_level(logging.WARNING):
            assert await trio.to_thread.run_sync(run) == ["callback", "main"]
    assert not [r for r in caplog.records if "callbacks still running" in r.getMessage()]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
async def test_a_forked_child_closing_what_a_parent_thread_was_closing_returns(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await send(c.namesrv, TOPIC, 1)

        def run() -> int | None:
            entered, release = threading.Event(), threading.Event()

            def handler(msgs: list[ReceivedMessage]) -> ConsumeResult:
                entered.set()
                release.wait(LIMIT)  # holds the parent's close until the test ends
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                "cg_fork_close",
                c.namesrv,
                consume_from=ConsumeFrom.FIRST_OFFSET,
                await_termination_ms=60_000,
            ).start()
            closer = threading.Thread(target=consumer.close)
            try:
                consumer.subscribe(TOPIC, "*", handler)
                assert entered.wait(LIMIT)
                closer.start()
                wait_until(lambda: consumer._closed, "the parent thread's close")
                return close_in_child(consumer)
            finally:
                release.set()
                if closer.is_alive():
                    closer.join(LIMIT)

        assert await trio.to_thread.run_sync(run) == 0


def close_in_child(consumer: PushConsumer) -> int | None:
    """Fork; the child closes ``consumer`` and exits 0. The child's exit code (None: it had
    not exited after ``2 * CLOSE_TIMEOUT_S``, and was killed)."""
    pid = os.fork()
    if pid == 0:  # the child: only this thread is here
        try:
            consumer.close()
        finally:
            os._exit(0)
    deadline = time.monotonic() + 2 * CLOSE_TIMEOUT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None
