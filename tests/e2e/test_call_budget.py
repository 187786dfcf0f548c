"""A blocking consumer call's ``timeout=`` is its whole budget, as Kafka's
``committed(partitions, timeout)``: a broker that answers after the client's
``request_timeout_s`` but within that budget still gives the answer; without ``timeout=`` the
request timeout applies."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import trio

from client import (
    ClientConfig,
    LocalTransactionState,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    RequestTimeoutError,
    SendStatus,
    TransactionProducer,
)
from tests.e2e.cluster import create_topic, in_thread, running_cluster, wait_until

TOPIC = "E2E_Budget"
GROUP = "cg_e2e_budget"
REQUEST_TIMEOUT_S = 0.5
PAUSE_S = 3 * REQUEST_TIMEOUT_S
"""How long the broker is stopped while a budgeted call waits: past the request timeout."""
COMMIT = LocalTransactionState.COMMIT_MESSAGE


def send_three(namesrv: str) -> None:
    with Producer(group="pg_e2e_budget", namesrv=namesrv) as producer:
        for i in range(3):
            result = producer.send(
                Message(TOPIC, b"m%d" % i), queue=MessageQueue(TOPIC, "broker-a", 0)
            )
            assert result.status is SendStatus.SEND_OK


async def test_a_consumer_calls_timeout_outlasts_the_request_timeout(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
            ns, broker = cluster.namesrv_addr, cluster.brokers["broker-a"]
            await create_topic(broker.addr, TOPIC, 1)
            await in_thread(send_three, ns)
            mq = MessageQueue(TOPIC, "broker-a", 0)
            config = ClientConfig.create(ns, request_timeout_s=REQUEST_TIMEOUT_S)
            consumer = PullConsumer(GROUP, client_config=config, auto_commit=False).start()
            try:
                consumer.assign([mq])
                await in_thread(consumer.commit, {mq: 3})
                assert await in_thread(consumer.committed, mq) == 3
                os.kill(broker.proc.pid, signal.SIGSTOP)
                try:
                    with pytest.raises(RequestTimeoutError):  # no timeout=: the request's own
                        await in_thread(consumer.committed, mq)
                    answers: list[int | None] = []

                    async def budgeted() -> None:
                        answers.append(await in_thread(lambda: consumer.committed(mq, timeout=60)))

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(budgeted)
                        await trio.sleep(PAUSE_S)
                        os.kill(broker.proc.pid, signal.SIGCONT)
                finally:
                    os.kill(broker.proc.pid, signal.SIGCONT)
                assert answers == [3]
                await in_thread(lambda: consumer.commit({mq: 2}, timeout=60))
                assert await in_thread(consumer.committed, mq) == 2
            finally:
                await in_thread(consumer.close)


def send_in_transaction_when_told(
    namesrv: str, ready: threading.Event, go: threading.Event
) -> LocalTransactionState:
    """One transaction with an immediate commit, its half send given 60 s (the producer's
    ``send_timeout`` is the request timeout), sent once ``go`` is set."""
    with TransactionProducer(
        "pg_e2e_budget_tx", namesrv, checker=lambda msg: COMMIT, send_timeout=REQUEST_TIMEOUT_S
    ) as producer:
        producer.fetch_publish_queues(TOPIC)  # route and connection, before the broker stops
        ready.set()
        go.wait(60)
        result = producer.send_in_transaction(
            Message(TOPIC, b"tx"), lambda msg, arg: COMMIT, timeout=60
        )
        return result.local_state


async def test_send_in_transactions_timeout_outlasts_the_send_timeout(tmp_path: Path) -> None:
    """``send_in_transaction(timeout=T)`` gives its half send T, retries included, as
    ``send(timeout=T)`` does; it used to give it the producer's ``send_timeout``."""
    with trio.fail_after(90):
        async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
            ns, broker = cluster.namesrv_addr, cluster.brokers["broker-a"]
            await create_topic(broker.addr, TOPIC, 1)
            ready, go = threading.Event(), threading.Event()
            states: list[LocalTransactionState] = []

            async def transact() -> None:
                states.append(await in_thread(send_in_transaction_when_told, ns, ready, go))

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(transact)
                    await wait_until(ready.is_set, "the producer ready")
                    os.kill(broker.proc.pid, signal.SIGSTOP)
                    go.set()  # the half send waits on the stopped broker
                    await trio.sleep(PAUSE_S)
                    os.kill(broker.proc.pid, signal.SIGCONT)
            finally:
                go.set()
                os.kill(broker.proc.pid, signal.SIGCONT)
            assert states == [COMMIT]
