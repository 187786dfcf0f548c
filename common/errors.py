"""Small helpers for exceptions shared by every minimq process."""

from __future__ import annotations

from typing import TypeVar

_E = TypeVar("_E", bound=BaseException)


def first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def caused_by(exc: _E, cause: BaseException | None) -> _E:
    """``exc`` with ``cause`` as its ``__cause__``: ``raise caused_by(X(...), exc)`` is
    ``raise X(...) from exc``, and ``caused_by(X(...), None)`` is ``from None``.

    Modules the mypyc build hook compiles must use it: mypyc compiles ``raise X from Y`` as
    ``raise X`` and drops the cause (and ``from None``'s suppressed context).
    """
    exc.__cause__ = cause  # also sets __suppress_context__, as ``from`` does
    return exc
