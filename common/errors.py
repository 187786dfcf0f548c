"""Small helpers for exceptions shared by every minimq process."""

from __future__ import annotations


def first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
