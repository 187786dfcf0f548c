"""Outcomes of store calls, as values (RocketMQ's ``PutMessageStatus`` and ``GetMessageStatus``).

The broker maps these to response codes in one table; the store never raises for them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class PutStatus(enum.Enum):
    """Result of a put (RocketMQ's ``PutMessageStatus``)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def ok(self) -> bool:
        """True when the message is stored (a flush timeout still stored it)."""
        return self in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)


class GetStatus(enum.Enum):
    """Result of a read from a consume queue (RocketMQ's ``GetMessageStatus``)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class PutResult:
    """Outcome of ``put_message(s)``: where each stored message landed.

    ``phys_offsets[i]``/``queue_offsets[i]`` belong to the i-th message; ``end_offset`` is the
    commitlog offset just past the last record (what a sync flush must cover).
    """

    status: PutStatus
    phys_offsets: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    store_timestamp: int = 0
    wrote_bytes: int = 0
    end_offset: int = 0
    remark: str = ""

    @property
    def msg_num(self) -> int:
        """How many messages were stored."""
        return len(self.phys_offsets)


@dataclass(slots=True)
class GetResult:
    """Outcome of ``get_messages``: raw records plus where to continue.

    ``records`` holds each message's raw commitlog record; ``next_begin_offset`` is the logical
    offset to ask for next, whatever the status.
    """

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    total_size: int = 0

    @property
    def message_count(self) -> int:
        """How many records were returned."""
        return len(self.records)


@dataclass(slots=True)
class QueryResult:
    """Outcome of ``query_messages``: raw records whose key matched, newest index first."""

    records: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0
