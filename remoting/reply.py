"""What a request handler returns: the response now, or later (no trio here).

A handler that can answer without waiting returns the response itself (or None for no reply)
and :class:`~remoting.channel.Channel` sends it inline, without a task. One that must wait (an
``async def`` handler) returns an awaitable, which the channel awaits in a task. One whose
answer a callback will give (a ``SYNC_FLUSH`` send, answered from the group commit) returns a
:class:`~common.deferred.Deferred`, which the channel answers from that callback, with no task.
Wrappers (error guards, metrics) keep a ready reply ready, and a deferred one deferred, with
:func:`then`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from common.deferred import Deferred
from remoting.command import RemotingCommand

log = logging.getLogger(__name__)

Response: TypeAlias = RemotingCommand | None
"""A response (its opaque is set for it), or None for no reply."""

Reply: TypeAlias = RemotingCommand | Awaitable[Response] | Deferred[Response] | None
"""What a handler returns: the response now, an awaitable giving it later, or a deferred that a
callback resolves with it later."""


def then(reply: Reply, fn: Callable[[Response], Response]) -> Reply:
    """``fn`` of the response: at once if ``reply`` is ready, else once it has come.

    For a deferred reply an exception from ``fn`` is logged and the response passed on as it
    was (a deferred's resolver must never see one)."""
    if reply is None or isinstance(reply, RemotingCommand):
        return fn(reply)
    if isinstance(reply, Deferred):
        return reply.map(fn, _unchanged)
    return _then_later(reply, fn)


def _unchanged(response: Response, exc: Exception) -> Response:
    log.error("a reply wrapper failed; the response goes out as it was", exc_info=exc)
    return response


async def _then_later(reply: Awaitable[Response], fn: Callable[[Response], Response]) -> Response:
    return fn(await reply)
