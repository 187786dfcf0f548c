"""Two name servers, one of them hung (SIGSTOP) or dead (SIGKILL), with real processes.

- A producer started while the first name server of ``a;b`` is hung looks the topic's route up
  on the second (after one request timeout) and still has its whole ``send_timeout`` for
  sending: the first send succeeds.
- A send to a new topic (the broker creates it and registers it before answering) is not held
  up by the hung name server: the broker answers once the live one has the route.
- Fresh clients start at a random name server of the list, as RocketMQ's: not every new client
  (every ``mqadmin`` command) pays a timeout on a hung first one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import trio

from client import api
from client.aio import ClientConfig, ClientInstance, Message, Producer
from client.message import SendStatus
from tests.e2e.cluster import Cluster, create_topic

TOPIC = "NsFailover"


@asynccontextmanager
async def two_namesrv_cluster(tmp_path: Path, *brokers: str) -> AsyncIterator[Cluster]:
    """Two name servers and ``brokers``, each registered with both (``namesrvAddr=a;b``)."""
    cluster = Cluster(tmp_path)
    try:
        first = await cluster.start_namesrv()
        second = await cluster.start_namesrv()
        cluster.namesrv_addr = f"{first};{second}"
        for name in brokers:
            await cluster.start_broker(name)
        yield cluster
    finally:
        await cluster.aclose()


@contextmanager
def hung(proc: trio.Process) -> Iterator[None]:
    """SIGSTOP ``proc`` for the block; SIGCONT it whatever happens."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGCONT)


@asynccontextmanager
async def instance_asking_first(namesrv: str, first: str) -> AsyncIterator[ClientInstance]:
    """A running client instance of ``namesrv`` whose next name-server call goes to ``first``
    (fresh instances start at a random one; the one that answered stays the first asked)."""
    config = ClientConfig.create(namesrv, client_ip="127.0.0.1")
    for _ in range(64):
        async with ClientInstance(config) as instance:
            _, addr = await instance.invoke_namesrv(api.route_request("TBW102"))
            if addr == first:
                yield instance
                return
    raise AssertionError(f"no fresh client asked {first} first")


async def test_first_send_keeps_its_budget_when_the_first_namesrv_hangs(tmp_path: Path) -> None:
    async with two_namesrv_cluster(tmp_path, "broker-a") as cluster:
        await create_topic(cluster.brokers["broker-a"].addr, TOPIC, 4)
        first = cluster.namesrv_addr.split(";")[0]
        async with instance_asking_first(cluster.namesrv_addr, first) as instance:
            with hung(cluster.procs[0]):
                async with Producer(group="pg_ns_hung", instance=instance) as producer:
                    result = await producer.send(Message(TOPIC, b"first"))
        assert result.status is SendStatus.SEND_OK


async def test_send_to_a_new_topic_is_not_held_up_by_a_hung_namesrv(tmp_path: Path) -> None:
    async with two_namesrv_cluster(tmp_path, "broker-a") as cluster:
        with hung(cluster.procs[0]):
            async with Producer(group="pg_ns_new", namesrv=cluster.namesrv_addr) as producer:
                result = await producer.send(Message("NsFailoverNew", b"first"))
        assert result.status is SendStatus.SEND_OK


async def test_fresh_clients_start_at_a_random_namesrv(tmp_path: Path) -> None:
    async with two_namesrv_cluster(tmp_path) as cluster:
        config = ClientConfig.create(cluster.namesrv_addr, client_ip="127.0.0.1")
        answered: set[str] = set()
        for _ in range(24):  # both are asked first by some: all but certain (1 - 2**-23)
            async with ClientInstance(config) as instance:
                _, addr = await instance.invoke_namesrv(api.route_request("TBW102"))
                answered.add(addr)
        assert answered == set(cluster.namesrv_addr.split(";"))
