"""DELETE_SUBSCRIPTIONGROUP's ``cleanOffset`` through an in-process broker (RocketMQ's
``AdminBrokerProcessor#deleteSubscriptionGroup`` / ``ConsumerOffsetManager#removeOffset``):
without it the group's committed offsets stay; with it they go, with the pull offsets kept for
``#Inflight``, and another group's stay."""

from __future__ import annotations

from pathlib import Path

import trio

from broker.consumer_offset import ConsumerOffsetManager
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from tests.broker.inprocess import req, running_broker
from tests.broker.pulls import pull_all, send

TOPIC = "T"


async def call(client: RemotingClient, addr: str, code: int, **fields: ExtValue) -> RemotingCommand:
    """One request; its response."""
    return await client.invoke(addr, req(code, b"", **fields))


async def commit(client: RemotingClient, addr: str, group: str, offset: int) -> None:
    resp = await call(
        client,
        addr,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        consumerGroup=group,
        topic=TOPIC,
        queueId="0",
        commitOffset=str(offset),
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def offsets_of(offsets: ConsumerOffsetManager, group: str) -> tuple[int, int]:
    """``(committed, pulled)`` offsets of ``group`` on queue 0 of TOPIC (-1: none)."""
    return offsets.query_offset(group, TOPIC, 0), offsets.query_pull_offset(group, TOPIC, 0)


async def test_clean_offset_removes_the_groups_offsets_only(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            offsets = broker.offsets
            assert offsets is not None
            for i in range(3):
                await send(client, addr, TOPIC, f"m{i}".encode())
            for group in ("g1", "g2"):
                assert len(await pull_all(client, addr, TOPIC, 0, group)) == 3
                await commit(client, addr, group, 1)
                assert offsets_of(offsets, group) == (1, 3)  # 2 in flight

            resp = await call(client, addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="g1")
            assert resp.code == ResponseCode.SUCCESS
            assert broker.groups is not None
            assert "g1" not in broker.groups
            assert offsets_of(offsets, "g1") == (1, 3)  # kept without cleanOffset

            resp = await call(
                client,
                addr,
                RequestCode.DELETE_SUBSCRIPTIONGROUP,
                groupName="g1",
                cleanOffset="true",
            )
            assert resp.code == ResponseCode.SUCCESS
            assert offsets_of(offsets, "g1") == (-1, -1)
            assert f"{TOPIC}@g1" not in offsets.to_wire()["offsetTable"]
            assert offsets_of(offsets, "g2") == (1, 3)

            # a bad cleanOffset deletes nothing: neither the config nor the offsets
            bad = await call(
                client,
                addr,
                RequestCode.DELETE_SUBSCRIPTIONGROUP,
                groupName="g2",
                cleanOffset="maybe",
            )
            assert bad.code == ResponseCode.SYSTEM_ERROR
            assert "cleanOffset" in (bad.remark or "")
            assert "g2" in broker.groups
            assert offsets_of(offsets, "g2") == (1, 3)
