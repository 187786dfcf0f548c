"""The pure record builders of broker.transaction.messages."""

from __future__ import annotations

from broker.transaction import messages as tx
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord
from common.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

PREPARED = MessageSysFlag.TRANSACTION_PREPARED_TYPE


def half(queue_offset: int = 5) -> MessageRecord:
    msg = MessageRecord("Pay", b"x", queue_id=3, sys_flag=PREPARED | 0x1, properties={"K": "v"})
    assert tx.to_half_message(msg)
    msg.queue_offset, msg.physical_offset = queue_offset, 1000
    return msg


def test_half_message_keeps_the_destination_and_drops_the_prepared_bits() -> None:
    msg = half()
    assert (msg.topic, msg.queue_id) == (TRANS_HALF_TOPIC, 0)
    assert msg.sys_flag == 0x1  # compression bit kept, transaction type NOT_TYPE
    assert tx.real_destination(msg) == ("Pay", 3)
    plain = MessageRecord("Pay", b"x")
    assert not tx.to_half_message(plain)
    assert plain.topic == "Pay"


def test_renewed_copies_share_the_key_and_count_checks() -> None:
    first = half(5)
    assert tx.key_of(first) == 5
    second = tx.renewed_record(first)
    second.queue_offset = 9
    third = tx.renewed_record(second)
    third.queue_offset = 12
    assert [tx.key_of(r) for r in (second, third)] == [5, 5]
    assert [tx.check_times(r) for r in (first, second, third)] == [0, 1, 2]
    assert third.topic == TRANS_HALF_TOPIC


def test_commit_op_and_discard_records() -> None:
    rec = tx.renewed_record(half(5))
    rec.queue_offset, rec.physical_offset = 9, 2000
    real = tx.commit_record(rec)
    assert real is not None
    assert (real.topic, real.queue_id) == ("Pay", 3)
    assert real.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_COMMIT_TYPE
    assert real.prepared_transaction_offset == 2000
    for gone in (MessageConst.REAL_TOPIC, MessageConst.REAL_QID, MessageConst.TRAN_MSG):
        assert gone not in real.properties
    assert real.properties["K"] == "v"
    op = tx.op_record(rec, tx.OP_COMMIT)
    assert (op.topic, op.body, op.tags) == (TRANS_OP_HALF_TOPIC, b"5", "d")
    assert tx.op_key(op) == 5
    moved = tx.discarded_record(rec)
    assert moved.topic == TRANS_CHECK_MAX_TIME_TOPIC
    broken = MessageRecord(TRANS_HALF_TOPIC, b"x")
    assert tx.commit_record(broken) is None


def test_an_immunity_copy_keeps_the_key_and_the_check_count() -> None:
    """A half message re-stored inside its CHECK_IMMUNITY_TIME_IN_SECONDS was not checked:
    same key, same TRANSACTION_CHECK_TIMES (RocketMQ's renewImmunityHalfMessageInner)."""
    first = half(5)
    copy = tx.renewed_record(first, checked=False)
    copy.queue_offset = 9
    assert tx.key_of(copy) == 5
    assert MessageConst.TRANSACTION_CHECK_TIMES not in copy.properties
    checked = tx.renewed_record(copy)
    checked.queue_offset = 12
    again = tx.renewed_record(checked, checked=False)
    assert [tx.check_times(r) for r in (copy, checked, again)] == [0, 1, 1]
    assert tx.key_of(again) == 5
