"""The send processor's property checks (the batch path runs them per message)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.processors.send import IllegalMessageError, _check_properties
from common.record import MAX_PROPERTIES_LENGTH, encode_properties

SEPARATORS = ("\x01", "\x02")


@pytest.mark.parametrize(
    ("props", "reason"),
    [
        ({"a": "x\x01y"}, "illegal property 'a'"),
        ({"a\x02": "v"}, "illegal property"),
        ({"": "v"}, "illegal property ''"),
        ({"a": 1}, "must map str to str"),
        ({"a": "x" * MAX_PROPERTIES_LENGTH}, "exceed"),
    ],
)
def test_bad_properties_are_refused_with_a_reason(props: dict[str, object], reason: str) -> None:
    with pytest.raises(IllegalMessageError, match=reason):
        _check_properties(props)


@given(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=6))
def test_a_map_is_accepted_exactly_when_no_name_is_empty_or_holds_a_separator(
    props: dict[str, str],
) -> None:
    legal = all(k and not any(s in k or s in v for s in SEPARATORS) for k, v in props.items())
    if legal:
        assert _check_properties(props) == props
    else:
        with pytest.raises(IllegalMessageError):
            _check_properties(props)


@pytest.mark.parametrize("char", ["x", "é", "€"])
def test_size_limit_counts_encoded_bytes(char: str) -> None:
    """``{"a": v}`` encodes to ``a\\x01v\\x02``: 3 bytes plus the UTF-8 of the value."""
    width = len(char.encode())
    fits = char * ((MAX_PROPERTIES_LENGTH - 3) // width)
    assert _check_properties({"a": fits}) == {"a": fits}
    over = fits + char * (1 + (MAX_PROPERTIES_LENGTH - 3) % width)
    assert len(encode_properties({"a": over})) > MAX_PROPERTIES_LENGTH
    with pytest.raises(IllegalMessageError, match="exceed"):
        _check_properties({"a": over})
