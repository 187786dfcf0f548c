"""Partitions between clients and a broker, through the loopback fault proxy (the reliability
plan's R8). The broker advertises the proxy's port (``advertisedPort``), so every client reaches
it through the proxy, as it would through a NAT or a load balancer.

- A blackhole (both ways) under a producer: sends to that broker time out and are reported as
  unknown outcomes, never as successes; with latency fault tolerance the producer moves to the
  other broker after one timeout; after the heal the broker takes sends again.
- A blackhole of the responses only: requests arrive and are stored, their answers come back
  late; the client drops the late answers and goes on.
- Resets and a blackhole under a push consumer: it reconnects and consumes everything; a
  blackhole longer than its pulls' timeout: the stale answers that arrive after the heal are
  dropped, and every message is consumed once.
- A group-mode pull consumer whose loop stalls while a rebalance round waits for a held
  answer: the round is abandoned until the stall's write-back is done, so nothing comes twice.

Every run is reconciled as in the plan's checker: no acknowledged message is lost, nothing is
stored that was not sent, and nothing is stored twice (the producer never resends a timed-out
message). The held requests of a blackhole reach the broker after the heal, so each unknown
outcome turns out stored ("recovered").

Real name server and brokers in process, real sockets on 127.0.0.1, short but real timeouts.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.controller import BrokerController
from client.aio import (
    ClientConfig,
    ClientInstance,
    ConsumeFrom,
    ConsumeFromWhere,
    Producer,
    PullConsumer,
    PushConsumer,
)
from client.consume_service import ConsumeResult
from client.errors import MQClientError, RequestTimeoutError
from client.message import Message, MessageQueue, ReceivedMessage, SendStatus
from common.message_id import decode_offset_msg_id
from remoting.client import RemotingClient
from remoting.client_bodies import LockedQueue
from remoting.codes import RequestCode, ResponseCode
from tests.broker.fault_proxy import FaultProxy
from tests.broker.inprocess import LIMIT, req, running_broker, running_namesrv, wait_until

TOPIC = "PartitionOrders"
QUEUES = 2
SEND_TIMEOUT_S = 1.0
pytestmark = pytest.mark.timeout(120)


@dataclass
class Broker:
    name: str
    controller: BrokerController
    addr: str
    """Where clients reach it: the proxy's address when there is one."""
    proxy: FaultProxy | None = None

    def stored(self) -> int:
        """Messages of TOPIC in the broker's consume queues."""
        store = self.controller.store
        assert store is not None
        return sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES))


@dataclass
class History:
    """What a producer was told, by message body."""

    attempted: list[bytes] = field(default_factory=list)
    acked: dict[bytes, str] = field(default_factory=dict)
    """body -> broker name of each SEND_OK."""
    positions: dict[bytes, tuple[str, int, int]] = field(default_factory=dict)
    """body -> (broker, queue, queue offset) the SEND_OK reported."""
    store_hosts: set[tuple[str, int]] = field(default_factory=set)
    """The broker addresses the SEND_OKs' offset message ids carry."""
    unknown: list[bytes] = field(default_factory=list)
    """Sends that failed without an answer (timed out): stored or not, nobody knows."""

    async def send(self, producer: Producer, body: bytes) -> None:
        self.attempted.append(body)
        try:
            result = await producer.send(Message(TOPIC, body))
        except MQClientError:
            self.unknown.append(body)
        else:
            assert result.status is SendStatus.SEND_OK, result
            self.acked[body] = result.queue.broker_name
            self.positions[body] = position(result.queue, result.queue_offset)
            self.store_hosts.add(decode_offset_msg_id(result.offset_msg_id)[:2])


@dataclass
class Cluster:
    namesrv: str
    brokers: dict[str, Broker]

    def proxied(self, name: str = "broker-a") -> tuple[Broker, FaultProxy]:
        """The broker ``name`` and the proxy in front of it."""
        broker = self.brokers[name]
        assert broker.proxy is not None
        return broker, broker.proxy


@asynccontextmanager
async def brokers(tmp_path: Path, proxied: dict[str, bool]) -> AsyncIterator[Cluster]:
    """A name server and one broker per name, those marked True behind a :class:`FaultProxy`
    whose port they advertise; TOPIC created on each with :data:`QUEUES` queues."""
    async with running_namesrv() as namesrv, trio.open_nursery() as nursery:
        out: dict[str, Broker] = {}
        for name, behind_proxy in proxied.items():
            out[name] = await nursery.start(
                run_broker, tmp_path / name, namesrv, name, behind_proxy
            )
        async with RemotingClient() as client:
            for b in out.values():
                create = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=TOPIC, perm="6",
                             readQueueNums=str(QUEUES), writeQueueNums=str(QUEUES))  # fmt: skip
                assert (await client.invoke(b.addr, create)).code == ResponseCode.SUCCESS
        yield Cluster(namesrv, out)
        nursery.cancel_scope.cancel()


async def run_broker(
    tmp_path: Path,
    namesrv: str,
    name: str,
    behind_proxy: bool,
    *,
    task_status: trio.TaskStatus[Broker],
) -> None:
    overrides = {"brokerName": name}
    async with trio.open_nursery() as nursery:
        proxy = None
        if behind_proxy:
            proxy = FaultProxy()
            overrides["advertisedPort"] = str(await nursery.start(proxy.run))
        async with running_broker(tmp_path, namesrv, overrides=overrides) as (controller, addr):
            if proxy is not None:
                proxy.upstream = ("127.0.0.1", controller.port or 0)
                addr = proxy.address
            assert controller.broker_addr == addr  # what the name server tells clients
            task_status.started(Broker(name, controller, addr, proxy))
            await trio.sleep_forever()


def stall_loop(seconds: float) -> None:
    """Block the event loop (everything in this process) for ``seconds``, as a frozen process."""
    time.sleep(seconds)


def position(mq: MessageQueue, queue_offset: int) -> tuple[str, int, int]:
    return mq.broker_name, mq.queue_id, queue_offset


@dataclass
class Stored:
    """What the brokers hold: how often each body, and the body at each position."""

    bodies: Counter[bytes] = field(default_factory=Counter)
    at: dict[tuple[str, int, int], bytes] = field(default_factory=dict)


async def stored_messages(cluster: Cluster, count: int) -> Stored:
    """Every message of TOPIC, read back through the (healed) proxies, once ``count`` are
    stored."""
    namesrv, live = cluster.namesrv, list(cluster.brokers.values())
    await wait_until(lambda: sum(b.stored() for b in live) >= count, f"{count} stored")
    total = sum(b.stored() for b in live)
    got = Stored()
    async with PullConsumer(
        "cg_check", namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    ) as consumer:
        consumer.assign(await consumer.fetch_queues(TOPIC))
        with trio.fail_after(30):
            while len(got.at) < total:
                for m in await consumer.poll():
                    got.bodies[m.body] += 1
                    got.at[position(m.queue, m.queue_offset)] = m.body
    return got


def reconcile(history: History, stored: Stored) -> None:
    """The plan's checks: lost_store, unexpected and dup_in_log are all zero, and each SEND_OK
    named the position its own message is stored at (no answer went to the wrong call)."""
    bodies = stored.bodies
    assert set(history.acked) - set(bodies) == set(), "acknowledged but lost"
    assert set(bodies) - set(history.attempted) == set(), "stored but never sent"
    assert [b for b, n in bodies.items() if n > 1] == [], "stored twice"
    assert len(set(history.attempted)) == len(history.attempted)
    assert {b: stored.at.get(p) for b, p in history.positions.items()} == {
        b: b for b in history.positions
    }, "a SEND_OK reported another message's position"


@pytest.mark.parametrize("fault_tolerance", [False, True])
async def test_a_blackholed_broker_costs_timeouts_never_false_successes(
    tmp_path: Path, fault_tolerance: bool
) -> None:
    with trio.fail_after(90):
        async with brokers(tmp_path, {"broker-a": True, "broker-b": False}) as cluster:
            namesrv, (_, proxy) = cluster.namesrv, cluster.proxied()
            history = History()
            async with Producer(
                "pg", namesrv, send_timeout=SEND_TIMEOUT_S, latency_fault_tolerance=fault_tolerance
            ) as producer:
                for i in range(10):
                    await history.send(producer, b"before-%d" % i)
                assert set(history.acked.values()) == {"broker-a", "broker-b"}
                proxy.blackhole()
                for i in range(8):
                    await history.send(producer, b"during-%d" % i)
                during = [b for b in history.attempted if b.startswith(b"during")]
                assert all(history.acked.get(b, "broker-b") == "broker-b" for b in during)
                timed_out = len(history.unknown)
                if fault_tolerance:
                    assert timed_out == 1  # then broker-a sits out its isolation
                else:
                    assert timed_out == 4  # round robin: every other send went to broker-a
                proxy.heal()
                if fault_tolerance:  # isolated: sends go on at once, to broker-b
                    for i in range(4):
                        await history.send(producer, b"after-%d" % i)
                    assert len(history.unknown) == timed_out
                else:  # at once back in the rotation
                    for i in range(4):
                        await history.send(producer, b"after-%d" % i)
                    assert len(history.unknown) == timed_out
                    assert {history.acked[b"after-%d" % i] for i in range(4)} == {
                        "broker-a",
                        "broker-b",
                    }
            # the held requests reach broker-a after the heal: every unknown turns out stored
            stored = await stored_messages(cluster, len(history.attempted))
            reconcile(history, stored)
            assert set(history.unknown) <= set(stored.bodies)


async def test_lost_responses_are_unknown_outcomes_and_the_requests_are_stored(
    tmp_path: Path,
) -> None:
    with trio.fail_after(90):
        async with brokers(tmp_path, {"broker-a": True}) as cluster:
            namesrv, (a, proxy) = cluster.namesrv, cluster.proxied()
            history = History()
            async with Producer("pg", namesrv, send_timeout=SEND_TIMEOUT_S) as producer:
                await history.send(producer, b"before")
                proxy.blackhole("responses")
                for i in range(3):
                    await history.send(producer, b"during-%d" % i)
                assert len(history.unknown) == 3  # no answer: not a success, not a failure
                # the broker got and stored them all the same
                await wait_until(lambda: a.stored() == 4, "the unanswered sends stored")
                proxy.heal()  # the late answers arrive and are dropped
                for i in range(3):
                    await history.send(producer, b"after-%d" % i)
                assert len(history.acked) == 4
                # message ids name the advertised address, so a lookup by id goes through it
                assert history.store_hosts == {("127.0.0.1", proxy.port)}
            stored = await stored_messages(cluster, len(history.attempted))
            reconcile(history, stored)
            assert set(stored.bodies) == set(history.attempted)


async def test_a_send_that_timed_out_everywhere_says_its_outcome_is_unknown(
    tmp_path: Path,
) -> None:
    """No answer to any attempt: the message may be stored, which the caller must be able to
    tell from a refusal: a RequestTimeoutError with the last failure as its cause."""
    with trio.fail_after(60):
        async with brokers(tmp_path, {"broker-a": True}) as cluster:
            namesrv, (a, proxy) = cluster.namesrv, cluster.proxied()
            async with Producer("pg", namesrv, send_timeout=SEND_TIMEOUT_S) as producer:
                await producer.send(Message(TOPIC, b"before"))
                proxy.blackhole("responses")
                with pytest.raises(RequestTimeoutError) as single:
                    await producer.send(Message(TOPIC, b"single"))
                assert isinstance(single.value.__cause__, RequestTimeoutError)
                with pytest.raises(RequestTimeoutError) as batch:
                    await producer.send_batch([Message(TOPIC, b"b1"), Message(TOPIC, b"b2")])
                assert isinstance(batch.value.__cause__, RequestTimeoutError)
                await wait_until(lambda: a.stored() == 4, "the unanswered sends stored")
                proxy.heal()


async def test_an_orderly_lock_renewal_that_gets_no_answer_changes_nothing(
    tmp_path: Path,
) -> None:
    """A renewal the broker did not answer says nothing about the locks (RocketMQ leaves their
    state alone): a queue with messages pulled and not consumed yet keeps its position, and
    is not started again from the broker's older stored offset (they would come twice)."""
    with trio.fail_after(90):
        async with brokers(tmp_path, {"broker-a": True}) as cluster:
            namesrv, (_, proxy) = cluster.namesrv, cluster.proxied()
            mq = MessageQueue(TOPIC, "broker-a", 0)
            got: list[bytes] = []
            entered, release = threading.Event(), threading.Event()

            def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
                if not got:
                    entered.set()
                    release.wait(LIMIT)
                got.extend(m.body for m in msgs)
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                "og",
                namesrv,
                orderly=True,
                consume_from=ConsumeFrom.FIRST_OFFSET,
                persist_interval=3600,  # the broker keeps the start offset meanwhile
            )
            consumer.subscribe(TOPIC, "*", handle)
            async with consumer, Producer("pg", namesrv) as producer:
                await producer.send(Message(TOPIC, b"m0"), queue=mq)
                await wait_until(entered.is_set, "m0 in the handler")
                for i in range(1, 6):
                    await producer.send(Message(TOPIC, b"m%d" % i), queue=mq)
                pq = consumer._queues[mq].slot.pq  # waiting for the pulls
                await wait_until(lambda: pq.count >= 5, "m1..m5 pulled, waiting")
                proxy.blackhole()
                await consumer.lock_all()  # no answer: a timeout
                proxy.heal()
                release.set()
                await wait_until(lambda: len(got) >= 6, "all six")
                await consumer.lock_all()
                await producer.send(Message(TOPIC, b"m6"), queue=mq)
                await wait_until(lambda: b"m6" in got, "m6")
            assert got == [b"m%d" % i for i in range(7)]  # in order, nothing twice


async def test_a_close_during_a_lock_whose_answer_is_held_unlocks_what_it_locked(
    tmp_path: Path,
) -> None:
    """An orderly consumer closed while its first round waits for a LOCK_BATCH_MQ answer that
    the network holds (the broker has locked the queues already): the close unlocks them, on
    that broker and on the one that answered before it, so another member can take every
    queue at once instead of after the broker's 60 s lock expiry."""
    with trio.fail_after(90):
        async with brokers(tmp_path, {"broker-a": False, "broker-b": True}) as cluster:
            namesrv, (_, proxy) = cluster.namesrv, cluster.proxied("broker-b")
            # the heartbeat and the member list asked of broker-b time out first (5 s each);
            # then the lock request the test closes on waits 5 s for its held answer
            config = ClientConfig.create(namesrv, request_timeout_s=5.0)
            instance = ClientInstance(config)
            consumer = PushConsumer("lg", namesrv, instance=instance, orderly=True)
            consumer.subscribe(TOPIC, "*", lambda msgs: ConsumeResult.SUCCESS)
            queues = [
                LockedQueue(TOPIC, b.name, q) for b in cluster.brokers.values() for q in range(2)
            ]

            def holders() -> set[str | None]:
                return {
                    cluster.brokers[mq.broker_name].controller.locks.holder("lg", mq)
                    for mq in queues
                }

            proxy.blackhole("responses")  # requests arrive and are acted on, answers are held
            async with instance, consumer:
                await wait_until(lambda: holders() == {instance.client_id}, "all locked")
                assert consumer.assignment() == []  # the round still waits for broker-b
            proxy.heal()
            assert holders() == {None}


async def test_a_push_consumer_rides_out_resets_and_a_blackhole(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with brokers(tmp_path, {"broker-a": True}) as cluster:
            namesrv, (a, proxy) = cluster.namesrv, cluster.proxied()
            holds = a.controller.holds
            got: list[bytes] = []

            async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
                got.extend(m.body for m in msgs)
                await trio.sleep(0.001)  # slow enough for the resets to land mid-consumption
                return ConsumeResult.SUCCESS

            history = History()
            async with Producer("pg", namesrv) as producer:
                for i in range(300):
                    await history.send(producer, b"backlog-%d" % i)
            consumer = PushConsumer(
                "cg", namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, pull_batch_size=8
            )
            consumer.subscribe(TOPIC, "*", handle)
            async with consumer:
                for mark in (60, 180):  # resets while the backlog is consumed
                    await wait_until(lambda m=mark: len(got) >= m, f"{mark} consumed")
                    proxy.reset_all()
                await wait_until(lambda: set(got) >= set(history.acked), "the backlog consumed")
                # caught up: both queues' pulls are parked at the broker
                await wait_until(lambda: holds.parked_count(TOPIC) == QUEUES, "parked pulls")
                proxy.reset_all()  # kills the parked pulls' connection
                async with Producer("pg", namesrv) as producer:
                    for i in range(10):
                        await history.send(producer, b"after-reset-%d" % i)
                    await wait_until(lambda: set(got) >= set(history.acked), "consumed after reset")
                    await wait_until(lambda: holds.parked_count(TOPIC) == QUEUES, "parked again")
                    proxy.blackhole()  # a silent link under parked pulls, then healed
                    await trio.sleep(0.5)
                    proxy.heal()
                    for i in range(10):
                        await history.send(producer, b"after-blackhole-%d" % i)
                await wait_until(lambda: set(got) >= set(history.acked), "consumed after heal")
            assert history.unknown == []
            assert set(got) == set(history.attempted)  # lost_delivery = 0, unexpected = 0
            assert len(got) - len(set(got)) <= 2 * 8 * QUEUES  # redelivered: in-flight pulls only
            await wait_until(lambda: holds.parked_count(TOPIC) == 0, "no pull left parked")


async def test_a_blackhole_longer_than_the_pull_timeout(tmp_path: Path) -> None:
    """Pulls time out while the link is silent and are sent again on the same connection, so
    after the heal the broker answers a pile of stale pulls too; the consumer takes only the
    answer it waits for and consumes every message once."""
    with trio.fail_after(90):
        async with brokers(tmp_path, {"broker-a": True}) as cluster:
            namesrv, (a, proxy) = cluster.namesrv, cluster.proxied()
            holds = a.controller.holds
            got: list[bytes] = []

            def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
                got.extend(m.body for m in msgs)
                return ConsumeResult.SUCCESS

            config = ClientConfig.create(namesrv, request_timeout_s=0.5)
            async with (
                ClientInstance(config) as instance,
                PushConsumer(
                    "cg",
                    instance=instance,
                    consume_from=ConsumeFrom.FIRST_OFFSET,
                    suspend_timeout_ms=500,  # a pull times out after 1 s
                ) as consumer,
            ):
                consumer.subscribe(TOPIC, "*", handle)
                await wait_until(lambda: holds.parked_count(TOPIC) == QUEUES, "parked pulls")
                proxy.blackhole()
                before = proxy.connections
                await trio.sleep(3)  # several pull timeouts and retries on each queue
                assert proxy.connections == before  # the same connection all along
                proxy.heal()
                history = History()
                async with Producer("pg", namesrv) as producer:
                    for i in range(20):
                        await history.send(producer, b"after-heal-%d" % i)
                assert len(history.acked) == 20
                await wait_until(lambda: set(got) >= set(history.acked), "all consumed")
                # every stale pull has been answered (only the live ones wait at the broker),
                # and a round trip on the consumer's connection comes after all those answers
                server = a.controller.server
                assert server is not None
                await wait_until(
                    lambda: (
                        holds.parked_count(TOPIC) == QUEUES
                        and server.pending_limit.pending == holds.parked_count()
                    ),
                    "the stale pulls answered",
                )
                probe = req(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId="0")
                assert (await instance.invoke(a.addr, probe)).code == ResponseCode.SUCCESS
            assert sorted(got) == sorted(history.acked)  # each once


async def test_a_stall_during_a_rebalance_round_waits_for_the_write_back(tmp_path: Path) -> None:
    # A group-mode pull consumer's rebalance round is waiting for the broker's member list
    # (its answer held by the proxy) when the loop stalls past pull_max_idle_ms. The stall's
    # recovery writes the positions back; the interrupted round must not start queues before
    # that, or they start from the older committed offset (none here: the first offset) and
    # what was returned before the stall comes again.
    n = 20
    async with brokers(tmp_path, {"broker-a": True}) as cluster:
        _, proxy = cluster.proxied()
        async with Producer("pg", cluster.namesrv, send_timeout=SEND_TIMEOUT_S * 5) as producer:
            for i in range(n):
                await producer.send(Message(TOPIC, b"m%d" % i))
        consumer = PullConsumer(
            "pcg",
            cluster.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            auto_commit=False,
            max_poll_records=5,
            pull_max_idle_ms=2000,
            rebalance_interval=3600,
        )
        got: list[ReceivedMessage] = []
        async with consumer, trio.open_nursery() as nursery:
            consumer.subscribe(TOPIC)
            await wait_until(lambda: len(consumer.assignment()) == QUEUES, "queues assigned")
            with trio.fail_after(LIMIT):
                while len(got) < 5:
                    got += await consumer.poll_for(0.2)
                # processed when the stall comes, so these come again (not written back)
                assert await consumer.poll_for(LIMIT)
            proxy.blackhole("responses")
            nursery.start_soon(consumer.do_rebalance)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            stall_loop(2.3)  # the round waits for the member list meanwhile
            proxy.heal()
            with trio.fail_after(LIMIT):
                while len(got) < n:
                    got += await consumer.poll_for(0.2)
            with trio.move_on_after(0.5):  # nothing more comes
                got += await consumer.poll_for(1.0)
        assert consumer.stalls == 1
        assert sorted(m.body for m in got) == sorted(b"m%d" % i for i in range(n))
