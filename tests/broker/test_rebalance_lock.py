"""Queue locks for orderly consumption: the pure RebalanceLockManager table (injected clock) and
LOCK_BATCH_MQ / UNLOCK_BATCH_MQ through an in-process broker."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from broker.client_manager import ClientChannelInfo, ClientManager
from broker.processors.client import ClientService
from broker.rebalance_lock import REBALANCE_LOCK_MAX_LIVE_TIME_MS, RebalanceLockManager
from remoting.client import RemotingClient
from remoting.client_bodies import (
    LockBatchBody,
    LockedQueue,
    decode_lock_batch_response,
    encode_lock_batch,
)
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req, running_broker
from tests.conftest import ManualClock

Q0, Q1, Q2 = (LockedQueue("T", "broker-a", i) for i in range(3))


def test_max_live_time_is_rocketmqs() -> None:
    assert REBALANCE_LOCK_MAX_LIVE_TIME_MS == 60_000


def test_lock_is_exclusive_and_renewed_by_its_holder() -> None:
    clock = ManualClock()
    locks: RebalanceLockManager[LockedQueue] = RebalanceLockManager(clock_ms=clock)
    assert locks.try_lock_batch("g", [Q0, Q1], "c1") == {Q0, Q1}
    assert locks.try_lock_batch("g", [Q0, Q1, Q2], "c2") == {Q2}
    assert locks.holder("g", Q0) == "c1"
    assert locks.holder("g", Q2) == "c2"
    # renewal: c1 re-locks just before expiry, so 59 s later it still holds the queues
    clock.advance(59_000)
    assert locks.try_lock_batch("g", [Q0, Q1], "c1") == {Q0, Q1}
    clock.advance(59_000)
    assert locks.try_lock_batch("g", [Q0, Q1], "c2") == set()
    assert locks.is_locked("g", Q0, "c1")
    assert not locks.is_locked("g", Q0, "c2")
    # another group is independent
    assert locks.try_lock_batch("other", [Q0], "c2") == {Q0}


def test_lock_expires_after_max_live_time() -> None:
    clock = ManualClock()
    locks: RebalanceLockManager[LockedQueue] = RebalanceLockManager(clock_ms=clock)
    assert locks.try_lock_batch("g", [Q0], "c1") == {Q0}
    clock.advance(REBALANCE_LOCK_MAX_LIVE_TIME_MS)
    assert locks.try_lock_batch("g", [Q0], "c2") == set(), "still live at exactly 60 s"
    clock.advance(1)
    assert locks.holder("g", Q0) is None
    assert not locks.is_locked("g", Q0, "c1")
    assert locks.try_lock_batch("g", [Q0], "c2") == {Q0}
    assert locks.try_lock_batch("g", [Q0], "c1") == set()


def test_a_step_of_the_wall_clock_frees_no_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lock ages are measured on the monotonic clock (the default): the host's clock stepped
    ten minutes ahead (NTP, a resumed VM) must not hand an orderly queue to a second client
    while its holder still consumes it."""
    locks: RebalanceLockManager[LockedQueue] = RebalanceLockManager()
    assert locks.try_lock_batch("g", [Q0], "c1") == {Q0}
    wall = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: wall() + 600 * 10**9)
    assert locks.try_lock_batch("g", [Q0], "c2") == set()
    assert locks.holder("g", Q0) == "c1"


def test_a_step_of_the_wall_clock_drops_no_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for client liveness: a heartbeat's age is measured on the monotonic clock."""
    service = ClientService(ClientManager())
    channel = SimpleNamespace(closed=False)  # an open connection, as far as the scan asks
    info = ClientChannelInfo(channel, "c1@1", 0, 0, service.clock_ms())
    service.manager.register_producer("pg", info)
    wall = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: wall() + 600 * 10**9)
    assert service.scan_once() == set()
    assert service.manager.producer_ids("pg") == ["c1@1"]


def test_unlock_releases_only_the_holders_locks() -> None:
    clock = ManualClock()
    locks: RebalanceLockManager[LockedQueue] = RebalanceLockManager(clock_ms=clock)
    locks.try_lock_batch("g", [Q0, Q1], "c1")
    assert locks.unlock_batch("g", [Q0, Q1], "c2") == set()
    assert locks.holder("g", Q0) == "c1"
    assert locks.unlock_batch("g", [Q0], "c1") == {Q0}
    assert locks.try_lock_batch("g", [Q0, Q1], "c2") == {Q0}
    assert locks.unlock_batch("nobody", [Q0], "c1") == set()


async def lock(
    client: RemotingClient, addr: str, client_id: str, *mqs: LockedQueue
) -> set[LockedQueue]:
    body = encode_lock_batch(LockBatchBody("cg", client_id, mqs))
    resp = await client.invoke(addr, req(RequestCode.LOCK_BATCH_MQ, body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return set(decode_lock_batch_response(resp.body))


async def unlock(client: RemotingClient, addr: str, client_id: str, *mqs: LockedQueue) -> None:
    body = encode_lock_batch(LockBatchBody("cg", client_id, mqs))
    resp = await client.invoke(addr, req(RequestCode.UNLOCK_BATCH_MQ, body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_lock_and_unlock_requests(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            assert await lock(client, addr, "c1@1", Q0, Q1) == {Q0, Q1}
            assert await lock(client, addr, "c2@2", Q0, Q1, Q2) == {Q2}
            assert await lock(client, addr, "c1@1", Q0, Q1) == {Q0, Q1}, "renewal"
            await unlock(client, addr, "c2@2", Q0)  # not its lock: no effect
            assert await lock(client, addr, "c2@2", Q0) == set()
            await unlock(client, addr, "c1@1", Q0, Q1)
            assert await lock(client, addr, "c2@2", Q0, Q1) == {Q0, Q1}
            assert broker.locks.holder("cg", Q1) == "c2@2"
            # a body that is not a lock body is refused, not crashed on
            resp = await client.invoke(addr, req(RequestCode.LOCK_BATCH_MQ, b"\x93junk"))
            assert resp.code == ResponseCode.SYSTEM_ERROR
