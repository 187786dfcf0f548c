"""Transactional messages from the client's side.

- Without a broker: how the local transaction and the checker are run (threads, ``async def``,
  exceptions and odd returns are UNKNOW), validation before any network call, delay levels
  refused, a failed half send raising before ``execute`` runs.
- Against a ``RemotingServer`` standing in for a broker: a CHECK_TRANSACTION_STATE sent over the
  producer's own connection is answered with the END_TRANSACTION the wire contract describes.
- Against an in-process name server and broker (short check interval and timeout): commit,
  rollback, unknown-then-checked and never-decided transactions, seen by a consumer.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from client import TransactionProducer as BlockingTransactionProducer
from client.aio import (
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    PullConsumer,
    ReceivedMessage,
    SendStatus,
    TransactionProducer,
)
from client.errors import MessageInvalidError, MQClientError
from client.transaction import (
    LocalExecutor,
    TransactionChecker,
    end_transaction_request,
    run_local,
    run_local_sync,
)
from common.message import MessageConst
from common.message_id import create_offset_msg_id
from common.record import MessageRecord, encode_record, pack_host
from common.topic import TRANS_HALF_TOPIC
from remoting.channel import Channel
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.server import RemotingServer
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster
from tests.compiled import pure_only

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
UNREACHABLE = "127.0.0.1:1"
"""A name server address nothing listens on (connections are refused at once)."""


def never(msg: object) -> LocalTransactionState:
    raise AssertionError("the checker must not be called")


# --------------------------------------------------------------------------- local runs


async def test_sync_callbacks_run_in_a_worker_thread() -> None:
    threads: list[int] = []

    def execute(msg: Message, arg: object) -> LocalTransactionState:
        threads.append(threading.get_ident())
        assert arg == "the-arg"
        return COMMIT

    assert await run_local(execute, Message(TOPIC, b"x"), "the-arg") is COMMIT
    assert threads
    assert threads[0] != threading.get_ident()


async def test_async_callbacks_are_awaited() -> None:
    async def execute(msg: Message, arg: object) -> LocalTransactionState:
        await trio.lowlevel.checkpoint()
        return ROLLBACK

    class Checker:
        async def __call__(self, msg: object) -> LocalTransactionState:
            return COMMIT

    assert await run_local(execute, Message(TOPIC, b"x"), None) is ROLLBACK
    assert await run_local(Checker(), Message(TOPIC, b"x")) is COMMIT


@pytest.mark.parametrize("returned", [None, "COMMIT_MESSAGE", True, 8])
async def test_a_result_that_is_not_a_state_is_unknow(returned: object) -> None:
    assert await run_local(lambda m, a: returned, Message(TOPIC, b"x"), None) is UNKNOW
    assert run_local_sync(lambda m, a: returned, Message(TOPIC, b"x"), None) is UNKNOW


async def test_an_exception_is_unknow_never_commit() -> None:
    def execute(msg: Message, arg: object) -> LocalTransactionState:
        raise RuntimeError("the local transaction failed")

    async def aexecute(msg: Message, arg: object) -> LocalTransactionState:
        raise RuntimeError("the local transaction failed")

    assert await run_local(execute, Message(TOPIC, b"x"), None) is UNKNOW
    assert await run_local(aexecute, Message(TOPIC, b"x"), None) is UNKNOW
    assert run_local_sync(execute, Message(TOPIC, b"x"), None) is UNKNOW


def test_commit_or_rollback_values() -> None:
    assert [s.commit_or_rollback for s in (COMMIT, ROLLBACK, UNKNOW)] == [8, 12, 0]
    cmd = end_transaction_request(
        group="tx-pg",
        topic=TOPIC,
        offset_msg_id=create_offset_msg_id("127.0.0.1", 10911, 4242),
        tran_state_table_offset=7,
        msg_id="U1",
        transaction_id="U1",
        state=ROLLBACK,
        from_check=False,
    )
    assert cmd.code == RequestCode.END_TRANSACTION
    assert cmd.ext_fields["commitLogOffset"] == 4242
    assert cmd.ext_fields["tranStateTableOffset"] == 7
    assert cmd.ext_fields["commitOrRollback"] == 12
    assert cmd.ext_fields["fromTransactionCheck"] == "false"
    assert cmd.ext_fields["producerGroup"] == "tx-pg"


# --------------------------------------------------------------------------- before the network


def refuse(msg: Message, arg: object) -> LocalTransactionState:
    raise AssertionError("execute must not run")


@pytest.mark.parametrize(
    "msg",
    [
        Message("bad topic!", b"x"),
        Message(TOPIC, b""),
        Message(TRANS_HALF_TOPIC, b"x"),
        Message(TOPIC, b"x", properties={"a\x01b": "v"}),
    ],
    ids=["topic-name", "empty-body", "system-topic", "bad-property"],
)
async def test_invalid_messages_fail_before_any_network_call(msg: Message) -> None:
    # the name server is unreachable: reaching the network would fail differently
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as producer:
        with pytest.raises(MessageInvalidError):
            await producer.send_in_transaction(msg, refuse)


@pytest.mark.parametrize(
    "msg",
    [Message(TOPIC, b"x", delay_level=3), Message(TOPIC, b"x", properties={"DELAY": "1s"})],
    ids=["level", "not-a-number"],
)
async def test_a_delay_level_is_refused(msg: Message) -> None:
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as producer:
        with pytest.raises(MessageInvalidError, match="DelayTimeLevel"):
            await producer.send_in_transaction(msg, refuse)


async def test_a_failed_half_send_raises_and_execute_does_not_run() -> None:
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as producer:
        with trio.fail_after(LIMIT), pytest.raises(MQClientError):
            await producer.send_in_transaction(Message(TOPIC, b"x"), refuse)


@pytest.mark.parametrize(
    "msg",
    [[Message(TOPIC, b"x")], (Message(TOPIC, b"x"), Message(TOPIC, b"y"))],
    ids=["list", "tuple"],
)
async def test_a_batch_is_refused_before_any_network_call(msg: object) -> None:
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as producer:
        with pytest.raises(MQClientError, match="cannot be sent as a batch"):
            await producer.send_in_transaction(msg, refuse)  # type: ignore[arg-type]
        with pytest.raises(MQClientError, match="cannot be sent as a batch"):
            await producer.send_half(msg)  # type: ignore[arg-type]


async def test_something_else_than_a_message_is_refused_before_any_network_call() -> None:
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as producer:
        with pytest.raises(MessageInvalidError, match="takes a client Message, got str"):
            await producer.send_in_transaction("paid 42", refuse)  # type: ignore[arg-type]


@pytest.mark.parametrize("execute", [None, 42], ids=["none", "not-callable"])
async def test_an_execute_that_is_not_callable_is_refused_before_any_network_call(
    execute: object,
) -> None:
    """As RocketMQ's "tranExecutor is null": no half message is left for the checks."""
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as producer:
        with pytest.raises(MQClientError, match=r"tranExecutor is null|must be callable"):
            await producer.send_in_transaction(Message(TOPIC, b"x"), execute)  # type: ignore[arg-type]


@pytest.mark.parametrize("budget", [math.inf, -math.inf, math.nan, 0, -1.0])
async def test_a_send_timeout_that_is_not_a_finite_positive_number_is_refused(
    budget: float,
) -> None:
    """``send_timeout=inf`` used to be taken, then a failed send raised "cannot convert float
    NaN to integer" instead of its error."""
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as producer:
        with pytest.raises(ValueError, match="send_timeout must be"):
            await producer.send_in_transaction(Message(TOPIC, b"x"), refuse, send_timeout=budget)
        with pytest.raises(ValueError, match="send_timeout must be"):
            await producer.send(Message(TOPIC, b"x"), send_timeout=budget)
    with pytest.raises(ValueError, match="send_timeout must be a finite"):
        TransactionProducer("tx-pg", UNREACHABLE, checker=never, send_timeout=math.inf)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"check_threads": 0}, ValueError),
        ({"check_threads": True}, TypeError),
        ({"check_request_hold_max": "10"}, TypeError),
        ({"retry_times": -1}, ValueError),
        ({"check_thread": 2}, TypeError),  # misspelt
    ],
)
@pytest.mark.parametrize("make", [TransactionProducer, BlockingTransactionProducer])
def test_bad_options_are_refused_when_made(
    options: dict[str, Any], error: type[Exception], make: Callable[..., object]
) -> None:
    with pytest.raises(error, match=next(iter(options))):
        make("tx-pg", UNREACHABLE, checker=never, **options)


async def test_one_transactional_producer_per_group_and_instance() -> None:
    async with TransactionProducer("tx-pg", UNREACHABLE, checker=never) as first:
        second = TransactionProducer("tx-pg", instance=first.instance, checker=never)
        with pytest.raises(MQClientError, match="created before"):
            await second.__aenter__()
        async with TransactionProducer("tx-other", instance=first.instance, checker=never):
            pass


# --------------------------------------------------------------------------- the check, on the wire


def half_record(uniq: str, group: str) -> MessageRecord:
    """A half record as the broker stores it (real destination in the properties)."""
    props = {
        MessageConst.REAL_TOPIC: TOPIC,
        MessageConst.REAL_QID: "3",
        MessageConst.TRAN_MSG: "true",
        MessageConst.PGROUP: group,
        MessageConst.UNIQ_KEY: uniq,
        MessageConst.TRANSACTION_CHECK_TIMES: "1",
    }
    return MessageRecord(
        topic=TRANS_HALF_TOPIC,
        body=b"the half message",
        properties=props,
        store_host=pack_host("127.0.0.1", 10911),
        queue_offset=17,
        physical_offset=9000,
    )


def check_request(uniq: str, group: str) -> RemotingCommand:
    header = {
        "topic": TOPIC,
        "tranStateTableOffset": "17",
        "commitLogOffset": "9000",
        "msgId": uniq,
        "transactionId": uniq,
        "offsetMsgId": create_offset_msg_id("127.0.0.1", 10911, 9000),
    }
    body = encode_record(half_record(uniq, group))
    return RemotingCommand.request(
        RequestCode.CHECK_TRANSACTION_STATE, header, body, opaque=0, oneway=True
    )


async def test_a_check_is_answered_over_the_wire() -> None:
    answers_in, answers_out = trio.open_memory_channel[RemotingCommand](10)
    checked: list[ReceivedMessage] = []

    async def end_transaction(request: RemotingCommand, ch: Channel) -> None:
        await answers_in.send(request)

    async def hello(request: RemotingCommand, ch: Channel) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def checker(msg: ReceivedMessage) -> LocalTransactionState:
        checked.append(msg)
        if msg.msg_id == "U-RAISE":
            raise RuntimeError("cannot tell")
        return COMMIT

    server = RemotingServer(
        {RequestCode.END_TRANSACTION: end_transaction, RequestCode.HEART_BEAT: hello},
        host="127.0.0.1",
        port=0,
    )
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run)
            addr = f"127.0.0.1:{port}"
            async with TransactionProducer("tx-pg", UNREACHABLE, checker=checker) as producer:
                # the producer's connection to the "broker" (a heartbeat opens it)
                ping = RemotingCommand.request(RequestCode.HEART_BEAT, {}, opaque=0)
                await producer.instance.invoke(addr, ping)
                (channel,) = server.channels
                await channel.invoke_oneway(check_request("U-1", "tx-pg"))
                await channel.invoke_oneway(check_request("U-OTHER", "another-group"))
                await channel.invoke_oneway(check_request("U-RAISE", "tx-pg"))
                first, second = await answers_out.receive(), await answers_out.receive()
            nursery.cancel_scope.cancel()
    answers = {a.ext_fields["msgId"]: a.ext_fields for a in (first, second)}
    assert set(answers) == {"U-1", "U-RAISE"}  # nobody answers for an unknown group
    assert answers["U-1"] == {
        "topic": TOPIC,
        "producerGroup": "tx-pg",
        "tranStateTableOffset": 17,
        "commitLogOffset": 9000,
        "commitOrRollback": 8,
        "fromTransactionCheck": "true",
        "msgId": "U-1",
        "transactionId": "U-1",
    }
    assert answers["U-RAISE"]["commitOrRollback"] == 0
    msg = next(m for m in checked if m.msg_id == "U-1")
    assert (msg.topic, msg.queue.topic, msg.queue.queue_id) == (TOPIC, TOPIC, 3)
    assert msg.body == b"the half message"


class BlockedChecker:
    """A plain checker blocked in its worker thread until released, counting how many run."""

    def __init__(self, hold_s: float = LIMIT) -> None:
        self.hold_s = hold_s
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.started = 0

    def __call__(self, msg: ReceivedMessage) -> LocalTransactionState:
        with self.lock:
            self.started += 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            self.release.wait(self.hold_s)
            return COMMIT
        finally:
            with self.lock:
                self.running -= 1


# --------------------------------------------------------------------------- against a broker

TX_SETTINGS = {
    "transactionCheckInterval": "200",
    "transactionTimeOut": "100",
    "transactionCheckMax": "3",
}


class Checker:
    """An ``async def`` checker answering per body (UNKNOW by default), counting calls."""

    def __init__(self, answers: dict[bytes, LocalTransactionState] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: Counter[bytes] = Counter()
        self.seen: list[ReceivedMessage] = []
        self._called = trio.Event()

    async def __call__(self, msg: ReceivedMessage) -> LocalTransactionState:
        self.calls[msg.body] += 1
        self.seen.append(msg)
        self._called.set()
        self._called = trio.Event()
        return self.answers.get(msg.body, UNKNOW)

    async def wait_calls(self, body: bytes, count: int) -> None:
        """Wait (within LIMIT) until the checker was asked ``count`` times about ``body``."""
        with trio.fail_after(LIMIT):
            while self.calls[body] < count:
                await self._called.wait()


def returns(state: LocalTransactionState) -> LocalExecutor:
    def execute(msg: Message, arg: object) -> LocalTransactionState:
        return state

    return execute


class Reader:
    """A consumer of every queue of TOPIC from the first offset, keeping all it received."""

    def __init__(self, consumer: PullConsumer) -> None:
        self.consumer = consumer
        self.got: list[ReceivedMessage] = []

    def bodies(self) -> Counter[bytes]:
        return Counter(m.body for m in self.got)

    async def until(self, *bodies: bytes) -> None:
        """Poll until every body of ``bodies`` has been received (within LIMIT)."""
        with trio.fail_after(LIMIT):
            while not all(self.bodies()[b] for b in bodies):
                self.got += await self.consumer.poll_for(0.2)

    async def drain(self, producer: TransactionProducer) -> Counter[bytes]:
        """Send a plain sentinel to every queue and read up to all of them."""
        queues = await self.consumer.fetch_queues(TOPIC)
        sentinels = [b"sentinel-%d" % mq.queue_id for mq in queues]
        for mq, body in zip(queues, sentinels, strict=True):
            await producer.send(Message(TOPIC, body), queue=mq)
        await self.until(*sentinels)
        return self.bodies()


Scenario = Callable[[TransactionProducer, Reader], Awaitable[None]]


async def run_with_reader(
    tmp_path: Path,
    checker: TransactionChecker,
    scenario: Scenario,
    settings: dict[str, str] = TX_SETTINGS,
    **options: Any,
) -> None:
    """Run ``await scenario(producer, reader)`` against a one-broker cluster with
    ``settings``; ``options`` are the producer's."""
    first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    async with (
        cluster(tmp_path, brokers=("broker-a",), overrides=settings) as c,
        TransactionProducer("tx-pg", c.namesrv, checker=checker, **options) as producer,
        PullConsumer("cg-tx", c.namesrv, consume_from=first) as consumer,
    ):
        consumer.assign(await consumer.fetch_queues(TOPIC))
        await scenario(producer, Reader(consumer))


async def test_commit_is_delivered_once(tmp_path: Path) -> None:
    checker = Checker({b"committed": ROLLBACK})  # a check would expose a lost commit

    async def scenario(producer: TransactionProducer, reader: Reader) -> None:
        result = await producer.send_in_transaction(
            Message(TOPIC, b"committed", tags="T"), returns(COMMIT), arg=1
        )
        assert result.status is SendStatus.SEND_OK
        assert result.local_state is COMMIT
        assert result.transaction_id == result.msg_id
        assert result.queue.topic == TOPIC
        await reader.until(b"committed")
        assert (await reader.drain(producer))[b"committed"] == 1
        (msg,) = [m for m in reader.got if m.body == b"committed"]
        assert msg.msg_id == result.msg_id
        assert msg.tags == "T"
        assert msg.topic == TOPIC
        assert checker.calls[b"committed"] == 0

    await run_with_reader(tmp_path, checker, scenario)


async def test_rollback_is_never_delivered(tmp_path: Path) -> None:
    # a check of the rolled-back message would commit it: the rollback must settle it
    checker = Checker({b"rolled-back": COMMIT, b"later": COMMIT})

    async def scenario(producer: TransactionProducer, reader: Reader) -> None:
        result = await producer.send_in_transaction(
            Message(TOPIC, b"rolled-back"), returns(ROLLBACK)
        )
        assert result.local_state is ROLLBACK
        # a later undecided message: once it is checked and delivered, the check service has
        # passed the rolled-back one
        await producer.send_in_transaction(Message(TOPIC, b"later"), returns(UNKNOW))
        await reader.until(b"later")
        bodies = await reader.drain(producer)
        assert bodies[b"rolled-back"] == 0
        assert bodies[b"later"] == 1
        assert checker.calls[b"rolled-back"] == 0

    await run_with_reader(tmp_path, checker, scenario)


async def test_unknow_then_the_checker_commits(tmp_path: Path) -> None:
    checker = Checker({b"checked": COMMIT})

    def execute(msg: Message, arg: object) -> LocalTransactionState:
        raise RuntimeError("crashed in the local transaction")

    async def scenario(producer: TransactionProducer, reader: Reader) -> None:
        result = await producer.send_in_transaction(Message(TOPIC, b"checked"), execute)
        assert result.local_state is UNKNOW
        await reader.until(b"checked")
        assert (await reader.drain(producer))[b"checked"] == 1
        assert checker.calls[b"checked"] >= 1
        seen = checker.seen[0]
        assert seen.topic == TOPIC
        assert seen.queue.queue_id == result.queue.queue_id
        assert seen.msg_id == result.msg_id
        (delivered,) = [m for m in reader.got if m.body == b"checked"]
        assert delivered.msg_id == result.msg_id

    await run_with_reader(tmp_path, checker, scenario)


async def test_a_checker_that_never_decides_until_the_limit(tmp_path: Path) -> None:
    checker = Checker({b"probe": COMMIT})
    limit = int(TX_SETTINGS["transactionCheckMax"])

    async def scenario(producer: TransactionProducer, reader: Reader) -> None:
        result = await producer.send_in_transaction(Message(TOPIC, b"undecided"), returns(UNKNOW))
        assert result.local_state is UNKNOW
        await checker.wait_calls(b"undecided", limit)
        # a message checked after that: the check service has passed the undecided one again
        await producer.send_in_transaction(Message(TOPIC, b"probe"), returns(UNKNOW))
        await reader.until(b"probe")
        bodies = await reader.drain(producer)
        assert bodies[b"undecided"] == 0
        assert checker.calls[b"undecided"] == limit

    await run_with_reader(tmp_path, checker, scenario)


@pure_only("client.instance", "ClientInstance.invoke")
async def test_the_half_send_gets_the_calls_send_timeout_as_its_budget(tmp_path: Path) -> None:
    """``send_in_transaction(send_timeout=T)`` gives the half message's send T, as ``send``
    does (it used to have no such argument: always the producer's ``send_timeout``)."""
    async with (
        cluster(tmp_path, brokers=("broker-a",), overrides=TX_SETTINGS) as c,
        TransactionProducer("tx-pg", c.namesrv, checker=never, send_timeout=3.0) as producer,
    ):
        budgets: list[float | None] = []
        invoke = producer.instance.invoke

        async def spy(
            addr: str, cmd: RemotingCommand, timeout_s: float | None = None
        ) -> RemotingCommand:
            if cmd.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
                budgets.append(timeout_s)
            return await invoke(addr, cmd, timeout_s)

        producer.instance.invoke = spy  # type: ignore[method-assign]
        for send_timeout, expected in ((10.0, 10.0), (None, 3.0)):
            result = await producer.send_in_transaction(
                Message(TOPIC, b"x"), returns(ROLLBACK), send_timeout=send_timeout
            )
            assert result.status is SendStatus.SEND_OK
            budget = budgets.pop()
            assert budget is not None
            assert expected - 1.0 < budget <= expected


# --------------------------------------------------------------------------- the check pool

PATIENT = {**TX_SETTINGS, "transactionCheckMax": "1000"}
"""Checked every 200 ms, never discarded while a test's checker is held."""


async def send_unknown(producer: TransactionProducer, bodies: list[bytes]) -> None:
    for body in bodies:
        result = await producer.send_in_transaction(Message(TOPIC, body), returns(UNKNOW))
        assert result.local_state is UNKNOW


async def test_stuck_checks_leave_the_worker_threads_to_the_local_transactions(
    tmp_path: Path,
) -> None:
    """Checks run on a pool of their own (1 thread by default, as RocketMQ's check pool): 45
    checks stuck in the checker used to take trio's 40 shared worker threads, and a plain
    ``execute`` then never ran."""
    checker = BlockedChecker()
    bodies = [b"stuck-%d" % i for i in range(45)]

    async def scenario(producer: TransactionProducer, reader: Reader) -> None:
        await send_unknown(producer, bodies)
        await wait_until(lambda: len(producer._checks) >= 45, "45 checks held")
        await wait_until(lambda: checker.started == 1, "a checker running")
        with trio.fail_after(LIMIT):
            state = await run_local(returns(COMMIT), Message(TOPIC, b"x"), None)
        assert state is COMMIT
        checker.release.set()
        await reader.until(*bodies)
        counts = await reader.drain(producer)
        assert all(counts[b] == 1 for b in bodies)
        assert checker.most == 1

    try:
        await run_with_reader(tmp_path, checker, scenario, PATIENT)
    finally:
        checker.release.set()


async def test_checks_beyond_the_hold_max_are_dropped(tmp_path: Path) -> None:
    """At most ``check_request_hold_max`` checks wait or run; the ones dropped are asked
    again by the broker, so every message is still decided once."""
    checker = BlockedChecker()
    bodies = [b"held-%d" % i for i in range(5)]

    async def scenario(producer: TransactionProducer, reader: Reader) -> None:
        await send_unknown(producer, bodies)
        await wait_until(lambda: producer.checks_dropped >= 2, "checks dropped")
        await wait_until(lambda: checker.started == 2, "2 checkers running")
        assert len(producer._checks) <= 3
        checker.release.set()
        await reader.until(*bodies)
        counts = await reader.drain(producer)
        assert all(counts[b] == 1 for b in bodies)
        assert checker.most == 2

    try:
        await run_with_reader(
            tmp_path, checker, scenario, PATIENT, check_threads=2, check_request_hold_max=3
        )
    finally:
        checker.release.set()


@pytest.mark.parametrize("plain", [True, False], ids=["thread", "async"])
async def test_leaving_the_producer_abandons_a_running_check(tmp_path: Path, plain: bool) -> None:
    """Closing used to wait for the checker (forever, for a hung one), to drop its answer
    anyway: now the check is abandoned at once, the checker still held, and the broker asks
    again."""
    checker = BlockedChecker()
    finished = trio.Event()

    go = trio.Event()  # never set: a hung async checker

    async def hung(msg: ReceivedMessage) -> LocalTransactionState:
        checker.started += 1
        await go.wait()
        finished.set()
        return COMMIT

    try:
        with trio.fail_after(LIMIT):
            async with cluster(tmp_path, brokers=("broker-a",), overrides=PATIENT) as c:
                async with TransactionProducer(
                    "tx-pg", c.namesrv, checker=checker if plain else hung
                ) as producer:
                    await send_unknown(producer, [b"hung"])
                    await wait_until(lambda: checker.started == 1, "the check running")
                # left while the checker is still held: leaving did not wait for it
                assert not checker.release.is_set()
                assert checker.running == 1 if plain else not finished.is_set()
    finally:
        checker.release.set()
