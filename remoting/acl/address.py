"""``whiteRemoteAddress`` patterns (RocketMQ's ``RemoteAddressStrategyFactory``).

Accepted forms (IPv4 unless said): ``*`` (or ``*.*.*.*``, ``*:*:*:*:*:*:*:*``: every address);
an exact address (IPv6 too); ``192.168.1.*`` or ``192.168.*`` (missing trailing parts match
anything); a range part ``192.168.1.1-100``; a choice part ``192.168.1.{1,2,3}``; and a comma
list of exact addresses ``10.0.0.1,10.0.0.2``. Anything else raises :class:`AddressPatternError`
when the file is read, never later.

In minimq an address list only *restricts* who may call (see :mod:`remoting.acl.validator`): a
matching address still has to sign its requests.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final

_ANY: Final = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})
_RANGE: Final = re.compile(r"^(\d{1,3})-(\d{1,3})$")
_CHOICE: Final = re.compile(r"^\{(\d{1,3}(?:,\d{1,3})*)\}$")
_NUMBER: Final = re.compile(r"^\d{1,3}$")


class AddressPatternError(ValueError):
    """A ``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` entry of no known form."""


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """One parsed pattern: every address, a set of exact ones, or four IPv4 part sets."""

    text: str
    any_address: bool = False
    exact: frozenset[str] = frozenset()
    parts: tuple[frozenset[int] | None, ...] = ()
    """Per IPv4 part the numbers allowed (None: any), when the pattern has parts."""

    def matches(self, ip: str) -> bool:
        """True when the peer address ``ip`` (no port) is one the pattern names."""
        if self.any_address or ip in self.exact:
            return True
        if not self.parts:
            return False
        numbers = ip.split(".")
        if len(numbers) != 4 or not all(_NUMBER.match(n) for n in numbers):
            return False
        return all(
            allowed is None or int(n) in allowed
            for n, allowed in zip(numbers, self.parts, strict=True)
        )


def parse_address_pattern(text: str) -> AddressPattern:
    """Parse one pattern (see the module docstring); AddressPatternError names it."""
    pattern = text.strip()
    if not pattern:
        raise AddressPatternError("empty address pattern")
    if pattern in _ANY:
        return AddressPattern(pattern, any_address=True)
    if "," in pattern and not pattern.endswith("}"):
        return AddressPattern(pattern, exact=frozenset(_exact(p) for p in pattern.split(",")))
    if ":" in pattern:
        return AddressPattern(pattern, exact=frozenset({_exact(pattern)}))
    return _ipv4_pattern(pattern)


def _exact(text: str) -> str:
    """``text`` as a canonical address; AddressPatternError when it is not one."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise AddressPatternError(f"bad address {text.strip()!r} in an address list") from None


def _ipv4_pattern(pattern: str) -> AddressPattern:
    """A pattern of IPv4 parts (exact, ``*``, ``a-b``, ``{a,b}``); trailing parts default to
    ``*`` when the last given one is ``*`` (RocketMQ's ``192.168.*``)."""
    texts = pattern.split(".")
    if len(texts) > 4 or (len(texts) < 4 and texts[-1] != "*"):
        raise AddressPatternError(f"bad address pattern {pattern!r}: expected 4 parts")
    parts = [_ipv4_part(pattern, t) for t in texts]
    parts.extend([None] * (4 - len(parts)))
    if all(p is not None and len(p) == 1 for p in parts):
        return AddressPattern(pattern, exact=frozenset({_exact(pattern)}))
    return AddressPattern(pattern, parts=tuple(parts))


def _ipv4_part(pattern: str, text: str) -> frozenset[int] | None:
    """The numbers one part allows (None: any)."""
    if text == "*":
        return None
    if _NUMBER.match(text):
        return frozenset({_octet(pattern, text)})
    if (m := _RANGE.match(text)) is not None:
        low, high = _octet(pattern, m[1]), _octet(pattern, m[2])
        if low > high:
            raise AddressPatternError(f"bad range {text!r} in {pattern!r}")
        return frozenset(range(low, high + 1))
    if (m := _CHOICE.match(text)) is not None:
        return frozenset(_octet(pattern, n) for n in m[1].split(","))
    raise AddressPatternError(f"bad part {text!r} in address pattern {pattern!r}")


def _octet(pattern: str, text: str) -> int:
    value = int(text)
    if value > 255:
        raise AddressPatternError(f"{text} is not an IPv4 part (0-255) in {pattern!r}")
    return value
