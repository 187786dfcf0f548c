"""The blocking facade's own promises: timeouts, errors before the network, close() returns.

The happy path of the blocking API runs against real processes in tests/e2e.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from client import (
    ClientConfig,
    ConsumeFromWhere,
    Message,
    MessageInvalidError,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    RequestTimeoutError,
    blocking,
)
from tests.broker.inprocess import wait_until


@pytest.fixture
def silent_namesrv() -> Iterator[str]:
    """A listening socket that accepts connections (via the backlog) but never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def _loop_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("minimq-client[")]


def test_send_times_out_against_a_silent_name_server(silent_namesrv: str) -> None:
    with Producer("pg", silent_namesrv) as producer:
        with pytest.raises(RequestTimeoutError):
            producer.send(Message("Orders", b"x"), timeout=0.3)
        with pytest.raises(MessageInvalidError):  # validation needs no network
            producer.send(Message("bad topic", b"x"), timeout=0.3)
    assert _loop_threads() == []


def test_producer_and_consumer_share_one_loop_thread(silent_namesrv: str) -> None:
    with Producer("pg", silent_namesrv), PullConsumer("cg", silent_namesrv):
        assert len(_loop_threads()) == 1
        assert blocking._shared[(silent_namesrv,)].users == 2
    assert _loop_threads() == []
    assert blocking._shared == {}


def test_a_client_config_gets_an_instance_of_its_own(silent_namesrv: str) -> None:
    config = ClientConfig.create(silent_namesrv, heartbeat_broker_interval_s=0.5)
    equal = ClientConfig.create(silent_namesrv, heartbeat_broker_interval_s=0.5)
    with (
        Producer("pg", silent_namesrv),
        Producer("pg2", client_config=config),
        PullConsumer("cg", client_config=equal),  # an equal config shares the instance
    ):
        assert len(_loop_threads()) == 2
        tuned = blocking._shared[config]
        assert tuned.users == 2
        assert tuned.instance.config.heartbeat_broker_interval_s == 0.5
        plain = blocking._shared[(silent_namesrv,)]
        assert plain.instance.config.heartbeat_broker_interval_s == 30.0
        assert plain.instance.client_id != tuned.instance.client_id
    assert _loop_threads() == []
    assert blocking._shared == {}
    with pytest.raises(ValueError, match="namesrv differs"):
        Producer("pg", "127.0.0.1:1", client_config=config)
    with pytest.raises(TypeError, match="client_config="):
        PullConsumer("cg", silent_namesrv, instance=object())


def test_poll_returns_empty_after_its_timeout_and_close_returns(silent_namesrv: str) -> None:
    consumer = PullConsumer(
        "cg", silent_namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    ).start()
    try:
        consumer.assign([MessageQueue("Orders", "broker-a", 0)])
        assert consumer.poll(timeout=0.2) == []
        with pytest.raises(MQClientError):
            consumer.committed(MessageQueue("Orders", "broker-a", 0), timeout=0.3)
    finally:
        consumer.close()
    consumer.close()  # idempotent
    with pytest.raises(MQClientError):
        consumer.poll(timeout=0.1)
    assert _loop_threads() == []


def test_poll_returns_empty_when_the_loop_stalled_past_its_deadlines(
    silent_namesrv: str,
) -> None:
    # a process stopped (SIGSTOP, a suspended laptop) while a poll waits: when it runs again,
    # the poll's own deadline and the blocking call's (timeout + slack) have both passed, and
    # trio hands the cancellation to the outer one; that is still a poll that found nothing
    timeout = 0.05
    with PullConsumer("cg", silent_namesrv) as consumer:
        consumer.assign([MessageQueue("Orders", "broker-a", 0)])
        inner = consumer._async
        assert inner is not None
        assert consumer._shared is not None

        def stop_the_loop() -> None:
            time.sleep(timeout + blocking.SLACK_S + 0.2)

        async def stall_once_the_poll_waits() -> None:
            await wait_until(lambda: inner._data.statistics().tasks_waiting > 0, "poll waits")
            stop_the_loop()

        stall = consumer._shared.loop.submit(stall_once_the_poll_waits)
        assert consumer.poll(timeout=timeout) == []
        stall.result(timeout=10)
        assert consumer.poll(timeout=timeout) == []
    assert _loop_threads() == []


def test_unreachable_name_server_fails_fast() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{sock.getsockname()[1]}"
    with Producer("pg", addr) as producer, pytest.raises(MQClientError, match="no name server"):
        producer.send(Message("Orders", b"x"), timeout=5.0)


def test_a_client_inherited_across_a_fork_fails_fast_and_closes(silent_namesrv: str) -> None:
    """The loop thread stays in the parent: in the child a call must fail at once (it used
    to wait for ever, its timeout enforced by the missing loop) and close() must return."""
    producer = Producer("pg", silent_namesrv).start()
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, and never return into pytest
            outcome = b"?"
            try:
                try:
                    producer.send(Message("Orders", b"x"), timeout=0.5)
                    outcome = b"sent"
                except RuntimeError as exc:
                    outcome = b"refused" if b"fork" in str(exc).encode() else b"other"
                errors: list[logging.LogRecord] = []
                handler = logging.Handler(logging.ERROR)
                handler.emit = errors.append  # type: ignore[method-assign]
                logging.getLogger("client").addHandler(handler)
                producer.close()  # nothing to close here: no error logged
                outcome += b" closed" + (b" but logged an error" if errors else b"")
            finally:
                os.write(write, outcome)
                os._exit(0)
        os.close(write)
        deadline = time.monotonic() + 10
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError("the forked child hung")
            time.sleep(0.01)
        assert os.read(read, 100) == b"refused closed"
        os.close(read)
    finally:
        producer.close()


def test_ctrl_c_during_close_reaches_the_caller_and_the_loop_is_released(
    silent_namesrv: str,
) -> None:
    """A KeyboardInterrupt while a close waits (on a slow or frozen broker, say) is not
    logged and swallowed: the shared loop is still released, then the caller gets it."""
    producer = Producer(group="pg", namesrv=silent_namesrv).start()
    shared = producer._shared
    assert shared is not None

    def interrupted(loop: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        producer._close(interrupted)
    assert not shared.loop.running
    with pytest.raises(MQClientError):  # ClientClosedError
        producer.send(Message("T", b"x"))


@pytest.mark.parametrize(
    ("timeout", "send_error", "read_error"),
    [
        (math.nan, ValueError, ValueError),
        ("2", TypeError, TypeError),
        (-1.0, ValueError, RequestTimeoutError),
        (0, ValueError, RequestTimeoutError),
    ],
)
def test_a_bad_timeout_fails_in_the_caller_and_the_loop_lives_on(
    silent_namesrv: str, timeout: object, send_error: type[Exception], read_error: type[Exception]
) -> None:
    """A bad timeout used to reach the shared loop, end it (every client of the process then
    said "is closed") and leave the caller waiting for ever. A send with no time to run (0 or
    less) is a caller's bug: ValueError before anything is sent, as the trio producer's
    ``send_timeout`` (it was a RequestTimeoutError, which says the outcome is unknown); a read
    such as fetch_queues just times out at once, as Kafka's ``Duration.ZERO``."""
    msg = Message("Orders", b"x")
    with Producer("pg", silent_namesrv) as producer, PullConsumer("cg", silent_namesrv) as other:
        for send in (producer.send, producer.send_oneway):
            with pytest.raises(send_error):
                send(msg, timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(send_error):
            producer.send_batch([msg], timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(read_error):
            other.fetch_queues("Orders", timeout=timeout)  # type: ignore[arg-type]
        assert other.poll(timeout=-1) == []
        with pytest.raises(RequestTimeoutError):  # the loop still serves: a real timeout
            other.fetch_queues("Orders", timeout=0.2)


def test_bad_client_timeouts_are_refused_when_made(silent_namesrv: str) -> None:
    with pytest.raises(ValueError, match="send_timeout must be > 0"):
        Producer("pg", silent_namesrv, send_timeout=-2).start()
    with pytest.raises(MQClientError, match="request_timeout_s must be a number of seconds > 0"):
        ClientConfig.create(silent_namesrv, request_timeout_s=-5)
    assert _loop_threads() == []
