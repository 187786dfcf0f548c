"""An END_TRANSACTION whose put the store refuses, while a check round runs: the producer gets
the store's error, the transaction stays pending (a restart checks it again), and it is
committed once when decided again; a round never passes it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import trio

from broker.transaction import PutFailedError, TransactionService
from common.record import MessageRecord
from common.topic import TRANS_HALF_TOPIC
from remoting.client import RemotingClient
from remoting.codes import ResponseCode
from tests.broker.inprocess import LIMIT, running_broker, send_req, wait_until
from tests.broker.txn_helpers import COMMIT, TOPIC, end_fields, end_tx, queue_records, send_half
from tests.store.faults import break_commitlog_flush

RACES = 40
"""Refused decisions raced against check rounds: trio runs the two tasks' next steps in
either order, so a round meets a decision being stored in about half of them."""
OVERRIDES = {
    "transactionCheckInterval": "3600000",  # the test runs the rounds
    "transactionTimeOut": "3600000",  # a round stops at the pending half message
    "flushDiskType": "SYNC_FLUSH",
}


async def _refused_decision(service: TransactionService, half: MessageRecord) -> None:
    with contextlib.suppress(PutFailedError):  # refused: the store takes no writes
        await service.end_transaction(half, COMMIT)


async def test_a_commit_the_store_refuses_during_a_round_stays_pending(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path, overrides=OVERRIDES) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        service, store = broker.transactions, broker.store
        assert service is not None
        assert store is not None
        sent = await send_half(client, addr, b"pay 10")
        uniq = sent.ext_fields["transactionId"]
        await wait_until(lambda: len(queue_records(broker, TRANS_HALF_TOPIC)) == 1, "half")
        [half] = queue_records(broker, TRANS_HALF_TOPIC)
        break_commitlog_flush(store)  # the next flush fails: the store refuses puts from then
        trigger = await client.invoke(addr, send_req(TOPIC, b"unflushed", queue_id=1))
        assert trigger.code == ResponseCode.FLUSH_DISK_TIMEOUT, trigger.remark
        refused = await end_tx(client, addr, end_fields(sent, COMMIT))
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused.remark
        for _ in range(RACES):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_refused_decision, service, half)
                nursery.start_soon(service.check_once)
            assert service.half_progress == 0
            assert [h.msg_id for h in service.pending()] == [uniq]
    async with (
        running_broker(tmp_path, overrides=OVERRIDES) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        service = broker.transactions
        assert service is not None
        assert [h.msg_id for h in service.pending()] == [uniq]
        committed = await end_tx(client, addr, end_fields(sent, COMMIT))
        assert (committed.code, committed.remark) == (ResponseCode.SUCCESS, "")
        again = await end_tx(client, addr, end_fields(sent, COMMIT))
        assert again.remark == "already decided"
        await wait_until(lambda: len(queue_records(broker, TOPIC)) == 1, "the commit")
        await service.check_once()
        assert service.pending() == []
        assert [m.body for m in queue_records(broker, TOPIC)] == [b"pay 10"]
