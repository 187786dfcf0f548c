"""minimq's message store: mmap-backed commitlog, consume queues, index and checkpoint.

The layout and record formats are Apache RocketMQ's (see README, "On-disk format").
``MessageStore`` is synchronous; ``store.services`` runs its background loops under trio.
"""

from common.record import MessageRecord
from store.config import FlushDiskType, StoreConfig
from store.errors import (
    CorruptFileError,
    MappedFileCreateError,
    StoreError,
    StoreLockedError,
)
from store.message_store import ArrivalListener, MessageStore
from store.status import GetResult, GetStatus, PutResult, PutStatus, QueryResult

__all__ = [
    "ArrivalListener",
    "CorruptFileError",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MappedFileCreateError",
    "MessageRecord",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "QueryResult",
    "StoreConfig",
    "StoreError",
    "StoreLockedError",
]
