"""A push consumer's start and close racing each other: a start cancelled half-way, a close
from another thread while it starts, two threads closing at once, Ctrl+C while it starts.

Before: a cancellation inside the trio start corrupted trio's cancel stack and left the group
registered (Ctrl+C in the blocking ``start()`` did that to the shared loop thread, and every
later start of the group failed "has been created before"); a ``close()`` during a
``start()`` returned at once and the consumer ran on for ever; a second ``close()`` returned
before the consumer had closed.
"""

from __future__ import annotations

import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from client import ClientClosedError, PushConsumer
from client.aio import ClientConfig, ClientInstance
from client.aio import PushConsumer as AioPushConsumer
from client.blocking import CLOSE_TIMEOUT_S, SharedInstance
from tests.client.inproc_cluster import cluster

GROUP = "cg_race"


@pytest.fixture
def silent_namesrv() -> Iterator[str]:
    """A listening socket that never answers: a start needs no name server's answer."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def loop_threads(namesrv: str) -> list[threading.Thread]:
    """The live loop threads of the shared instance of ``namesrv``."""
    return [t for t in threading.enumerate() if t.name == f"minimq-client[{namesrv}]"]


def wait_for(cond: Callable[[], object], what: str, limit: float = 2 * CLOSE_TIMEOUT_S) -> None:
    """Check ``cond()`` every 1 ms until true; fail after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


async def is_running(instance: ClientInstance) -> bool:
    """Whether the shared instance still serves (a call into its loop)."""
    return instance.running


async def test_a_start_cancelled_half_way_leaves_no_group_behind(tmp_path: Path) -> None:
    async with (
        cluster(tmp_path, brokers=("broker-a",)) as c,
        ClientInstance(ClientConfig.create(c.namesrv)) as instance,
    ):
        for _ in range(2):
            with trio.CancelScope() as scope:
                scope.cancel()
                async with AioPushConsumer(GROUP, instance=instance):
                    pass
            assert scope.cancelled_caught
        async with AioPushConsumer(GROUP, instance=instance) as consumer:
            assert consumer.closed.is_set() is False


def test_close_from_another_thread_while_starting_closes_the_consumer(
    silent_namesrv: str,
) -> None:
    consumer = PushConsumer(GROUP, silent_namesrv)
    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            consumer.start()
        except ClientClosedError as exc:  # closed while starting
            outcome.append(exc)
        else:
            outcome.append(None)

    starter = threading.Thread(target=start)
    starter.start()
    wait_for(lambda: loop_threads(silent_namesrv), "the start to make the loop thread")
    consumer.close()
    starter.join(2 * CLOSE_TIMEOUT_S)
    assert outcome, "start() did not return"
    assert loop_threads(silent_namesrv) == []  # the consumer was closed: nobody uses the loop
    with pytest.raises(ClientClosedError):
        consumer.subscribe("Orders", "*", lambda msgs: None)


def test_two_threads_closing_at_once_both_return_once_it_closed(silent_namesrv: str) -> None:
    with SharedInstance(silent_namesrv) as keeper:  # another user of the shared instance
        consumer = PushConsumer(GROUP, silent_namesrv).start()
        inner = consumer._async
        assert inner is not None
        barrier = threading.Barrier(2)
        closed_on_return: list[bool] = []
        errors: list[BaseException] = []

        def close() -> None:
            barrier.wait()
            try:
                consumer.close()
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                errors.append(exc)
            closed_on_return.append(inner.closed.is_set())

        closers = [threading.Thread(target=close) for _ in range(2)]
        for t in closers:
            t.start()
        for t in closers:
            t.join(2 * CLOSE_TIMEOUT_S)
        assert errors == []
        assert closed_on_return == [True, True]
        assert keeper.call(is_running, timeout=CLOSE_TIMEOUT_S)  # its user count intact


def test_ctrl_c_while_starting_leaves_no_consumer_behind(silent_namesrv: str) -> None:
    """SIGINT at random moments of ``start()``: whatever it interrupts, the group can start
    again on the same shared instance (kept alive by another user)."""
    main = threading.get_ident()
    rng = random.Random(7)
    with SharedInstance(silent_namesrv):
        for _ in range(20):
            sent = threading.Event()

            def interrupt() -> None:
                signal.pthread_kill(main, signal.SIGINT)
                sent.set()  # noqa: B023

            consumer = PushConsumer(GROUP, silent_namesrv)
            timer = threading.Timer(rng.uniform(0, 0.004), interrupt)
            try:
                timer.start()
                consumer.start()
                sent.wait(5)
                time.sleep(0.05)  # the signal is handled between two bytecodes after it came
            except KeyboardInterrupt:
                pass
            timer.join()
            consumer.close()
            again = PushConsumer(GROUP, silent_namesrv).start()  # raised "created before"
            again.close()
