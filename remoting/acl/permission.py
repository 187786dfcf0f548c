"""RocketMQ's ``Permission``: the bits an account holds on a topic or group, and the check.

Rules (RocketMQ's ``Permission#checkPermission``):

- ``DENY`` (1) in what is owned refuses everything, whatever else is set: DENY wins.
- A need of ``ANY`` (2) is met by ``PUB`` (4) or ``SUB`` (8); any other need by a shared bit.
- :func:`parse_perm` reads ``PUB``, ``SUB``, ``PUB|SUB``, ``SUB|PUB`` and ``DENY``; anything
  else is an error (RocketMQ's ``checkResourcePerms`` refuses it when an account is added,
  where ``parsePermFromString`` would have read it as DENY).
"""

from __future__ import annotations

from typing import Final

DENY: Final = 1
ANY: Final = 1 << 1
PUB: Final = 1 << 2
SUB: Final = 1 << 3

_BY_NAME: Final = {
    "PUB": PUB,
    "SUB": SUB,
    "PUB|SUB": PUB | SUB,
    "SUB|PUB": PUB | SUB,
    "DENY": DENY,
}


class PermissionSyntaxError(ValueError):
    """A permission that is none of ``PUB``, ``SUB``, ``PUB|SUB``, ``SUB|PUB``, ``DENY``."""


def parse_perm(text: str) -> int:
    """The bits of ``text`` (surrounding blanks ignored); PermissionSyntaxError otherwise."""
    bits = _BY_NAME.get(text.strip())
    if bits is None:
        raise PermissionSyntaxError(
            f"bad permission {text!r}: expected PUB, SUB, PUB|SUB, SUB|PUB or DENY"
        )
    return bits


def check_permission(needed: int, owned: int) -> bool:
    """True when ``owned`` grants ``needed`` (see the module rules)."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def perm_name(bits: int) -> str:
    """``PUB``, ``SUB``, ``PUB|SUB``, ``DENY`` or ``ANY`` for remarks and logs."""
    if bits & DENY:
        return "DENY"
    names = [name for name, bit in (("ANY", ANY), ("PUB", PUB), ("SUB", SUB)) if bits & bit]
    return "|".join(names) or "NONE"
