"""Transactional messages end to end on an in-process broker: half messages, END_TRANSACTION,
the check service, restarts and GET_PENDING_HALF_MESSAGES, through real sockets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from broker.client_manager import ClientManager
from broker.consumer_offset import ConsumerOffsetManager
from broker.processors.send import encode_batch_body
from broker.transaction import SYS_TRANS_GROUP, EndOutcome, TransactionService, to_half_message
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord, decode_record
from common.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.transaction_bodies import HalfMessage, decode_half_messages
from store import MessageStore, PutResult
from store.services import StoreServices
from tests.broker.inprocess import LIMIT, running_broker, wait_until
from tests.broker.txn_helpers import (
    COMMIT,
    FAST_CHECKS,
    GROUP,
    ROLLBACK,
    TOPIC,
    UNKNOW,
    CheckInbox,
    check_end_fields,
    end_fields,
    end_oneway,
    end_tx,
    heartbeat,
    pull_all,
    queue_records,
    send_half,
)
from tests.compiled import pure_only
from tests.conftest import ManualClock

NO_CHECKS = {"transactionCheckInterval": "3600000"}


async def pending(client: RemotingClient, addr: str, group: str = "") -> list[HalfMessage]:
    cmd = RemotingCommand.request(
        RequestCode.GET_PENDING_HALF_MESSAGES, {"producerGroup": group}, opaque=0
    )
    resp = await client.invoke(addr, cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return decode_half_messages(resp.body)


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_commit_is_visible_once_and_a_second_decision_is_ignored(
    tmp_path: Path, flush: str
) -> None:
    async with (
        running_broker(tmp_path, overrides={**NO_CHECKS, "flushDiskType": flush}) as (
            broker,
            addr,
        ),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        sent = await send_half(client, addr, b"pay 10", queue_id=1, extra={"TAGS": "t"})
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        uniq = sent.ext_fields["transactionId"]
        assert sent.ext_fields["queueId"] == "1"
        await wait_until(lambda: len(queue_records(broker, TRANS_HALF_TOPIC)) == 1, "half")
        half = queue_records(broker, TRANS_HALF_TOPIC)[0]
        assert half.sys_flag & MessageSysFlag.TRANSACTION_MASK == 0
        assert half.properties[MessageConst.REAL_TOPIC] == TOPIC
        assert half.properties[MessageConst.REAL_QID] == "1"
        assert await pull_all(client, addr, TOPIC, 1) == []  # invisible
        assert [h.msg_id for h in await pending(client, addr, GROUP)] == [uniq]

        resp = await end_tx(client, addr, end_fields(sent, COMMIT))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        await wait_until(lambda: len(queue_records(broker, TOPIC, 1)) == 1, "commit")
        for decision in (COMMIT, ROLLBACK):
            again = await end_tx(client, addr, end_fields(sent, decision))
            assert again.remark == "already decided"
        await wait_until(lambda: len(queue_records(broker, TRANS_OP_HALF_TOPIC)) == 1, "op")

        got = await pull_all(client, addr, TOPIC, 1)
        assert [m.body for m in got] == [b"pay 10"]
        msg = got[0]
        assert msg.uniq_key == uniq
        assert msg.tags == "t"
        assert MessageConst.REAL_TOPIC not in msg.properties
        assert MessageConst.TRAN_MSG not in msg.properties
        assert msg.sys_flag & MessageSysFlag.TRANSACTION_MASK == COMMIT
        assert msg.prepared_transaction_offset == half.physical_offset
        op = queue_records(broker, TRANS_OP_HALF_TOPIC)[0]
        assert op.body == b"0"
        assert op.tags == "d"
        assert await pending(client, addr) == []


async def test_rollback_is_never_visible_and_is_never_checked(tmp_path: Path) -> None:
    inbox = CheckInbox()
    # rounds every 200 ms, but a second for the rollback to land before a check is due
    overrides = {**FAST_CHECKS, "transactionTimeOut": "1000"}
    async with (
        running_broker(tmp_path, overrides=overrides) as (broker, addr),
        RemotingClient(handlers=inbox.handlers(), default_timeout_s=LIMIT) as client,
    ):
        await heartbeat(client, addr, "producer-1")
        sent = await send_half(client, addr, b"refund")
        await end_oneway(client, addr, end_fields(sent, ROLLBACK))
        service = broker.transactions
        assert service is not None
        await wait_until(lambda: len(queue_records(broker, TRANS_OP_HALF_TOPIC)) == 1, "op")
        late = await end_tx(client, addr, end_fields(sent, COMMIT))
        assert late.remark == "already decided"
        # a later round passes the decided half message by: progress reaches the queue's end
        await wait_until(
            lambda: (
                broker.offsets is not None
                and broker.offsets.query_offset(SYS_TRANS_GROUP, TRANS_HALF_TOPIC, 0) == 1
            ),
            "half progress past the rolled-back message",
        )
        assert service.checks_sent == 0
        assert queue_records(broker, TOPIC) == []
        assert await pull_all(client, addr) == []


async def test_bad_requests_are_refused(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path, overrides=NO_CHECKS) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        batch = RemotingCommand.request(
            RequestCode.SEND_BATCH_MESSAGE,
            {"a": GROUP, "b": TOPIC, "e": "0", "f": str(MessageSysFlag.TRANSACTION_PREPARED_TYPE)},
            encode_batch_body([{"body": b"x"}, {"body": b"y"}]),
            opaque=1,
        )
        resp = await client.invoke(addr, batch)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        sent = await send_half(client, addr, b"x")
        wrong_group = await end_tx(client, addr, end_fields(sent, COMMIT, group="other"))
        assert wrong_group.code == ResponseCode.SYSTEM_ERROR
        fields = end_fields(sent, COMMIT)
        fields["tranStateTableOffset"] = "7"
        wrong_offset = await end_tx(client, addr, fields)
        assert wrong_offset.code == ResponseCode.SYSTEM_ERROR
        unknown = await end_tx(client, addr, end_fields(sent, UNKNOW))
        assert unknown.code == ResponseCode.SUCCESS
        assert len(await pending(client, addr)) == 1
        assert queue_records(broker, TOPIC) == []


async def test_unknown_is_checked_on_the_producer_connection_then_committed(
    tmp_path: Path,
) -> None:
    inbox = CheckInbox()
    async with (
        running_broker(tmp_path, overrides=FAST_CHECKS) as (broker, addr),
        RemotingClient(handlers=inbox.handlers(), default_timeout_s=LIMIT) as client,
    ):
        await heartbeat(client, addr, "producer-1")
        sent = await send_half(client, addr, b"order 7", queue_id=2)
        await end_oneway(client, addr, end_fields(sent, UNKNOW))
        check = await inbox.next()
        fields = check.ext_fields
        assert fields["topic"] == TOPIC
        assert fields["msgId"] == fields["transactionId"] == sent.ext_fields["transactionId"]
        rec = decode_record(check.body)
        assert rec.topic == TRANS_HALF_TOPIC
        assert rec.body == b"order 7"
        assert rec.properties[MessageConst.REAL_TOPIC] == TOPIC
        assert rec.properties[MessageConst.REAL_QID] == "2"
        assert rec.properties[MessageConst.TRANSACTION_CHECK_TIMES] == "1"
        assert str(rec.physical_offset) == fields["commitLogOffset"]
        assert str(rec.queue_offset) == fields["tranStateTableOffset"]
        [listed] = await pending(client, addr, GROUP)
        assert (listed.topic, listed.queue_id) == (TOPIC, 2)
        assert listed.check_times >= 1

        await end_oneway(client, addr, check_end_fields(check, COMMIT))
        await wait_until(lambda: len(queue_records(broker, TOPIC, 2)) == 1, "commit")
        # the original offsets name the same transaction: a late decision is ignored
        late = await end_tx(client, addr, end_fields(sent, ROLLBACK))
        assert late.remark == "already decided"
        assert [m.body for m in await pull_all(client, addr, TOPIC, 2)] == [b"order 7"]
        assert await pending(client, addr) == []


async def test_unknow_until_the_limit_moves_it_to_the_max_time_topic(tmp_path: Path) -> None:
    inbox = CheckInbox()
    overrides = {**FAST_CHECKS, "transactionCheckMax": "3"}
    async with (
        running_broker(tmp_path, overrides=overrides) as (broker, addr),
        RemotingClient(handlers=inbox.handlers(), default_timeout_s=LIMIT) as client,
    ):
        await heartbeat(client, addr, "producer-1")
        sent = await send_half(client, addr, b"stuck")
        for times in (1, 2, 3):
            check = await inbox.next()
            rec = decode_record(check.body)
            assert rec.properties[MessageConst.TRANSACTION_CHECK_TIMES] == str(times)
            await end_oneway(client, addr, check_end_fields(check, UNKNOW))
        await wait_until(
            lambda: len(queue_records(broker, TRANS_CHECK_MAX_TIME_TOPIC)) == 1, "discard"
        )
        moved = queue_records(broker, TRANS_CHECK_MAX_TIME_TOPIC)[0]
        assert moved.body == b"stuck"
        assert moved.properties[MessageConst.TRANSACTION_CHECK_TIMES] == "3"
        assert await pending(client, addr) == []
        late = await end_tx(client, addr, end_fields(sent, COMMIT))
        assert late.remark == "already decided"
        assert broker.transactions is not None
        assert broker.transactions.checks_sent == 3
        assert queue_records(broker, TOPIC) == []


@pytest.mark.parametrize("lose_progress", [False, True])
async def test_decisions_and_checks_survive_a_restart(tmp_path: Path, lose_progress: bool) -> None:
    """``lose_progress``: the consumer offsets file is gone (as after a crash before its flush):
    the op topic alone still says what was decided."""
    async with (
        running_broker(tmp_path, overrides=FAST_CHECKS) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        # nobody of the group is connected: no check goes out, everything stays pending
        committed = await send_half(client, addr, b"committed")
        to_commit = await send_half(client, addr, b"commit after restart")
        to_check = await send_half(client, addr, b"checked after restart")
        await end_tx(client, addr, end_fields(committed, COMMIT))
        await wait_until(lambda: len(queue_records(broker, TOPIC)) == 1, "first commit")
        await wait_until(
            lambda: (
                broker.offsets is not None
                and broker.offsets.query_offset(SYS_TRANS_GROUP, TRANS_OP_HALF_TOPIC, 0) == 1
            ),
            "a check round after the commit",
        )
    if lose_progress:
        lost = list((tmp_path / "store" / "config").glob("consumerOffset.json*"))
        assert lost
        for path in lost:
            path.unlink()
    inbox = CheckInbox()
    async with (
        running_broker(tmp_path, overrides=FAST_CHECKS) as (broker, addr),
        RemotingClient(handlers=inbox.handlers(), default_timeout_s=LIMIT) as client,
    ):
        again = await end_tx(client, addr, end_fields(committed, COMMIT))
        assert again.remark == "already decided"
        resp = await end_tx(client, addr, end_fields(to_commit, COMMIT))
        assert resp.code == ResponseCode.SUCCESS
        assert resp.remark != "already decided"
        await heartbeat(client, addr, "producer-2")
        check = await inbox.next()
        assert check.ext_fields["msgId"] == to_check.ext_fields["transactionId"]
        await end_oneway(client, addr, check_end_fields(check, COMMIT))
        await wait_until(lambda: len(queue_records(broker, TOPIC)) == 3, "all commits")
        bodies = sorted(m.body for m in await pull_all(client, addr))
        assert bodies == [b"checked after restart", b"commit after restart", b"committed"]


async def test_progress_waits_for_the_oldest_pending_and_then_forgets_old_ops(
    tmp_path: Path,
) -> None:
    async with (
        running_broker(tmp_path, overrides=NO_CHECKS) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        service = broker.transactions
        offsets = broker.offsets
        assert service is not None
        assert offsets is not None
        sent = [await send_half(client, addr, f"m{i}".encode()) for i in range(4)]
        for later in sent[1:]:
            await end_tx(client, addr, end_fields(later, COMMIT))
        await wait_until(lambda: len(queue_records(broker, TRANS_OP_HALF_TOPIC)) == 3, "ops")
        await service.check_once()  # nobody to ask about m0: it holds the progress
        assert (service.half_progress, service.op_progress) == (0, 0)
        assert sorted(service.decided) == [1, 2, 3]
        await end_tx(client, addr, end_fields(sent[0], ROLLBACK))
        await wait_until(lambda: len(queue_records(broker, TRANS_OP_HALF_TOPIC)) == 4, "op")
        await service.check_once()
        assert offsets.query_offset(SYS_TRANS_GROUP, TRANS_HALF_TOPIC, 0) == 4
        assert offsets.query_offset(SYS_TRANS_GROUP, TRANS_OP_HALF_TOPIC, 0) == 4
        assert service.decided == {}
        assert (service.half_read_end, service.window_keys) == (4, set())
        for old in sent:  # decided long ago: still ignored
            again = await end_tx(client, addr, end_fields(old, COMMIT))
            assert again.remark == "already decided"
        assert sorted(m.body for m in queue_records(broker, TOPIC)) == [b"m1", b"m2", b"m3"]


async def test_a_key_set_by_the_sender_does_not_tie_a_new_transaction_to_an_old_one(
    tmp_path: Path,
) -> None:
    """TRAN_PREPARED_QUEUE_OFFSET is the broker's own: a half message carrying one (a checker
    re-sending the copy it was handed, say) still gets a key of its own."""
    async with (
        running_broker(tmp_path, overrides=NO_CHECKS) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        first = await send_half(client, addr, b"tx-1")
        assert (await end_tx(client, addr, end_fields(first, COMMIT))).remark == ""
        copied = {MessageConst.TRAN_PREPARED_QUEUE_OFFSET: str(first.ext_fields["queueOffset"])}
        second = await send_half(client, addr, b"tx-2", extra=copied)
        resp = await end_tx(client, addr, end_fields(second, COMMIT))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "")
        await wait_until(lambda: len(queue_records(broker, TOPIC)) == 2, "both commits")
        [half] = queue_records(broker, TRANS_HALF_TOPIC)[1:]
        assert MessageConst.TRAN_PREPARED_QUEUE_OFFSET not in half.properties


@pytest.mark.parametrize(
    "prop",
    [
        MessageConst.TRAN_PREPARED_QUEUE_OFFSET,
        MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS,
        MessageConst.TRANSACTION_CHECK_TIMES,
    ],
)
async def test_a_malformed_number_in_a_half_message_stops_neither_checks_nor_a_restart(
    tmp_path: Path, prop: str
) -> None:
    """ "²" passes str.isdigit() and fails int(): one such half message must not end every
    check round, nor the broker's next start."""
    inbox = CheckInbox()
    async with (
        running_broker(tmp_path, overrides=FAST_CHECKS) as (broker, addr),
        RemotingClient(handlers=inbox.handlers(), default_timeout_s=LIMIT) as client,
    ):
        odd = await send_half(client, addr, b"odd", extra={prop: "\u00b2"})
        assert odd.code == ResponseCode.SUCCESS, odd.remark
        plain = await send_half(client, addr, b"plain")
        await heartbeat(client, addr, "producer-1")
        checked = {(await inbox.next()).ext_fields["msgId"] for _ in range(2)}
        assert checked == {odd.ext_fields["transactionId"], plain.ext_fields["transactionId"]}
    async with (
        running_broker(tmp_path, overrides=FAST_CHECKS) as (broker, addr),
        RemotingClient(handlers=inbox.handlers(), default_timeout_s=LIMIT) as client,
    ):
        await heartbeat(client, addr, "producer-2")
        check = await inbox.next()
        await end_oneway(client, addr, check_end_fields(check, COMMIT))
        await wait_until(lambda: len(queue_records(broker, TOPIC)) == 1, "a commit after restart")


async def test_a_half_message_with_a_delay_that_is_not_a_number_is_refused(
    tmp_path: Path,
) -> None:
    """Its commit would apply the DELAY: refused at the send, as a plain message is, and never
    stored to be lost at the commit."""
    async with (
        running_broker(tmp_path, overrides=NO_CHECKS) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        resp = await send_half(client, addr, b"paid", extra={MessageConst.DELAY: "1s"})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        assert "DELAY" in resp.remark
        assert queue_records(broker, TRANS_HALF_TOPIC) == []


async def test_a_group_with_no_producer_left_still_reaches_the_check_limit(
    tmp_path: Path,
) -> None:
    """As in RocketMQ, a round counts whether or not a producer could be asked: a vanished
    group's half message is moved away in the end instead of holding the progress forever."""
    overrides = {**FAST_CHECKS, "transactionCheckMax": "3"}
    async with (
        running_broker(tmp_path, overrides=overrides) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        await send_half(client, addr, b"orphan", group="gone-pg")
        later = await send_half(client, addr, b"later")
        await end_tx(client, addr, end_fields(later, COMMIT))
        await wait_until(
            lambda: (
                [m.body for m in queue_records(broker, TRANS_CHECK_MAX_TIME_TOPIC)] == [b"orphan"]
            ),
            "the orphan moved to TRANS_CHECK_MAX_TIME_TOPIC",
        )
        moved = queue_records(broker, TRANS_CHECK_MAX_TIME_TOPIC)[0]
        assert moved.properties[MessageConst.TRANSACTION_CHECK_TIMES] == "3"
        assert broker.store is not None
        end = broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        await wait_until(
            lambda: (
                broker.offsets is not None
                and broker.offsets.query_offset(SYS_TRANS_GROUP, TRANS_HALF_TOPIC, 0) == end
            ),
            "half progress at the queue's end",
        )
        assert [m.body for m in queue_records(broker, TOPIC)] == [b"later"]


@pure_only("store.services", "StoreServices.put_message")
async def test_a_commit_landing_while_its_copy_is_re_stored_is_not_delivered_again_after_a_restart(
    tmp_path: Path,
) -> None:
    """The producer's COMMIT arrives while a check round re-stores the half message, and a
    GET_PENDING_HALF_MESSAGES reads the ops meanwhile: the round must not forget that commit
    while the re-stored copy is still ahead of the progress, or a restart checks (and commits)
    the transaction once more."""
    overrides = {**NO_CHECKS, "transactionTimeOut": "0"}
    async with (
        running_broker(tmp_path, overrides=overrides) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        service, services = broker.transactions, broker.services
        assert service is not None
        assert services is not None
        sent = await send_half(client, addr, b"pay 10")
        re_storing, release = trio.Event(), trio.Event()
        put_message = services.put_message

        async def held_put(msg: MessageRecord) -> PutResult:
            if msg.topic == TRANS_HALF_TOPIC:  # the check round's copy
                re_storing.set()
                await release.wait()
            return await put_message(msg)

        services.put_message = held_put  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.check_once)
            await re_storing.wait()
            resp = await end_tx(client, addr, end_fields(sent, COMMIT))
            assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "")
            await pending(client, addr)
            release.set()
        assert len(queue_records(broker, TOPIC)) == 1
    async with running_broker(tmp_path, overrides=overrides) as (broker, addr):
        service = broker.transactions
        assert service is not None
        assert service.pending() == []
        await service.check_once()
        assert service.checks_sent == 0
        assert [m.body for m in queue_records(broker, TOPIC)] == [b"pay 10"]


async def test_a_half_message_inside_its_immunity_is_re_stored_and_does_not_hold_the_progress(
    tmp_path: Path,
) -> None:
    """CHECK_IMMUNITY_TIME_IN_SECONDS=3600 must not pin the progress for an hour (every round
    re-reading all that came after it): as RocketMQ's putImmunityMsgBackToHalfQueue, the round
    re-stores a copy (same key, same check count) and moves past it; the transaction is still
    pending, decided once, and checked once its immunity is over."""
    inbox = CheckInbox()
    async with (
        running_broker(tmp_path, overrides={**NO_CHECKS, "transactionTimeOut": "0"}) as (
            broker,
            addr,
        ),
        RemotingClient(handlers=inbox.handlers(), default_timeout_s=LIMIT) as client,
    ):
        service, store = broker.transactions, broker.store
        assert service is not None
        assert store is not None
        await heartbeat(client, addr, "producer-1")
        immune = await send_half(
            client, addr, b"immune", extra={MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "3600"}
        )
        for i in range(5):
            later = await send_half(client, addr, f"later {i}".encode())
            await end_tx(client, addr, end_fields(later, COMMIT))
        await wait_until(lambda: len(queue_records(broker, TRANS_HALF_TOPIC)) == 6, "halves")
        await wait_until(lambda: len(queue_records(broker, TRANS_OP_HALF_TOPIC)) == 5, "ops")
        for round_ in (1, 2):
            end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
            await service.check_once()
            assert service.half_progress == end, f"round {round_}: progress held"
            await wait_until(
                lambda: len(queue_records(broker, TRANS_HALF_TOPIC)) == end + 1,  # noqa: B023
                "the renewed copy",
            )
            copy = queue_records(broker, TRANS_HALF_TOPIC)[-1]
            assert copy.body == b"immune"
            assert copy.properties[MessageConst.TRAN_PREPARED_QUEUE_OFFSET] == "0"
            assert MessageConst.TRANSACTION_CHECK_TIMES not in copy.properties
            [listed] = await pending(client, addr, GROUP)
            assert (listed.msg_id, listed.check_times) == (immune.ext_fields["transactionId"], 0)
        assert service.checks_sent == 0

        hour_later = service.clock_ms() + 3_601_000
        service.clock_ms = lambda: hour_later
        await service.check_once()
        check = await inbox.next()
        assert check.ext_fields["msgId"] == immune.ext_fields["transactionId"]
        assert decode_record(check.body).properties[MessageConst.TRANSACTION_CHECK_TIMES] == "1"
        await end_oneway(client, addr, check_end_fields(check, COMMIT))
        await wait_until(lambda: len(queue_records(broker, TOPIC)) == 6, "the immune commit")
        late = await end_tx(client, addr, end_fields(immune, COMMIT))
        assert late.remark == "already decided"
        assert await pending(client, addr) == []
    async with running_broker(tmp_path, overrides=NO_CHECKS) as (broker, addr):
        service = broker.transactions
        assert service is not None
        assert service.pending() == []
        await service.check_once()
        assert service.checks_sent == 0
        bodies = sorted(m.body for m in queue_records(broker, TOPIC))
        assert bodies == sorted([b"immune", *(f"later {i}".encode() for i in range(5))])


async def test_a_round_reads_a_long_half_queue_in_steps_without_holding_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round (and the listing of pending half messages) reads the queues READ_STEP records
    at a time with a checkpoint between two steps: other tasks run meanwhile."""
    from broker.transaction import service as service_module

    monkeypatch.setattr(service_module, "READ_STEP", 4, raising=False)
    async with (
        running_broker(tmp_path, overrides=NO_CHECKS) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        service = broker.transactions
        assert service is not None
        for i in range(40):
            sent = await send_half(client, addr, f"m{i}".encode())
            await end_tx(client, addr, end_fields(sent, ROLLBACK))
        await send_half(client, addr, b"young")  # holds the progress: read again every round
        await wait_until(lambda: len(queue_records(broker, TRANS_OP_HALF_TOPIC)) == 40, "ops")
        await wait_until(lambda: len(queue_records(broker, TRANS_HALF_TOPIC)) == 41, "halves")

        async def ticks_during(step: Callable[[], Awaitable[object]]) -> int:
            ticks = 0
            done = False

            async def ticker() -> None:
                nonlocal ticks
                while not done:
                    await trio.lowlevel.checkpoint()
                    ticks += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                await trio.lowlevel.checkpoint()  # the ticker is waiting for its turn
                await step()
                done = True
            return ticks

        assert await ticks_during(service.check_once) >= 40 // 4
        assert service.half_progress == 40
        assert await ticks_during(service.check_once) >= 1  # the young one only: one step
        listed: list[HalfMessage] = []

        async def list_all() -> None:
            listed.extend(await service.list_pending())

        await service.check_once()
        assert await ticks_during(list_all) >= 1
        assert [h.key for h in listed] == [40]


@pytest.mark.parametrize("pending_kind", ["immune", "checked"])
async def test_a_long_pending_half_message_keeps_no_decisions_of_later_transactions(
    tmp_path: Path, pending_kind: str
) -> None:
    """One half message pending for long (inside a 3600 s CHECK_IMMUNITY_TIME_IN_SECONDS, or
    checked round after round with nobody to answer) must not make the broker keep every later
    decision and hold the op progress: what is remembered, and re-read on a restart, is bounded
    by what is pending, as in RocketMQ. Its decision still comes once, late or not."""
    overrides = {**NO_CHECKS, "transactionTimeOut": "0"}
    extra = (
        {MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "3600"} if pending_kind == "immune" else {}
    )
    committed = 0
    async with (
        running_broker(tmp_path, overrides=overrides) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        service, store = broker.transactions, broker.store
        assert service is not None
        assert store is not None
        first = await send_half(client, addr, b"pending", extra=extra)
        for round_ in range(3):
            for _ in range(20):
                sent = await send_half(client, addr, f"c{committed}".encode())
                await end_tx(client, addr, end_fields(sent, COMMIT))
                committed += 1
            ops = committed
            await wait_until(lambda: len(queue_records(broker, TRANS_OP_HALF_TOPIC)) == ops, "ops")  # noqa: B023
            await wait_until(
                lambda: store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) >= ops + 1 + round_,  # noqa: B023
                "the half messages",
            )
            await service.check_once()
            assert service.decided == {}, f"round {round_}"
            assert service.op_progress == ops, f"round {round_}"
            assert service.is_decided(0) is False
        await wait_until(lambda: [h.key for h in service.pending()] == [0], "still pending")
    async with (
        running_broker(tmp_path, overrides=overrides) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        service = broker.transactions
        assert service is not None
        assert (service.op_progress, service.decided) == (committed, {})  # nothing to re-read
        assert [h.key for h in service.pending()] == [0]
        resp = await end_tx(client, addr, end_fields(first, COMMIT))  # the first copy's offsets
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "")
        await wait_until(lambda: len(queue_records(broker, TOPIC)) == committed + 1, "commit")
        await service.check_once()
        again = await end_tx(client, addr, end_fields(first, COMMIT))
        assert again.remark == "already decided"
        assert service.pending() == []
        bodies = sorted(m.body for m in queue_records(broker, TOPIC))
        assert bodies == sorted([b"pending", *(f"c{i}".encode() for i in range(committed))])


async def test_a_re_stored_copy_not_yet_in_the_consume_queue_keeps_its_transaction_pending(
    store: MessageStore, manual_clock: ManualClock, tmp_path: Path
) -> None:
    """A round may read the half queue before the copy the last round re-stored is dispatched
    to the consume queue (here dispatch runs only when the test says so): the transaction is
    still pending, not taken as decided, so a commit still lands and the copy is checked."""
    service = TransactionService(
        store,
        StoreServices(store),  # its loops are not started: nothing dispatches behind our back
        ConsumerOffsetManager(tmp_path / "config"),
        ClientManager(),
        timeout_ms=0,
        clock_ms=manual_clock,
    )
    props = {MessageConst.PGROUP: GROUP, MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "60"}
    prepared = MessageRecord(
        TOPIC,
        b"pay 10",
        properties=props,
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
        born_timestamp=manual_clock.now,
    )
    assert to_half_message(prepared)
    put = store.put_messages([prepared])
    assert put.status.ok
    store.dispatch_pending()
    await service.check_once()  # inside its immunity: re-stored, the copy not dispatched yet
    await service.check_once()  # reads the half queue without that copy
    assert not service.is_decided(0)
    store.dispatch_pending()
    manual_clock.advance(61_000)
    await service.check_once()  # immunity over: checked (nobody to ask), re-stored again
    store.dispatch_pending()
    [listed] = service.pending()
    assert (listed.key, listed.check_times) == (0, 1)
    first = store.lookup_message_by_offset(put.phys_offsets[0])  # a late answer to the first
    assert first is not None
    assert await service.end_transaction(decode_record(first), COMMIT) == EndOutcome.COMMITTED
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    store.dispatch_pending()
    assert store.get_max_offset_in_queue(TOPIC, 0) == 1
    assert service.pending() == []
