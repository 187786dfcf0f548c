"""A send in flight when its producer closes fails with ClientClosedError (its cause: what
the close did to the request), not with what the cut request looked like ("no name server
answered", a broken connection)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio
import trio.testing

from client import Producer as BlockingProducer
from client.aio import LocalTransactionState, Producer, TransactionProducer
from client.errors import ClientClosedError, MQClientError
from client.message import Message
from tests.broker.inprocess import wait_until
from tests.processes import start_namesrv, stop_process

TOPIC = "Orders"


async def test_a_send_in_flight_when_the_producer_closes_is_told_so(tmp_path: Path) -> None:
    namesrv, addr = await start_namesrv(tmp_path / "namesrv.log")
    try:
        os.kill(namesrv.pid, signal.SIGSTOP)  # connections are taken, nothing answers
        failures: list[BaseException] = []

        async def send(p: Producer) -> None:
            with pytest.raises(MQClientError) as failed:
                await p.send(Message(TOPIC, b"x"), send_timeout=30)
            failures.append(failed.value)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery, Producer("pg", addr) as producer:
                nursery.start_soon(send, producer)
                await trio.testing.wait_all_tasks_blocked()  # its route lookup waits
    finally:
        await stop_process(namesrv)  # SIGKILL ends a stopped process too
    [failure] = failures
    assert isinstance(failure, ClientClosedError), failure
    assert failure.__cause__ is not None


async def test_a_half_message_in_flight_when_the_producer_closes_is_told_so(
    tmp_path: Path,
) -> None:
    namesrv, addr = await start_namesrv(tmp_path / "namesrv.log")
    try:
        os.kill(namesrv.pid, signal.SIGSTOP)
        failures: list[BaseException] = []

        async def send(p: TransactionProducer) -> None:
            with pytest.raises(MQClientError) as failed:
                await p.send_half(Message(TOPIC, b"x"), send_timeout=30)
            failures.append(failed.value)

        def checker(_msg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

        with trio.fail_after(30):
            async with (
                trio.open_nursery() as nursery,
                TransactionProducer("tpg", addr, checker=checker) as producer,
            ):
                nursery.start_soon(send, producer)
                await trio.testing.wait_all_tasks_blocked()
    finally:
        await stop_process(namesrv)
    [failure] = failures
    assert isinstance(failure, ClientClosedError), failure
    assert failure.__cause__ is not None


def connections_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:``port`` (Linux ``/proc/net/tcp``)."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    remote = f"0100007F:{port:04X}"
    return sum(1 for line in lines if line.split()[2] == remote and line.split()[3] == "01")


async def test_a_blocking_send_in_flight_when_another_thread_closes_is_told_so(
    tmp_path: Path,
) -> None:
    namesrv, addr = await start_namesrv(tmp_path / "namesrv.log")
    port = int(addr.rsplit(":", 1)[1])
    try:
        os.kill(namesrv.pid, signal.SIGSTOP)
        with BlockingProducer("pg", addr) as producer:
            failures: list[BaseException] = []

            def send() -> None:
                try:
                    producer.send(Message(TOPIC, b"x"), timeout=30)
                except MQClientError as exc:
                    failures.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, send)
                await wait_until(lambda: connections_to(port) > 0, "the route lookup")
                await trio.to_thread.run_sync(producer.close)
    finally:
        await stop_process(namesrv)
    [failure] = failures
    assert isinstance(failure, ClientClosedError), failure
