"""Java ``String.hashCode`` in Python, one string at a time or a whole batch at once.

RocketMQ stores ``tags.hashCode()`` in every consume-queue unit and ``abs(key.hashCode())`` in
every index entry, so minimq computes the same numbers to keep its files and tag filtering
identical to RocketMQ's. The batch form runs in numpy and is what the dispatch hot path uses.

Rules: ``h = 31*h + c`` over the UTF-16 code units of the string, wrapping to a signed 32-bit int.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import mul
from typing import Any

import numpy as np
import numpy.typing as npt

_MASK32 = 0xFFFFFFFF
_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Return Java's ``s.hashCode()`` as a signed 32-bit int."""
    if s.isascii():
        units: bytes | list[int] = s.encode("ascii")
    else:
        data = s.encode("utf-16-be")
        units = [(data[i] << 8) | data[i + 1] for i in range(0, len(data), 2)]
    # sum(c_i * 31**(n-1-i)) mod 2**32, with the products and the sum done in C
    h: int = sum(map(mul, units, _powers_desc(len(units)))) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


_POWERS_DESC: dict[int, tuple[int, ...]] = {}


def _powers_desc(n: int) -> tuple[int, ...]:
    """``(31**(n-1), ..., 31, 1)`` modulo 2**32, cached per length."""
    p = _POWERS_DESC.get(n)
    if p is None:
        p = tuple(pow(31, n - 1 - i, 1 << 32) for i in range(n))
        if len(_POWERS_DESC) < 4096:
            _POWERS_DESC[n] = p
    return p


def index_key_hash(key: str) -> int:
    """Return the IndexFile key hash: ``abs(hashCode)`` with ``Integer.MIN_VALUE`` mapped to 0."""
    h = java_string_hash(key)
    return 0 if h == _INT_MIN else abs(h)


class _PowerTable:
    """Growable table of ``base**k mod 2**32`` as uint32."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.table = self._build(256)

    def _build(self, n: int) -> npt.NDArray[np.uint32]:
        out = np.empty(n, dtype=np.uint32)
        v = 1
        for k in range(n):
            out[k] = v
            v = (v * self.base) & _MASK32
        return out

    def upto(self, n: int) -> npt.NDArray[np.uint32]:
        """The table, at least ``n`` long."""
        if n > len(self.table):
            self.table = self._build(max(n, 2 * len(self.table)))
        return self.table


_POW31 = _PowerTable(31)
_INV31 = _PowerTable(pow(31, -1, 1 << 32))  # 31 is odd, so it has an inverse mod 2**32


def java_string_hashes(strings: Sequence[str]) -> npt.NDArray[np.int32]:
    """Return ``[s.hashCode() for s in strings]`` as an int32 array, computed in one numpy pass."""
    return _hashes_and_lengths(strings)[0].view(np.int32)


def _hashes_and_lengths(
    strings: Sequence[str],
) -> tuple[npt.NDArray[np.unsignedinteger[Any]], npt.NDArray[np.signedinteger[Any]]]:
    """Unsigned 32-bit hash codes and UTF-16 lengths of ``strings``."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
    joined = "".join(strings)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).astype(np.uint32)
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    else:
        units = np.frombuffer(joined.encode("utf-16-be"), dtype=">u2").astype(np.uint32)
        lengths = np.fromiter(
            (len(s.encode("utf-16-be")) // 2 for s in strings), dtype=np.int64, count=n
        )
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    out = np.zeros(n, dtype=np.uint32)
    if total == 0:
        return out, lengths
    exponent = np.repeat(ends - 1, lengths) - np.arange(total, dtype=np.int64)
    terms = units * _POW31.upto(int(lengths.max()) + 1)[exponent]
    nonempty = lengths > 0
    starts = (ends - lengths)[nonempty]
    out[nonempty] = np.add.reduceat(terms, starts, dtype=np.uint32)
    return out, lengths


def index_key_hashes(keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """Batch form of :func:`index_key_hash`, as int64 (always in ``[0, 2**31)``)."""
    return _abs_hash(java_string_hashes(keys).astype(np.int64))


def _abs_hash(h: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    h = np.abs(h)
    h[h == 2**31] = 0
    return h


def prefix_hash(prefix: str) -> int:
    """Unsigned hash code of ``prefix``, for :func:`index_key_hashes_prefixed`."""
    return java_string_hash(prefix) & _MASK32


def index_key_hashes_prefixed(
    prefix_hashes: Sequence[int], suffixes: Sequence[str]
) -> npt.NDArray[np.int64]:
    """``index_key_hashes([p + s ...])`` from each prefix's :func:`prefix_hash`, in numpy.

    ``hash(p + s) = hash(p) * 31**len(s) + hash(s)`` modulo 2**32, so a topic's ``topic#``
    prefix is hashed once and no ``topic#key`` string is built.
    """
    ascii_ = _ascii_hashes(suffixes)
    suffix_hash, lengths = _hashes_and_lengths(suffixes) if ascii_ is None else ascii_
    scale = _POW31.upto(int(lengths.max()) + 1 if len(lengths) else 1)[lengths]
    if prefix_hashes and prefix_hashes.count(prefix_hashes[0]) == len(prefix_hashes):
        prefix: npt.NDArray[np.uint64] | np.uint64 = np.uint64(prefix_hashes[0])  # one topic
    else:
        prefix = np.array(prefix_hashes, dtype=np.uint64)
    combined = prefix * scale + suffix_hash
    return _abs_hash(combined.astype(np.uint32).view(np.int32).astype(np.int64))


def _ascii_hashes(
    strings: Sequence[str],
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.intp]] | None:
    """Hash codes (mod 2**32, unsigned) and lengths of ASCII ``strings``, from one running sum.

    With the strings joined into ``c_0 .. c_{T-1}`` and ``S_j = sum(c_i * 31**(T-1-i), i < j)``
    (uint32 arithmetic wraps modulo 2**32 exactly as Java's int does), the string at
    ``[a, b)`` hashes to ``(S_b - S_a) * 31**-(T-b)``: 31 is odd, so it has an inverse
    modulo 2**32. None for non-ASCII text or an empty list.
    """
    n = len(strings)
    data = "".join(strings).encode("utf-8")
    length_list = list(map(len, strings))
    total = len(data)
    if n == 0 or total != sum(length_list):  # a multi-byte character: not ASCII
        return None
    lengths = np.array(length_list, dtype=np.intp)
    if total == 0:
        return np.zeros(n, dtype=np.uint32), lengths
    ends = np.cumsum(lengths)
    weighted = np.frombuffer(data, dtype=np.uint8) * _POW31.upto(total)[total - 1 :: -1]
    sums = np.zeros(total + 1, dtype=np.uint32)
    np.cumsum(weighted, out=sums[1:])
    hashes = (sums[ends] - sums[ends - lengths]) * _INV31.upto(total + 1)[total - ends]
    return hashes, lengths


def index_key_hash_prefixed(prefix: int, suffix: str) -> int:
    """Scalar :func:`index_key_hashes_prefixed` for one key.

    The dispatch of a lone message hashes its keys here: for ASCII the prefix's term and the
    suffix's are summed in one C-level pass, against powers cached per length.
    """
    try:
        units = suffix.encode("ascii")
    except UnicodeEncodeError:
        return _index_key_hash_prefixed_utf16(prefix, suffix)
    powers = _PREFIXED_POWERS.get(len(units)) or _prefixed_powers(len(units))
    h: int = sum(map(mul, units, powers[1]), prefix * powers[0]) & _MASK32
    if h & 0x80000000:  # negative as a Java int: abs(), with Integer.MIN_VALUE mapped to 0
        h = (1 << 32) - h
        return 0 if h == 0x80000000 else h
    return h


_PREFIXED_POWERS: dict[int, tuple[int, tuple[int, ...]]] = {}


def _prefixed_powers(n: int) -> tuple[int, tuple[int, ...]]:
    """``31**n`` and ``(31**(n-1), ..., 1)`` modulo 2**32, cached per length."""
    p = (pow(31, n, 1 << 32), _powers_desc(n))
    if len(_PREFIXED_POWERS) < 4096:
        _PREFIXED_POWERS[n] = p
    return p


def _index_key_hash_prefixed_utf16(prefix: int, suffix: str) -> int:
    units = len(suffix.encode("utf-16-be")) // 2
    h = (prefix * pow(31, units, 1 << 32) + (java_string_hash(suffix) & _MASK32)) & _MASK32
    h = h - (1 << 32) if h & 0x80000000 else h
    return 0 if h == _INT_MIN else abs(h)
