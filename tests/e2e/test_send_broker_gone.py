"""A broker whose address a route refresh dropped in the middle of a send is retried on
another broker, as RocketMQ's ``sendDefaultImpl`` retries the MQClientException "The
broker[...] not exist" that ``sendKernelImpl`` throws."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio
import trio.testing

from client.aio import ClientInstance, Producer
from client.config import ClientConfig
from client.errors import MQClientError
from client.message import Message
from tests.e2e.cluster import create_topic, running_cluster

TOPIC = "Orders"


async def test_a_broker_dropped_from_the_route_mid_send_is_retried_elsewhere(
    tmp_path: Path,
) -> None:
    failures: list[MQClientError] = []
    async with running_cluster(tmp_path, {"broker-g": {}, "broker-x": {}}) as c:
        gone, stuck = c.brokers["broker-g"], c.brokers["broker-x"]
        for broker in (gone, stuck):
            await create_topic(broker.addr, TOPIC, 2)
        config = ClientConfig.create(c.namesrv_addr, poll_name_server_interval_s=3600)
        async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
            route = await instance.topic_route(TOPIC)  # cached: both brokers take writes
            assert {b.broker_name for b in route.broker_datas} == {"broker-g", "broker-x"}
            await c.terminate(gone)  # it unregisters; the cached route still names it
            os.kill(stuck.proc.pid, signal.SIGSTOP)  # takes the connection, answers nothing

            async def send() -> None:
                with pytest.raises(MQClientError) as failed:
                    await p.send(Message(TOPIC, b"x"), avoid_broker="broker-g", send_timeout=60)
                failures.append(failed.value)

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send)
                    await trio.testing.wait_all_tasks_blocked()  # attempt 1 waits on broker-x
                    await instance.topic_route(TOPIC, refresh=True)
                    assert instance.broker_addr("broker-g") is None  # gone mid-send
                    await c.kill(stuck)  # attempt 1 fails; attempt 2 finds no broker-g
    [failure] = failures
    assert "The broker[broker-g] not exist" in str(failure)
    assert str(failure).startswith("CODE: -1  DESC: Send [3] times")  # retried after it
