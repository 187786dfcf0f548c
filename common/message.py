"""Message constants shared by the store, the broker and the client.

Names and values follow Apache RocketMQ's ``MessageConst`` and ``MessageSysFlag``.
"""

from __future__ import annotations

from typing import Final


class MessageConst:
    """Well-known property keys (RocketMQ's ``MessageConst``)."""

    KEYS: Final = "KEYS"
    TAGS: Final = "TAGS"
    WAIT: Final = "WAIT"
    DELAY: Final = "DELAY"
    RETRY_TOPIC: Final = "RETRY_TOPIC"
    REAL_TOPIC: Final = "REAL_TOPIC"
    REAL_QID: Final = "REAL_QID"
    TRAN_MSG: Final = "TRAN_MSG"
    PGROUP: Final = "PGROUP"
    MIN_OFFSET: Final = "MIN_OFFSET"
    MAX_OFFSET: Final = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    UNIQ_KEY: Final = "UNIQ_KEY"
    MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
    RECONSUME_TIME: Final = "RECONSUME_TIME"
    CONSUME_START_TIME: Final = "CONSUME_START_TIME"
    TRAN_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    SHARDING_KEY: Final = "__SHARDINGKEY"
    PROPERTY_INNER_NUM: Final = "INNER_NUM"
    """Messages inside an inner-batch record (INNER_BATCH_FLAG), a decimal string."""
    KEY_SEPARATOR: Final = " "


PULL_FLAG_COMMIT_OFFSET: Final = 0x1
"""PULL_MESSAGE's ``sysFlag`` bit saying its ``commitOffset`` is to be committed
(RocketMQ's ``PullSysFlag.FLAG_COMMIT_OFFSET``)."""
PULL_FLAG_SUSPEND: Final = 0x2
"""PULL_MESSAGE's ``sysFlag`` bit asking the broker to hold a pull that finds nothing for up to
its ``suspendTimeoutMillis`` (RocketMQ's ``PullSysFlag.FLAG_SUSPEND``): without it the broker
answers at once, whatever ``suspendTimeoutMillis`` says."""


class MessageSysFlag:
    """Bits of the record's SYSFLAG field (RocketMQ's ``MessageSysFlag``)."""

    COMPRESSED_FLAG: Final = 0x1
    MULTI_TAGS_FLAG: Final = 0x2
    TRANSACTION_NOT_TYPE: Final = 0x0
    TRANSACTION_PREPARED_TYPE: Final = 0x4
    TRANSACTION_COMMIT_TYPE: Final = 0x8
    TRANSACTION_ROLLBACK_TYPE: Final = 0xC
    TRANSACTION_MASK: Final = 0xC
    BORNHOST_V6_FLAG: Final = 0x10
    STOREHOSTADDRESS_V6_FLAG: Final = 0x20
    NEED_UNWRAP_FLAG: Final = 0x40
    INNER_BATCH_FLAG: Final = 0x80
    COMPRESSION_LZ4: Final = 0x100
    COMPRESSION_ZSTD: Final = 0x200
    COMPRESSION_ZLIB: Final = 0x300
    COMPRESSION_MASK: Final = 0x700

    @staticmethod
    def transaction_value(sys_flag: int) -> int:
        """Return the transaction type bits of ``sys_flag``."""
        return sys_flag & MessageSysFlag.TRANSACTION_MASK

    @staticmethod
    def is_consumable(sys_flag: int) -> bool:
        """True when a record belongs in a consume queue (not prepared, not rolled back)."""
        t = sys_flag & MessageSysFlag.TRANSACTION_MASK
        return (
            t == MessageSysFlag.TRANSACTION_NOT_TYPE or t == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        )
