"""BusyPoll: spins for its window after each touch, parks when quiet, costs nothing when off."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from remoting.busy_poll import DEFAULT_WINDOW_US, BusyPoll, default_window_us
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
