"""Deferred: a value handed over later by a callback, with no task and no event loop.

A ``SYNC_FLUSH`` send is stored at once but may be answered only once a group commit covers
it. Awaiting that in a task per request costs a task, an event and a timeout each; instead the
store hands back a :class:`Deferred` and resolves it from the group commit's hand-back, and the
connection that received the request sends the answer from the callback it registered
(:mod:`remoting.channel`).

Rules:

- A deferred is resolved once (a second :meth:`Deferred.resolve` raises ``RuntimeError``).
- :meth:`Deferred.on_resolved` takes one callback; it runs inside :meth:`Deferred.resolve`, in
  whatever context resolves it, or at once if the value is already there. A callback must not
  raise: the resolver is usually an event loop's callback, where an exception would be fatal.
  :meth:`Deferred.map` guards the functions it applies (see there).
- No I/O, no trio: plain objects and calls, so the store and the remoting layer can share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")

_UNSET = object()


class Deferred(Generic[T]):
    """A value that arrives later; its one callback is called with it (see the module)."""

    __slots__ = ("_callback", "_value")

    def __init__(self) -> None:
        self._callback: Callable[[T], None] | None = None
        self._value: object = _UNSET

    @property
    def resolved(self) -> bool:
        """True once :meth:`resolve` was called."""
        return self._value is not _UNSET

    def resolve(self, value: T) -> None:
        """Hand ``value`` over: call the callback now if one is registered."""
        if self._value is not _UNSET:
            raise RuntimeError("deferred resolved twice")
        self._value = value
        callback = self._callback
        if callback is not None:
            self._callback = None
            callback(value)

    def on_resolved(self, callback: Callable[[T], None]) -> None:
        """Call ``callback`` with the value once it is there (at once if it already is)."""
        if self._callback is not None:
            raise RuntimeError("a deferred takes one callback")
        value = self._value
        if value is _UNSET:
            self._callback = callback
        else:
            callback(value)  # type: ignore[arg-type]  # set by resolve(value: T)

    def map(self, fn: Callable[[T], U], fallback: Callable[[T, Exception], U]) -> Deferred[U]:
        """A deferred of ``fn(value)``; if ``fn`` raises, of ``fallback(value, exc)`` instead
        (which should log it), so no exception reaches the resolver."""
        out: Deferred[U] = Deferred()

        def apply(value: T) -> None:
            try:
                mapped = fn(value)
            except Exception as exc:  # noqa: BLE001 - the resolver must not see it
                mapped = fallback(value, exc)
            out.resolve(mapped)

        self.on_resolved(apply)
        return out
