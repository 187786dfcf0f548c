"""Pure record builders of transactional messages (RocketMQ's ``TransactionalMessageBridge``
and ``EndTransactionProcessor#endMessageTransaction``).

::

    half      PREPARED send -> RMQ_SYS_TRANS_HALF_TOPIC queue 0, sysflag NOT_TYPE,
              REAL_TOPIC / REAL_QID = the real destination (so it gets a queue offset)
    commit    half record -> REAL_TOPIC / REAL_QID, sysflag COMMIT_TYPE, REAL_* and TRAN_MSG
              removed, preparedTransactionOffset = the half record's commitlog offset
    op        RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, TAGS "d", body = the decided key (ASCII int),
              TRAN_OP = commit | rollback | discard (minimq's own property, for diagnosis)
    renewed   a checked half record re-stored with TRANSACTION_CHECK_TIMES + 1 (a half
              message still inside its CHECK_IMMUNITY_TIME_IN_SECONDS: re-stored unchecked,
              with the same TRANSACTION_CHECK_TIMES, as RocketMQ's renewImmunityHalfMessageInner)
    discarded a half record moved to TRANS_CHECK_MAX_TIME_TOPIC queue 0

The *key* of a half message is the queue offset of its first half record: re-stored copies
carry it in TRAN_PREPARED_QUEUE_OFFSET, so every copy of one transaction shares one key and one
decision (an op for the key settles all copies).
"""

from __future__ import annotations

from typing import Final

from common.digits import parse_uint
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord
from common.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

REMOVE_TAG: Final = "d"
"""RocketMQ's ``TransactionalMessageUtil.REMOVE_TAG``: the tag of every op message."""
OP_KIND: Final = "TRAN_OP"
"""minimq's own op property: which decision the op records."""
OP_COMMIT: Final = "commit"
OP_ROLLBACK: Final = "rollback"
OP_DISCARD: Final = "discard"
SYS_TRANS_GROUP: Final = "CID_SYS_RMQ_TRANS"
"""The internal group whose consumer offsets hold the check service's progress."""

_TX_MASK: Final = MessageSysFlag.TRANSACTION_MASK


def is_prepared(sys_flag: int) -> bool:
    """True when ``sys_flag`` marks a half (prepared) message."""
    return sys_flag & _TX_MASK == MessageSysFlag.TRANSACTION_PREPARED_TYPE


def to_half_message(msg: MessageRecord) -> bool:
    """Redirect a prepared message to the half topic in place; True when it was prepared.

    A TRAN_PREPARED_QUEUE_OFFSET the sender set is dropped: only the broker's re-stored copies
    carry one, and a copied key would tie the new transaction to another's decision.
    """
    if not is_prepared(msg.sys_flag):
        return False
    msg.properties.pop(MessageConst.TRAN_PREPARED_QUEUE_OFFSET, None)
    msg.properties[MessageConst.REAL_TOPIC] = msg.topic
    msg.properties[MessageConst.REAL_QID] = str(msg.queue_id)
    msg.sys_flag = msg.sys_flag & ~_TX_MASK  # TRANSACTION_NOT_TYPE: gets a queue offset
    msg.topic = TRANS_HALF_TOPIC
    msg.queue_id = 0
    return True


def key_of(rec: MessageRecord) -> int:
    """The transaction key of a half record (its first copy's queue offset)."""
    key = parse_uint(rec.properties.get(MessageConst.TRAN_PREPARED_QUEUE_OFFSET))
    return rec.queue_offset if key is None else key


def check_times(rec: MessageRecord) -> int:
    """TRANSACTION_CHECK_TIMES of a half record (0 when absent or malformed)."""
    return parse_uint(rec.properties.get(MessageConst.TRANSACTION_CHECK_TIMES), max_digits=9) or 0


def real_destination(rec: MessageRecord) -> tuple[str, int] | None:
    """``(REAL_TOPIC, REAL_QID)`` of a half record, or None when missing or malformed."""
    topic = rec.properties.get(MessageConst.REAL_TOPIC)
    qid = parse_uint(rec.properties.get(MessageConst.REAL_QID), max_digits=9)
    if not topic or qid is None:
        return None
    return topic, qid


def _copy(rec: MessageRecord, topic: str, queue_id: int, props: dict[str, str]) -> MessageRecord:
    return MessageRecord(
        topic,
        rec.body,
        queue_id=queue_id,
        flag=rec.flag,
        properties=props,
        sys_flag=rec.sys_flag & ~_TX_MASK,
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
        reconsume_times=rec.reconsume_times,
    )


def commit_record(rec: MessageRecord) -> MessageRecord | None:
    """The message a commit stores in the real topic; None when the half record has no target."""
    dest = real_destination(rec)
    if dest is None:
        return None
    props = dict(rec.properties)
    for name in (
        MessageConst.REAL_TOPIC,
        MessageConst.REAL_QID,
        MessageConst.TRAN_MSG,
        MessageConst.TRAN_PREPARED_QUEUE_OFFSET,
    ):
        props.pop(name, None)
    out = _copy(rec, dest[0], dest[1], props)
    out.sys_flag |= MessageSysFlag.TRANSACTION_COMMIT_TYPE
    out.prepared_transaction_offset = rec.physical_offset
    return out


def op_record(rec: MessageRecord, kind: str) -> MessageRecord:
    """The op message recording ``kind`` for the half record's key."""
    return MessageRecord(
        TRANS_OP_HALF_TOPIC,
        str(key_of(rec)).encode(),
        queue_id=0,
        properties={MessageConst.TAGS: REMOVE_TAG, OP_KIND: kind},
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
    )


def op_key(rec: MessageRecord) -> int | None:
    """The key an op record settles, or None when its body is not an offset."""
    return parse_uint(rec.body.decode("ascii", "replace"))


def renewed_record(rec: MessageRecord, *, checked: bool = True) -> MessageRecord:
    """A half record re-stored for its next check: same key, TRANSACTION_CHECK_TIMES + 1
    (``checked`` False: the same TRANSACTION_CHECK_TIMES, for a copy re-stored unchecked)."""
    props = dict(rec.properties)
    props[MessageConst.TRAN_PREPARED_QUEUE_OFFSET] = str(key_of(rec))
    times = check_times(rec)
    if checked or MessageConst.TRANSACTION_CHECK_TIMES in props:
        props[MessageConst.TRANSACTION_CHECK_TIMES] = str(times + 1 if checked else times)
    return _copy(rec, TRANS_HALF_TOPIC, 0, props)


def discarded_record(rec: MessageRecord) -> MessageRecord:
    """The copy of a half record stored in TRANS_CHECK_MAX_TIME_TOPIC after the last check."""
    return _copy(rec, TRANS_CHECK_MAX_TIME_TOPIC, 0, dict(rec.properties))


__all__ = [
    "OP_COMMIT",
    "OP_DISCARD",
    "OP_KIND",
    "OP_ROLLBACK",
    "REMOVE_TAG",
    "SYS_TRANS_GROUP",
    "check_times",
    "commit_record",
    "discarded_record",
    "is_prepared",
    "key_of",
    "op_key",
    "op_record",
    "real_destination",
    "renewed_record",
    "to_half_message",
]
