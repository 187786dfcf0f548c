"""Header field parsing (remoting/headers.py): what a handler accepts and what it refuses."""

from __future__ import annotations

import pytest

from remoting.command import RemotingCommand
from remoting.headers import BadRequestError, header_int, opt_int


def with_field(value: object) -> RemotingCommand:
    return RemotingCommand.request(10, {"n": value}, opaque=1)  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("value", "want"),
    [(5, 5), ("5", 5), (" 7 ", 7), ("-1", -1), (2**63 - 1, 2**63 - 1), (str(-(2**63)), -(2**63))],
)
def test_header_int_takes_ints_and_decimal_strings_within_a_long(value: object, want: int) -> None:
    assert header_int(with_field(value), "n") == want


@pytest.mark.parametrize(
    "value", [True, "abc", "1.5", "", 2**63, str(-(2**63) - 1), "99999999999999999999"]
)
def test_header_int_refuses_the_rest_as_a_bad_request(value: object) -> None:
    with pytest.raises(BadRequestError, match="'n'"):
        header_int(with_field(value), "n")


def test_missing_and_optional_ints() -> None:
    empty = RemotingCommand.request(10, {}, opaque=1)
    with pytest.raises(BadRequestError, match="missing header field 'n'"):
        header_int(empty, "n")
    assert opt_int(empty, "n", 3) == 3
    assert opt_int(with_field(""), "n", 3) == 3
