"""Long polling end to end: parked PULL_MESSAGE requests on an in-process BrokerController.

Every test runs under ``fail_after(30)`` with a 60 s suspend where the answer must come from an
arrival, so a pull answered by its timeout instead cannot pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from broker.controller import BrokerController
from broker.long_polling import SHORT_POLLING_MS, PullHoldTable, hold, suspend_seconds
from common.message import PULL_FLAG_SUSPEND
from common.record import decode_records
from common.route import TopicConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import Connection
from remoting.errors import RemotingError
from tests.broker.inprocess import broker_and_client, req, running_broker, send_req, wait_until

TOPIC = "TopicLongPoll"
SUSPEND_LONG = "60000"
CALL_TIMEOUT_S = 70.0
pytestmark = pytest.mark.timeout(60)


def pull_req(
    queue_id: int = 0,
    offset: int = 0,
    suspend: str = SUSPEND_LONG,
    sub: str = "*",
    sys_flag: int = PULL_FLAG_SUSPEND,
) -> RemotingCommand:
    return req(
        RequestCode.PULL_MESSAGE,
        consumerGroup="cg",
        topic=TOPIC,
        queueId=str(queue_id),
        queueOffset=str(offset),
        maxMsgNums="32",
        subscription=sub,
        sysFlag=str(sys_flag),
        suspendTimeoutMillis=suspend,
    )


def create_topic(broker: BrokerController, queues: int = 4) -> None:
    assert broker.topics is not None
    broker.topics.create_or_update(TopicConfig(TOPIC, queues, queues))


async def send(
    client: RemotingClient, addr: str, body: bytes, queue_id: int = 0, tag: str | None = None
) -> None:
    resp = await client.invoke(addr, send_req(TOPIC, body, queue_id, tag))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def answer_of_held_pull(
    broker: BrokerController,
    addr: str,
    client: RemotingClient,
    while_held: Callable[[], Awaitable[None]],
    request: RemotingCommand | None = None,
) -> RemotingCommand:
    """Send ``request`` (default :func:`pull_req`), wait until the broker holds it, run
    ``while_held``, then return the pull's answer."""
    answers: list[RemotingCommand] = []

    async def pull() -> None:
        pulled = request if request is not None else pull_req()
        answers.append(await client.invoke(addr, pulled, timeout_s=CALL_TIMEOUT_S))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pull)
        await wait_until(lambda: broker.holds.parked_count(TOPIC, 0) == 1, "parked")
        await while_held()
    (resp,) = answers
    return resp


# --------------------------------------------------------------------------- pure table


def test_table_notify_wakes_only_pulls_below_the_new_end() -> None:
    table = PullHoldTable()
    low = table.park("t", 0, 0)
    high = table.park("t", 0, 5)
    other = table.park("t", 1, 0)
    table.notify("t", 0, 1)
    assert low.wakeup.is_set()
    assert not high.wakeup.is_set()
    assert not other.wakeup.is_set()
    table.notify("nobody", 3, 100)  # no parked pulls: nothing happens
    for pull in (low, high, other):
        table.unpark(pull)
        table.unpark(pull)  # twice is harmless
    assert table.parked_count() == 0


def test_table_notify_does_not_wake_a_short_poll() -> None:
    table = PullHoldTable()
    short = table.park("t", 0, 0, wakes_on_arrival=False)
    table.notify("t", 0, 1)
    assert not short.wakeup.is_set()
    assert table.parked_count("t", 0) == 1


def test_table_counts_in_all_by_topic_and_by_queue() -> None:
    table = PullHoldTable()
    for topic, queue_id in (("t", 0), ("t", 0), ("t", 1), ("%RETRY%g", 0)):
        table.park(topic, queue_id, 0)
    assert table.parked_count() == 4
    assert table.parked_count("t") == 3
    assert table.parked_count("t", 0) == 2
    assert table.parked_count("%RETRY%g") == 1
    assert table.parked_count("none") == 0


# --------------------------------------------------------------------------- end to end


async def test_parked_pull_is_answered_by_a_later_message(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            create_topic(broker)

            async def send_late() -> None:
                await send(client, addr, b"late")

            resp = await answer_of_held_pull(broker, addr, client, send_late)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert [r.body for r in decode_records(resp.body)] == [b"late"]
            assert resp.ext_fields["nextBeginOffset"] == "1"
            assert broker.holds.parked_count() == 0


async def test_suspend_timeout_answers_not_found(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            create_topic(broker)
            resp = await client.invoke(addr, pull_req(suspend="200"))
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            assert resp.ext_fields["nextBeginOffset"] == "0"
            assert broker.holds.parked_count() == 0


async def test_tag_filtered_pull_ignores_non_matching_arrivals(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            create_topic(broker)
            answers: list[RemotingCommand] = []

            async def pull() -> None:
                resp = await client.invoke(addr, pull_req(sub="TagA"), timeout_s=CALL_TIMEOUT_S)
                answers.append(resp)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pull)
                await wait_until(lambda: broker.holds.parked_count(TOPIC, 0) == 1, "parked")
                await send(client, addr, b"b", tag="TagB")
                assert broker.store is not None
                store = broker.store
                await wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 1, "dispatch")
                # a round trip: the woken pull has re-read by now and must still be parked
                await client.invoke(addr, req(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId="0"))
                assert not answers
                assert broker.holds.parked_count(TOPIC, 0) == 1
                await send(client, addr, b"a", tag="TagA")
            (resp,) = answers
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert [(r.tags, r.body) for r in decode_records(resp.body)] == [("TagA", b"a")]
            assert resp.ext_fields["nextBeginOffset"] == "2"


async def test_closing_the_connection_drops_the_parked_pull(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, _):
            create_topic(broker)
            failures: list[Exception] = []
            async with RemotingClient() as other:

                async def pull() -> None:
                    try:
                        await other.invoke(addr, pull_req(), timeout_s=CALL_TIMEOUT_S)
                    except RemotingError as exc:
                        failures.append(exc)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pull)
                    await wait_until(lambda: broker.holds.parked_count() == 1, "parked")
                    await other.close_connection(addr)
                    await wait_until(lambda: broker.holds.parked_count() == 0, "dropped")
            assert len(failures) == 1


async def test_pulls_pipelined_past_the_connection_limit_are_answered_busy(
    tmp_path: Path,
) -> None:
    # the reliability plan's long-poll abuse: one connection cannot park pulls without bound
    overrides = {"serverMaxPendingRequestsPerConnection": "50"}
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=overrides) as (broker, addr),
            RemotingClient() as client,
        ):
            create_topic(broker)
            assert broker.server is not None
            limit = broker.server.pending_limit
            host, port = addr.rsplit(":", 1)
            flood = Connection(await trio.open_tcp_stream(host, int(port)))
            try:
                for opaque in range(1, 61):
                    cmd = pull_req()
                    await flood.send(cmd.with_opaque(opaque, cmd.flag))
                busy = [await flood.receive() for _ in range(10)]
                assert {(r.code, r.opaque) for r in busy if r is not None} == {
                    (ResponseCode.SYSTEM_BUSY, opaque) for opaque in range(51, 61)
                }
                await wait_until(lambda: broker.holds.parked_count() == 50, "50 parked")
                assert limit.pending == 50
                await send(client, addr, b"wakes them all")  # another client is served
                answers = [await flood.receive() for _ in range(50)]
                assert {r.code for r in answers if r is not None} == {ResponseCode.SUCCESS}
                await wait_until(lambda: limit.pending == 0, "nothing pending")
                cmd = pull_req(offset=1)
                await flood.send(cmd.with_opaque(61, cmd.flag))  # room again: parked
                await wait_until(lambda: broker.holds.parked_count() == 1, "parked again")
            finally:
                await flood.aclose()
            await wait_until(lambda: limit.pending == 0, "freed by the close")
            assert broker.holds.parked_count() == 0


async def test_each_queue_wakes_only_its_own_pulls(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            create_topic(broker, queues=4)
            answers: dict[int, RemotingCommand] = {}

            async def pull(queue_id: int) -> None:
                resp = await client.invoke(addr, pull_req(queue_id), timeout_s=CALL_TIMEOUT_S)
                answers[queue_id] = resp

            async with trio.open_nursery() as nursery:
                for queue_id in range(4):
                    nursery.start_soon(pull, queue_id)
                await wait_until(lambda: broker.holds.parked_count() == 4, "4 parked")
                await send(client, addr, b"q2", queue_id=2)
                await wait_until(lambda: 2 in answers, "queue 2 answered")
                assert set(answers) == {2}
                assert broker.holds.parked_count() == 3
                for queue_id in (0, 1, 3):
                    await send(client, addr, b"q%d" % queue_id, queue_id=queue_id)
            for queue_id, resp in answers.items():
                assert resp.code == ResponseCode.SUCCESS
                bodies = [r.body for r in decode_records(resp.body)]
                assert bodies == [b"q%d" % queue_id]


async def test_shutdown_does_not_wait_for_parked_pulls(tmp_path: Path) -> None:
    failures: list[Exception] = []
    with trio.fail_after(30):
        async with (
            RemotingClient() as client,
            trio.open_nursery() as nursery,
            broker_and_client(tmp_path) as (broker, addr, _),
        ):
            create_topic(broker)

            async def pull() -> None:
                try:
                    await client.invoke(addr, pull_req(), timeout_s=CALL_TIMEOUT_S)
                except RemotingError as exc:
                    failures.append(exc)

            nursery.start_soon(pull)
            await wait_until(lambda: broker.holds.parked_count() == 1, "parked")
    assert len(failures) == 1


async def test_pull_checks_topic_and_queue(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            resp = await client.invoke(addr, pull_req(suspend="0"))
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST
            create_topic(broker, queues=2)
            resp = await client.invoke(addr, pull_req(queue_id=2, suspend="0"))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "queueId[2] is illegal" in resp.remark
            assert broker.topics is not None
            broker.topics.create_or_update(TopicConfig(TOPIC, 2, 2, perm=2))  # write only
            resp = await client.invoke(addr, pull_req(suspend="0"))
            assert resp.code == ResponseCode.NO_PERMISSION


SHORT_POLLING_S = SHORT_POLLING_MS / 1000


@asynccontextmanager
async def short_polling_broker(
    tmp_path: Path, overrides: dict[str, str] | None = None
) -> AsyncIterator[tuple[BrokerController, str, RemotingClient]]:
    """A broker with ``longPollingEnable=false`` (and ``overrides``), its topic, and a client."""
    overrides = {"longPollingEnable": "false", **(overrides or {})}
    async with (
        running_broker(tmp_path, overrides=overrides) as (broker, addr),
        RemotingClient(default_timeout_s=CALL_TIMEOUT_S) as client,
    ):
        create_topic(broker)
        yield broker, addr, client


async def test_short_polling_is_not_ended_by_an_arrival(tmp_path: Path) -> None:
    """RocketMQ's store notifies arrivals only with long polling on: a short poll is answered
    after ``shortPollingTimeMills``, with what arrived meanwhile (it was answered at the
    arrival). Measured from before the pull was sent, so a slow machine only adds time."""
    with trio.fail_after(30):
        async with short_polling_broker(tmp_path) as (broker, addr, client):
            start = trio.current_time()

            async def send_while_held() -> None:
                await send(client, addr, b"during")

            resp = await answer_of_held_pull(broker, addr, client, send_while_held)
            assert trio.current_time() - start >= SHORT_POLLING_S
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert [r.body for r in decode_records(resp.body)] == [b"during"]
            assert broker.holds.parked_count() == 0


async def test_short_polling_holds_for_its_time_whatever_the_suspend_time(
    tmp_path: Path,
) -> None:
    """RocketMQ replaces the pull's suspend time by ``shortPollingTimeMills`` (it does not cap
    it): a pull asking for 200 ms is held for the short polling time."""
    with trio.fail_after(30):
        async with short_polling_broker(tmp_path) as (broker, addr, client):
            start = trio.current_time()
            resp = await client.invoke(addr, pull_req(suspend="200"))
            assert trio.current_time() - start >= SHORT_POLLING_S
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            assert broker.holds.parked_count() == 0


async def test_short_polling_holds_for_the_configured_short_polling_time(
    tmp_path: Path,
) -> None:
    """``shortPollingTimeMills`` (RocketMQ's BrokerConfig key) is the short-poll hold: with
    2500 ms, a pull asking for 200 ms is held 2.5 s, not the default 1 s, and is answered
    with the message that arrived meanwhile. Measured from before the pull was sent."""
    assert suspend_seconds(200, long_polling=False, short_polling_ms=2500) == 2.5
    assert suspend_seconds(0, long_polling=False, short_polling_ms=2500) == 0.0
    overrides = {"shortPollingTimeMills": "2500"}
    with trio.fail_after(30):
        async with short_polling_broker(tmp_path, overrides) as (broker, addr, client):
            start = trio.current_time()

            async def send_while_held() -> None:
                await send(client, addr, b"during")

            held = pull_req(suspend="200")
            resp = await answer_of_held_pull(broker, addr, client, send_while_held, held)
            assert trio.current_time() - start >= 2.5
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert [r.body for r in decode_records(resp.body)] == [b"during"]
            assert broker.holds.parked_count() == 0


async def test_safety_net_recheck_finds_a_missed_arrival(autojump_clock: trio.abc.Clock) -> None:
    """No notification at all: the periodic re-check still answers, at the check interval."""
    table = PullHoldTable()
    state = {"found": False}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:

        async def arrive_silently() -> None:
            await trio.sleep(1.0)
            state["found"] = True

        nursery.start_soon(arrive_silently)
        found = await hold(table, "t", 0, 0, 60.0, lambda: state["found"], bool, 5.0)
    assert found is True
    assert trio.current_time() - start == pytest.approx(5.0)
    assert table.parked_count() == 0


async def test_hold_answers_the_last_read_at_the_deadline(autojump_clock: trio.abc.Clock) -> None:
    table = PullHoldTable()
    start = trio.current_time()
    reads: list[int] = []

    def read() -> int:
        reads.append(1)
        return len(reads)

    # at once (after parking), then at 5, 10 and 12 s
    assert await hold(table, "t", 0, 0, 12.0, read, lambda n: False, 5.0) == 4
    assert trio.current_time() - start == pytest.approx(12.0)
    assert table.parked_count() == 0


async def test_a_message_stored_before_the_pull_parks_is_answered_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The pull's own read found nothing; a message stored before it parked woke nobody (the
    arrival came while nothing was parked): it is read right after parking, not at the next
    safety re-check 5 s later."""
    table = PullHoldTable()
    table.notify("t", 0, 1)  # the arrival, with nobody parked yet
    start = trio.current_time()
    assert await hold(table, "t", 0, 0, 60.0, lambda: True, bool, 5.0) is True
    assert trio.current_time() - start == 0
    assert table.parked_count() == 0


async def test_a_pull_without_the_suspend_flag_is_answered_at_once(tmp_path: Path) -> None:
    """RocketMQ holds a pull only with PullSysFlag's SUSPEND bit: its pull consumer's
    non-blocking ``pull()`` sends ``suspendTimeoutMillis=20000`` without it and gives up after
    10 s, so holding it for its 20 s would time every such pull of an empty queue out."""
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            create_topic(broker)
            java_pull = pull_req(suspend="600000", sys_flag=0x4)  # SUBSCRIPTION only
            resp = await client.invoke(addr, java_pull, timeout_s=CALL_TIMEOUT_S)
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            assert resp.ext_fields["nextBeginOffset"] == "0"
            assert broker.holds.parked_count() == 0


async def test_a_held_pull_whose_topic_is_deleted_is_answered_topic_not_exist(
    tmp_path: Path,
) -> None:
    """As RocketMQ re-runs a held request's checks: not PULL_OFFSET_MOVED to offset 0 from the
    read of a queue that is gone."""
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            create_topic(broker)
            await send(client, addr, b"first")

            async def delete_topic() -> None:
                delete = req(RequestCode.DELETE_TOPIC_IN_BROKER, topic=TOPIC)
                assert (await client.invoke(addr, delete)).code == ResponseCode.SUCCESS

            held = pull_req(offset=1, suspend="5000")
            resp = await answer_of_held_pull(broker, addr, client, delete_topic, held)
            assert (resp.code, resp.remark) == (
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{TOPIC}] not exist, apply first please!",
            )
            assert broker.holds.parked_count() == 0


async def test_a_held_pull_whose_topic_turns_write_only_is_refused(tmp_path: Path) -> None:
    """The message that wakes the pull is not handed out once the topic lost read permission."""
    with trio.fail_after(30):
        async with broker_and_client(tmp_path) as (broker, addr, client):
            create_topic(broker)

            async def make_write_only_then_send() -> None:
                assert broker.topics is not None
                broker.topics.create_or_update(TopicConfig(TOPIC, 4, 4, perm=2))  # write only
                await send(client, addr, b"not for readers")

            resp = await answer_of_held_pull(broker, addr, client, make_write_only_then_send)
            assert resp.code == ResponseCode.NO_PERMISSION
            assert resp.body == b""
