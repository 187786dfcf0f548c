"""The store-status -> response-code table (facts §5.4) covers every status."""

from __future__ import annotations

import pytest

from broker.status_codes import (
    PULL_TABLE,
    PUT_TABLE,
    pull_response_code,
    put_response_code,
)
from remoting.codes import ResponseCode
from store.status import GetStatus, PutStatus


def test_every_put_status_is_mapped() -> None:
    assert set(PUT_TABLE) == set(PutStatus)
    for status in PutStatus:
        code, remark = put_response_code(status)
        assert isinstance(code, ResponseCode)
        assert isinstance(remark, str)


def test_every_get_status_is_mapped() -> None:
    assert set(PULL_TABLE) == set(GetStatus)
    for status in GetStatus:
        assert isinstance(pull_response_code(status, 0), ResponseCode)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (PutStatus.PUT_OK, ResponseCode.SUCCESS),
        (PutStatus.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_DISK_TIMEOUT),
        (PutStatus.FLUSH_SLAVE_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT),
        (PutStatus.SLAVE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE),
        (PutStatus.SERVICE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE),
        (PutStatus.MESSAGE_ILLEGAL, ResponseCode.MESSAGE_ILLEGAL),
        (PutStatus.PROPERTIES_SIZE_EXCEEDED, ResponseCode.MESSAGE_ILLEGAL),
        (PutStatus.CREATE_MAPPED_FILE_FAILED, ResponseCode.SYSTEM_ERROR),
        (PutStatus.OS_PAGE_CACHE_BUSY, ResponseCode.SYSTEM_ERROR),
        (PutStatus.UNKNOWN_ERROR, ResponseCode.SYSTEM_ERROR),
    ],
)
def test_put_codes(status: PutStatus, code: ResponseCode) -> None:
    assert put_response_code(status)[0] is code


# (status, request offset, expected code); nextBeginOffset is the store's (tests/store).
PULL_CASES = [
    (GetStatus.FOUND, 3, ResponseCode.SUCCESS),
    (GetStatus.NO_MATCHED_MESSAGE, 3, ResponseCode.PULL_RETRY_IMMEDIATELY),
    (GetStatus.MESSAGE_WAS_REMOVING, 3, ResponseCode.PULL_RETRY_IMMEDIATELY),
    (GetStatus.NO_MESSAGE_IN_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
    (GetStatus.NO_MESSAGE_IN_QUEUE, 5, ResponseCode.PULL_OFFSET_MOVED),
    (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
    (GetStatus.NO_MATCHED_LOGIC_QUEUE, 5, ResponseCode.PULL_OFFSET_MOVED),
    (GetStatus.OFFSET_TOO_SMALL, 1, ResponseCode.PULL_OFFSET_MOVED),
    (GetStatus.OFFSET_OVERFLOW_ONE, 10, ResponseCode.PULL_NOT_FOUND),
    (GetStatus.OFFSET_OVERFLOW_BADLY, 15, ResponseCode.PULL_OFFSET_MOVED),
    (GetStatus.OFFSET_FOUND_NULL, 4, ResponseCode.PULL_NOT_FOUND),
]


@pytest.mark.parametrize(("status", "offset", "code"), PULL_CASES)
def test_pull_codes(status: GetStatus, offset: int, code: ResponseCode) -> None:
    assert pull_response_code(status, offset) is code


def test_pull_cases_cover_every_status() -> None:
    assert {case[0] for case in PULL_CASES} == set(GetStatus)
