"""Message ids: the broker's offset id and the client's ``UNIQ_KEY`` (RocketMQ's layouts).

- **offsetMsgId** (``MessageDecoder#createMessageId``): store host address (4 or 16 bytes) +
  port (int) + commitlog physical offset (long), as uppercase hex: 32 chars for IPv4, 56 for
  IPv6. ``645100FA00002A9F000000489A3AA09E`` is 100.81.0.250:10911 at offset 311825178782.
- **UNIQ_KEY** (``MessageClientIDSetter``): ``hex(ip + short pid + int classLoaderHash)`` +
  ``hex(int ms since the start of the current month)`` + ``hex(short counter)``: 32 chars for
  IPv4, 56 for IPv6. The month start is local time, as ``Calendar.getInstance()`` is in Java.

Everything here is a pure function of its arguments except :class:`UniqKeyGenerator`, whose
pid, address, hash and clock are injectable for tests. A generator that reads its pid itself
takes a fresh prefix in a forked child (a new pid, hash and fake address, as a new JVM has):
otherwise the workers a process forks after importing the client would stamp the same keys.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import random
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

_OFFSET_TAIL: Final = struct.Struct(">iq")  # port, physical offset
_PHYS: Final = struct.Struct(">q")
_UNIQ_FIX: Final = struct.Struct(">Hi")  # short pid, int classLoaderHash
_UNIQ_TAIL: Final = struct.Struct(">IH")  # ms since month start, counter
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def _from_hex(msg_id: str, what: str, lengths: tuple[int, ...]) -> bytes:
    if not isinstance(msg_id, str):
        raise ValueError(f"{what} must be a str, got {type(msg_id).__name__}")
    if len(msg_id) not in lengths:
        want = " or ".join(str(n) for n in lengths)
        raise ValueError(f"{what} must be {want} hex chars, got {len(msg_id)}: {msg_id!r}")
    if not _HEX_DIGITS.issuperset(msg_id):
        raise ValueError(f"{what} is not hexadecimal: {msg_id!r}")
    return bytes.fromhex(msg_id)


# --------------------------------------------------------------------------- offset id


def create_offset_msg_id(host: str, port: int, phys_offset: int) -> str:
    """Return the broker's offset message id for a record stored at ``host:port`` / offset."""
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port out of range: {port}")
    if not 0 <= phys_offset < 2**63:
        raise ValueError(f"physical offset out of range: {phys_offset}")
    return (_packed_ip(host) + _OFFSET_TAIL.pack(port, phys_offset)).hex().upper()


@functools.lru_cache(maxsize=1024)
def _packed_ip(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError as e:
        raise ValueError(f"not an IP address: {host!r}") from e


def offset_msg_id_of_packed(store_host: bytes, phys_offset: int) -> str:
    """:func:`create_offset_msg_id` from a record's packed STOREHOSTADDRESS (ip + int port).

    The id is those bytes followed by the 8-byte offset, so no address parsing is needed.
    """
    return (store_host + _PHYS.pack(phys_offset)).hex().upper()


def joined_offset_msg_ids(store_host: bytes, phys_offsets: Iterable[int]) -> str:
    """The :func:`offset_msg_id_of_packed` ids of records stored at ``phys_offsets``, joined
    by commas (a send response's ``msgId``). The address part is hexed once for all of them;
    each offset is 16 uppercase hex digits (a non-negative long)."""
    head = store_host.hex().upper()
    return ",".join([f"{head}{offset:016X}" for offset in phys_offsets])


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Decode :func:`create_offset_msg_id`: ``(host, port, phys_offset)``; ValueError if bad."""
    raw = _from_hex(msg_id, "offset message id", (32, 56))
    addr_len = len(raw) - _OFFSET_TAIL.size
    port, offset = _OFFSET_TAIL.unpack_from(raw, addr_len)
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"offset message id has an invalid port {port}: {msg_id!r}")
    if offset < 0:
        raise ValueError(f"offset message id has a negative offset {offset}: {msg_id!r}")
    return str(ipaddress.ip_address(raw[:addr_len])), port, offset


# --------------------------------------------------------------------------- UNIQ_KEY


def month_start_ms(now_ms: int) -> int:
    """Local-time start of the month containing ``now_ms`` (ms since the epoch)."""
    dt = datetime.fromtimestamp(now_ms / 1000).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )
    return int(dt.timestamp() * 1000)


def next_month_start_ms(now_ms: int) -> int:
    """Local-time start of the month after the one containing ``now_ms``."""
    dt = datetime.fromtimestamp(now_ms / 1000)
    year, month = (dt.year + 1, 1) if dt.month == 12 else (dt.year, dt.month + 1)
    return int(datetime(year, month, 1).timestamp() * 1000)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _fake_ip(now_ms: int) -> bytes:
    """RocketMQ's ``createFakeIP``: the low 4 bytes of the current time in ms."""
    return struct.pack(">q", now_ms)[4:]


@dataclass(frozen=True, slots=True)
class UniqKeyFields:
    """The parts of a decoded ``UNIQ_KEY``."""

    ip: str
    pid: int
    class_loader_hash: int
    ms_since_month_start: int
    counter: int


class UniqKeyGenerator:
    """Produces ``UNIQ_KEY`` strings in RocketMQ's layout; thread-safe.

    ``ip`` defaults to RocketMQ's fake IP (no network lookup), ``pid`` to ``os.getpid()``
    (truncated to a short), ``class_loader_hash`` to a random int, ``clock_ms`` to wall time.
    Without ``pid``, a forked child gets a prefix of its own: its pid, a new hash and, unless
    ``ip`` is given, a new fake IP.
    """

    def __init__(
        self,
        *,
        ip: str | None = None,
        pid: int | None = None,
        class_loader_hash: int | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self._clock = clock_ms
        self._given = (ip, pid, class_loader_hash)
        self._lock = threading.Lock()
        self._counter = 0
        now = clock_ms()
        self._set_prefix(now)
        self._set_start(now)
        if pid is None:
            _RENEWED_IN_CHILD.add(self)

    def _set_prefix(self, now_ms: int) -> None:
        """The fixed part from the given ip, pid and hash, else this process's own."""
        ip, pid, class_loader_hash = self._given
        ip_bytes = ipaddress.ip_address(ip).packed if ip is not None else _fake_ip(now_ms)
        pid_short = (os.getpid() if pid is None else pid) & 0xFFFF
        if class_loader_hash is None:
            class_loader_hash = random.getrandbits(32)
        hash_int = ((class_loader_hash + 2**31) & 0xFFFFFFFF) - 2**31
        self._prefix = (ip_bytes + _UNIQ_FIX.pack(pid_short, hash_int)).hex().upper()

    def _renew_in_child(self) -> None:
        """In a forked child: a prefix of its own (the parent's pid is in the inherited one),
        and a new lock (another thread of the parent may have held it at the fork)."""
        self._lock = threading.Lock()
        self._set_prefix(self._clock())

    def _set_start(self, now_ms: int) -> None:
        self._start = month_start_ms(now_ms)
        self._next_start = next_month_start_ms(now_ms)

    @property
    def prefix(self) -> str:
        """The fixed part: hex of ip + pid + classLoaderHash."""
        return self._prefix

    def next(self) -> str:
        """Return a new ``UNIQ_KEY``."""
        with self._lock:
            now = self._clock()
            if now >= self._next_start or now < self._start:
                self._set_start(now)
            counter = self._counter
            self._counter = (counter + 1) & 0xFFFF
            span = (now - self._start) & 0xFFFFFFFF
        return self._prefix + _UNIQ_TAIL.pack(span, counter).hex().upper()

    def next_many(self, n: int) -> list[str]:
        """Return ``n`` new ``UNIQ_KEY``s (one clock read and one lock hold for all)."""
        if n <= 0:
            return []
        with self._lock:
            now = self._clock()
            if now >= self._next_start or now < self._start:
                self._set_start(now)
            first = self._counter
            self._counter = (first + n) & 0xFFFF
            span = (now - self._start) & 0xFFFFFFFF
        head = f"{self._prefix}{span:08X}"
        return [f"{head}{(first + i) & 0xFFFF:04X}" for i in range(n)]

    __call__ = next


_RENEWED_IN_CHILD: weakref.WeakSet[UniqKeyGenerator] = weakref.WeakSet()
"""Generators that read their pid themselves: each takes a new prefix in a forked child."""


def _renew_generators_in_child() -> None:
    for generator in list(_RENEWED_IN_CHILD):
        generator._renew_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_generators_in_child)


def decode_uniq_key(key: str) -> UniqKeyFields:
    """Split a ``UNIQ_KEY`` into its fields; ValueError if it is not 32 or 56 hex chars."""
    raw = _from_hex(key, "UNIQ_KEY", (32, 56))
    ip_len = len(raw) - _UNIQ_FIX.size - _UNIQ_TAIL.size
    pid, hash_int = _UNIQ_FIX.unpack_from(raw, ip_len)
    span, counter = _UNIQ_TAIL.unpack_from(raw, ip_len + _UNIQ_FIX.size)
    return UniqKeyFields(str(ipaddress.ip_address(raw[:ip_len])), pid, hash_int, span, counter)


def uniq_key_timestamp(key: str, now_ms: int | None = None) -> int:
    """Approximate creation time (ms) of a ``UNIQ_KEY`` (``getNearlyTimeFromID``).

    The key stores ms since a month start; that is this month's start unless the result would
    not be in the past, in which case it is the previous month's.
    """
    span = decode_uniq_key(key).ms_since_month_start
    now = _wall_clock_ms() if now_ms is None else now_ms
    start = month_start_ms(now)
    if start + span >= now:
        start = month_start_ms(start - 1)
    return start + span
