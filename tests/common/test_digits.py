"""parse_uint: ASCII digits only, bounded, never an exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.digits import parse_uint


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("007", 7),
        ("9223372036854775807", 2**63 - 1),
        ("", None),
        (None, None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1.0", None),
        ("²", None),  # isdigit() but not int()
        ("٣", None),  # int() but not ASCII
        ("1" * 20, None),
        ("9" * 5000, None),  # int() would raise past sys.get_int_max_str_digits()
    ],
)
def test_parse_uint(text: str | None, expected: int | None) -> None:
    assert parse_uint(text) == expected


@given(st.text(max_size=30))
def test_parse_uint_never_raises_and_agrees_with_int(text: str) -> None:
    value = parse_uint(text)
    if value is not None:
        assert value == int(text)
        assert str(value) == text.lstrip("0").rjust(1, "0")
