"""Tests for body compression (client/compression.py)."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client import decompress_if_needed, maybe_compress
from common.message import MessageSysFlag


def test_below_threshold_untouched() -> None:
    body = b"a" * 4095
    assert maybe_compress(body) == (body, 0)


def test_at_threshold_compressed_with_zlib_bits() -> None:
    body = b"a" * 4096
    out, bits = maybe_compress(body)
    assert bits == MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB == 0x301
    assert out == zlib.compress(body, 5)
    assert decompress_if_needed(out, bits) == body


def test_custom_threshold_and_level() -> None:
    body = b"abc" * 10
    out, bits = maybe_compress(body, threshold=1, level=9)
    assert bits & MessageSysFlag.COMPRESSED_FLAG
    assert zlib.decompress(out) == body


def test_a_body_compression_would_grow_is_sent_as_it_is() -> None:
    """Random data grows under zlib: a body of 4 MiB would then be refused by the broker."""
    for data in (b"abc", os.urandom(4 * 1024 * 1024)):
        assert maybe_compress(data, threshold=1) == (data, 0)


@given(st.binary(max_size=20_000))
def test_round_trip(body: bytes) -> None:
    out, bits = maybe_compress(body, threshold=100)
    assert decompress_if_needed(out, bits) == body


def test_legacy_flag_without_type_bits_is_zlib() -> None:
    assert decompress_if_needed(zlib.compress(b"x"), MessageSysFlag.COMPRESSED_FLAG) == b"x"


def test_uncompressed_flag_leaves_body() -> None:
    assert decompress_if_needed(b"raw", MessageSysFlag.COMPRESSION_ZLIB) == b"raw"


def test_unsupported_or_corrupt_rejected() -> None:
    lz4 = MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_LZ4
    with pytest.raises(ValueError, match="unsupported"):
        decompress_if_needed(b"x", lz4)
    with pytest.raises(ValueError, match="corrupt"):
        decompress_if_needed(b"not zlib", MessageSysFlag.COMPRESSED_FLAG)
