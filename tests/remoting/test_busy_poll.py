"""BusyPoll: spins for its window after each touch, parks when quiet, costs nothing when off."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from remoting.busy_poll import (
    DEFAULT_WINDOW_US,
    MIN_HIT_RATE,
    PROBE_EVERY,
    BusyPoll,
    SpinBudget,
    default_window_us,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.server import RemotingServer
from tests.broker.inprocess import wait_until

DEADLINE_S = 10.0


async def test_off_when_window_is_zero() -> None:
    poll = BusyPoll(0)
    assert not poll.enabled
    with trio.fail_after(DEADLINE_S):
        await poll.run()  # returns at once
    poll.touch()
    assert poll.spins == 0


async def test_parks_until_touched_then_spins_and_parks_again() -> None:
    poll = BusyPoll(0.002)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll.run)
        await trio.testing.wait_all_tasks_blocked()
        assert poll.parked
        assert poll.spins == 0

        poll.touch()
        assert not poll.parked
        await wait_until(lambda: poll.spins > 0, "spinning")
        await wait_until(lambda: poll.parked, "parked after the window")
        spun = poll.spins
        await trio.sleep(0.02)  # ten windows of quiet: no spinning at all
        assert poll.parked
        assert poll.spins == spun
        nursery.cancel_scope.cancel()


async def test_each_touch_extends_the_window() -> None:
    poll = BusyPoll(0.005)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll.run)
        await trio.testing.wait_all_tasks_blocked()
        poll.touch()
        # touching well within the window for longer than several windows: never parks
        for _ in range(20):
            await trio.sleep(0.001)
            assert not poll.parked
            poll.touch()
        await wait_until(lambda: poll.parked, "parked once the touches stop")
        nursery.cancel_scope.cancel()


def test_default_window_is_on_with_two_cores() -> None:
    assert default_window_us() in (0, DEFAULT_WINDOW_US)


async def test_server_and_client_poll_after_a_request_then_park() -> None:
    async def echo(request: RemotingCommand, _ctx: object) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=request.body)

    server = RemotingServer({int(RequestCode.GET_BROKER_CLUSTER_INFO): echo}, busy_poll_s=0.002)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        async with RemotingClient(busy_poll_s=0.002) as client:
            request = RemotingCommand.request(
                RequestCode.GET_BROKER_CLUSTER_INFO, opaque=0, body=b"ping"
            )
            response = await client.invoke(f"127.0.0.1:{port}", request, timeout_s=DEADLINE_S)
            assert response.body == b"ping"
            await wait_until(lambda: server.busy_poll.spins > 0, "server spun")
            await wait_until(lambda: client.busy_poll.spins > 0, "client spun")
            await wait_until(lambda: server.busy_poll.parked, "server parked")
            await wait_until(lambda: client.busy_poll.parked, "client parked")
        nursery.cancel_scope.cancel()


async def test_server_without_busy_poll_never_spins() -> None:
    async def echo(request: RemotingCommand, _ctx: object) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    server = RemotingServer({int(RequestCode.GET_BROKER_CLUSTER_INFO): echo})
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        async with RemotingClient() as client:
            request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=0)
            await client.invoke(f"127.0.0.1:{port}", request, timeout_s=DEADLINE_S)
        assert not server.busy_poll.enabled
        assert server.busy_poll.spins == 0
        nursery.cancel_scope.cancel()


def test_environment_overrides_the_default_window() -> None:
    assert default_window_us({"MINIMQ_BUSY_POLL_US": "0"}) == 0
    assert default_window_us({"MINIMQ_BUSY_POLL_US": "750"}) == 750
    for bad in ("-5", "soon", "1.5"):
        with pytest.raises(ValueError, match="MINIMQ_BUSY_POLL_US"):
            default_window_us({"MINIMQ_BUSY_POLL_US": bad})


async def test_client_polls_for_its_own_calls_only() -> None:
    async def echo(request: RemotingCommand, _ctx: object) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    pushed = trio.Event()

    def on_push(_request: RemotingCommand, _ctx: object) -> None:
        pushed.set()

    code = int(RequestCode.GET_BROKER_CLUSTER_INFO)
    push_code = int(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
    server = RemotingServer({code: echo}, busy_poll_s=0.002)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        async with RemotingClient(handlers={push_code: on_push}, busy_poll_s=0.002) as client:
            request = RemotingCommand.request(code, opaque=0)
            await client.invoke(f"127.0.0.1:{port}", request, timeout_s=DEADLINE_S)
            await wait_until(lambda: client.busy_poll.parked, "client parked")
            spun = client.busy_poll.spins
            assert spun > 0
            (channel,) = server.channels
            await channel.invoke_oneway(RemotingCommand.request(push_code, opaque=0))
            with trio.fail_after(DEADLINE_S):
                await pushed.wait()
            await trio.sleep(0.01)  # five windows: a touch would have shown as spins
            assert client.busy_poll.parked
            assert client.busy_poll.spins == spun
        nursery.cancel_scope.cancel()


def test_budget_polls_while_spells_are_useful_and_probes_once_they_are_not() -> None:
    budget = SpinBudget(min_hit_rate=0.1, probe_every=4, weight=0.5)
    for _ in range(10):  # a peer that answers within the window: always poll
        assert budget.should_spin()
        budget.record(useful=True)
    misses = 0
    while budget.should_spin():  # the peer got slow: poll until the share drops below 10 %
        budget.record(useful=False)
        misses += 1
    assert misses == 4  # 1 -> 0.5 -> 0.25 -> 0.125 -> 0.0625
    decisions = [budget.should_spin() for _ in range(8)]
    assert decisions == [False, False, True, False, False, False, True, False]
    budget.record(useful=True)  # a probe that was useful: poll again at once
    assert budget.hit_rate >= 0.1
    assert all(budget.should_spin() for _ in range(5))


def test_budget_defaults() -> None:
    budget = SpinBudget()
    assert (budget.min_hit_rate, budget.probe_every) == (MIN_HIT_RATE, PROBE_EVERY)
    assert budget.hit_rate == 1.0


async def test_poller_sits_out_spells_after_useless_ones_and_resumes_on_arrivals() -> None:
    poll = BusyPoll(0.005, SpinBudget(min_hit_rate=0.5, probe_every=3, weight=0.5))

    async def spell(*, arrival: bool) -> None:
        await wait_until(lambda: poll.parked, "parked")
        poll.touch()
        if arrival:  # a frame comes in once the spell is under way
            started = poll.spins
            for _ in range(10_000):  # the spell polls every pass of the loop: a few passes
                if poll.spins != started:
                    break
                await trio.lowlevel.checkpoint()
            assert poll.spins != started, "the spell never started"
            poll.arrived()
        await wait_until(lambda: poll.parked, "parked after the spell")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll.run)
        await spell(arrival=False)  # hit rate 1 -> 0.5: still polls
        await spell(arrival=False)  # 0.5 -> 0.25: below 0.5, stops polling
        spins = poll.spins
        await spell(arrival=False)
        await spell(arrival=False)
        assert poll.spells_skipped == 2
        assert poll.spins == spins  # sat out: no polling at all
        await spell(arrival=True)  # the third: a probe, and a frame makes it useful
        assert poll.spins > spins
        assert poll.budget.hit_rate >= 0.5
        await spell(arrival=False)
        assert poll.spells_skipped == 2  # back to polling every spell
        nursery.cancel_scope.cancel()
