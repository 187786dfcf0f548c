"""Tests for Java ``String.hashCode`` in Python (common/hashing.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.hashing import (
    index_key_hash,
    index_key_hash_prefixed,
    index_key_hashes,
    index_key_hashes_prefixed,
    java_string_hash,
    java_string_hashes,
    prefix_hash,
)

INT_MIN = -(2**31)

# rocketmq-facts §4 (derived) plus a few computed by hand from h = 31*h + c.
VECTORS = [
    ("TagA", 2598919),
    ("TagB", 2598920),
    ("*", 42),
    ("abc", 96354),
    ("TOPIC#KEY", -1120485173),
    ("", 0),
    ("a", 97),
    ("é", 0xE9),
    # U+1F600 is the surrogate pair D83D DE00: 31 * 0xD83D + 0xDE00
    ("😀", 31 * 0xD83D + 0xDE00),
    # a famous string whose hashCode is Integer.MIN_VALUE
    ("polygenelubricants", INT_MIN),
]

texts = st.text(max_size=40) | st.text(alphabet=st.characters(min_codepoint=0x10000), max_size=8)


def reference_hash(s: str) -> int:
    """The definition, spelled out: 31*h + UTF-16 code unit, wrapped to signed 32 bits."""
    h = 0
    for ch in s:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + (cp & 0x3FF)]
        for u in units:
            h = (h * 31 + u) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(("text", "expected"), VECTORS)
def test_vectors(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected
    assert reference_hash(text) == expected
    assert java_string_hashes([text]).tolist() == [expected]


def test_batch_of_vectors() -> None:
    out = java_string_hashes([t for t, _ in VECTORS])
    assert out.dtype == np.int32
    assert out.tolist() == [h for _, h in VECTORS]


def test_empty_batch() -> None:
    assert java_string_hashes([]).tolist() == []
    assert java_string_hashes(["", ""]).tolist() == [0, 0]
    assert index_key_hashes([]).tolist() == []


@given(texts)
def test_scalar_matches_definition(s: str) -> None:
    assert java_string_hash(s) == reference_hash(s)


@given(st.lists(texts, max_size=12))
def test_batch_matches_scalar(strings: list[str]) -> None:
    assert java_string_hashes(strings).tolist() == [java_string_hash(s) for s in strings]
    assert index_key_hashes(strings).tolist() == [index_key_hash(s) for s in strings]


def test_batch_handles_long_strings() -> None:
    # longer than the initial power table (256) and mixed with ASCII / empty strings
    strings = ["x" * 1000, "", "é" * 300, "a", "😀" * 200]
    assert java_string_hashes(strings).tolist() == [reference_hash(s) for s in strings]


def test_index_key_hash_maps_int_min_to_zero() -> None:
    assert java_string_hash("polygenelubricants") == INT_MIN
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hashes(["polygenelubricants", "TOPIC#KEY"]).tolist() == [0, 1120485173]
    ph = prefix_hash("polygene")
    assert index_key_hash_prefixed(ph, "lubricants") == 0
    assert index_key_hash_prefixed(prefix_hash("TOPIC#"), "KEY") == 1120485173


@given(st.lists(texts, max_size=8))
def test_index_key_hash_is_abs_in_range(strings: list[str]) -> None:
    for s, h in zip(strings, index_key_hashes(strings).tolist(), strict=True):
        assert 0 <= h < 2**31
        raw = java_string_hash(s)
        assert h == (0 if raw == INT_MIN else abs(raw))


@given(
    prefix=st.text(max_size=20),
    suffixes=st.lists(st.text(max_size=40), min_size=1, max_size=30),
)
def test_prefixed_index_hashes_equal_hashing_the_whole_key(
    prefix: str, suffixes: list[str]
) -> None:
    """hash(p + s) combined from hash(p) and hash(s) equals hashing the joined key."""
    direct = [index_key_hash(prefix + s) for s in suffixes]
    ph = prefix_hash(prefix)
    assert [index_key_hash_prefixed(ph, s) for s in suffixes] == direct
    assert index_key_hashes_prefixed([ph] * len(suffixes), suffixes).tolist() == direct


@given(
    prefix=st.text(max_size=20),
    suffixes=st.lists(
        st.text(alphabet=st.characters(max_codepoint=127), max_size=40), min_size=1, max_size=60
    ),
)
def test_prefixed_index_hashes_of_ascii_keys(prefix: str, suffixes: list[str]) -> None:
    """ASCII keys take the padded matrix path (uneven ones the general path): same hashes."""
    direct = [index_key_hash(prefix + s) for s in suffixes]
    ph = prefix_hash(prefix)
    assert index_key_hashes_prefixed([ph] * len(suffixes), suffixes).tolist() == direct


def test_prefixed_index_hashes_of_long_uniform_keys() -> None:
    """Many 32-character ids (the UNIQ_KEY shape) and one long outlier key."""
    suffixes = [f"7F0000011234ABCDEF01{i:012X}" for i in range(500)] + ["k" * 5000]
    ph = prefix_hash("Topic#")
    direct = [index_key_hash("Topic#" + s) for s in suffixes]
    assert index_key_hashes_prefixed([ph] * len(suffixes), suffixes).tolist() == direct
    assert index_key_hashes_prefixed([ph] * 500, suffixes[:500]).tolist() == direct[:500]
