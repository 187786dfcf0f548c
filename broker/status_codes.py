"""THE table from store outcomes to response codes (facts §5.4).

- :data:`PUT_TABLE` maps every :class:`store.status.PutStatus` to ``(ResponseCode, remark)``
  (RocketMQ's ``SendMessageProcessor#handlePutMessageResult``); an empty remark means "use the
  store's remark, if any".
- :data:`PULL_TABLE` maps every :class:`store.status.GetStatus` to a :class:`PullRule`: the response
  code and how ``nextBeginOffset`` is chosen (``PullMessageProcessor`` / ``DefaultMessageStore
  #getMessage``). NO_MESSAGE_IN_QUEUE / NO_MATCHED_LOGIC_QUEUE answer PULL_OFFSET_MOVED when the
  requested offset is not 0, else PULL_NOT_FOUND.

Both tables must cover their whole enum (a test asserts it), so a new store status cannot be
forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from remoting.codes import ResponseCode
from store.status import GetStatus, PutStatus

PUT_TABLE: MappingProxyType[PutStatus, tuple[ResponseCode, str]] = MappingProxyType(
    {
        PutStatus.PUT_OK: (ResponseCode.SUCCESS, ""),
        PutStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, ""),
        PutStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, ""),
        PutStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, ""),
        PutStatus.SERVICE_NOT_AVAILABLE: (
            ResponseCode.SERVICE_NOT_AVAILABLE,
            "service not available now, maybe disk full or the store is not running",
        ),
        PutStatus.CREATE_MAPPED_FILE_FAILED: (
            ResponseCode.SYSTEM_ERROR,
            "create mapped file failed, server is busy or broken.",
        ),
        PutStatus.MESSAGE_ILLEGAL: (
            ResponseCode.MESSAGE_ILLEGAL,
            "the message is illegal, maybe msg body or properties length not matched.",
        ),
        PutStatus.PROPERTIES_SIZE_EXCEEDED: (
            ResponseCode.MESSAGE_ILLEGAL,
            "the message is illegal, maybe msg properties length limit 32k.",
        ),
        PutStatus.OS_PAGE_CACHE_BUSY: (
            ResponseCode.SYSTEM_ERROR,
            "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
        ),
        PutStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
    }
)


@dataclass(frozen=True, slots=True)
class PullRule:
    """Response code for one GetStatus (``nextBeginOffset`` is the store's, per facts §5.4).

    ``code_if_offset_nonzero``, when set, replaces ``code`` for a request offset other than 0.
    """

    code: ResponseCode
    code_if_offset_nonzero: ResponseCode | None = None


PULL_TABLE: MappingProxyType[GetStatus, PullRule] = MappingProxyType(
    {
        GetStatus.FOUND: PullRule(ResponseCode.SUCCESS),
        GetStatus.NO_MATCHED_MESSAGE: PullRule(ResponseCode.PULL_RETRY_IMMEDIATELY),
        GetStatus.MESSAGE_WAS_REMOVING: PullRule(ResponseCode.PULL_RETRY_IMMEDIATELY),
        GetStatus.NO_MESSAGE_IN_QUEUE: PullRule(
            ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED
        ),
        GetStatus.NO_MATCHED_LOGIC_QUEUE: PullRule(
            ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED
        ),
        GetStatus.OFFSET_TOO_SMALL: PullRule(ResponseCode.PULL_OFFSET_MOVED),
        GetStatus.OFFSET_OVERFLOW_ONE: PullRule(ResponseCode.PULL_NOT_FOUND),
        GetStatus.OFFSET_OVERFLOW_BADLY: PullRule(ResponseCode.PULL_OFFSET_MOVED),
        GetStatus.OFFSET_FOUND_NULL: PullRule(ResponseCode.PULL_NOT_FOUND),
    }
)


def put_response_code(status: PutStatus) -> tuple[ResponseCode, str]:
    """``(code, remark)`` answering a put that ended with ``status``."""
    return PUT_TABLE[status]


def pull_response_code(status: GetStatus, request_offset: int = 0) -> ResponseCode:
    """The pull response code for ``status`` (``request_offset`` matters for empty queues)."""
    rule = PULL_TABLE[status]
    if rule.code_if_offset_nonzero is not None and request_offset != 0:
        return rule.code_if_offset_nonzero
    return rule.code
