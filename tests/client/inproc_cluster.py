"""An in-process name server and brokers on 127.0.0.1 port 0 for the client's trio tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from broker.controller import BrokerController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import running_broker, running_namesrv

LIMIT = 30.0
TOPIC = "Orders"


@dataclass
class Cluster:
    namesrv: str
    brokers: dict[str, str] = field(default_factory=dict)
    controllers: dict[str, BrokerController] = field(default_factory=dict)
    scopes: dict[str, trio.CancelScope] = field(default_factory=dict)
    stopped: dict[str, trio.Event] = field(default_factory=dict)

    async def stop_broker(self, name: str) -> None:
        self.scopes[name].cancel()
        await self.stopped[name].wait()

    async def create_topic(self, topic: str, queues: int = 4) -> None:
        async with RemotingClient() as client:
            for addr in self.brokers.values():
                cmd = RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6},
                    opaque=0,
                )
                resp = await client.invoke(addr, cmd)
                assert resp.code == ResponseCode.SUCCESS, resp.remark

    async def run_broker(
        self,
        tmp_path: Path,
        name: str,
        overrides: dict[str, str] | None = None,
        *,
        task_status: trio.TaskStatus[None],
    ) -> None:
        self.stopped[name] = trio.Event()
        try:
            with trio.CancelScope() as self.scopes[name]:
                settings = {"brokerName": name, **(overrides or {})}
                async with running_broker(tmp_path / name, self.namesrv, overrides=settings) as (
                    controller,
                    addr,
                ):
                    self.brokers[name], self.controllers[name] = addr, controller
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            self.stopped[name].set()


@asynccontextmanager
async def cluster(
    tmp_path: Path,
    brokers: tuple[str, ...] = ("broker-a", "broker-b"),
    queues: int = 4,
    overrides: dict[str, str] | None = None,
) -> AsyncIterator[Cluster]:
    """A name server and ``brokers``, with TOPIC created on each with ``queues`` queues."""
    with trio.fail_after(LIMIT):
        async with running_namesrv() as namesrv, trio.open_nursery() as nursery:
            c = Cluster(namesrv)
            for name in brokers:
                await nursery.start(c.run_broker, tmp_path, name, overrides)
            await c.create_topic(TOPIC, queues)
            yield c
            nursery.cancel_scope.cancel()
