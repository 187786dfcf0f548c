"""What a request handler returns: the response now, or an awaitable of it (no trio here).

A handler that can answer without waiting returns the response itself (or None for no reply)
and :class:`~remoting.channel.Channel` sends it inline, without a task. One that must wait (an
``async def`` handler) returns an awaitable. Wrappers (error guards, metrics) keep a ready reply
ready with :func:`then`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from remoting.command import RemotingCommand

Reply: TypeAlias = RemotingCommand | Awaitable[RemotingCommand | None] | None
"""What a handler returns: the response now (its opaque is set for it), None for no reply, or
an awaitable giving one of those later."""


def then(reply: Reply, fn: Callable[[RemotingCommand | None], RemotingCommand | None]) -> Reply:
    """``fn`` of the response: at once if ``reply`` is ready, else once it has come."""
    if reply is None or isinstance(reply, RemotingCommand):
        return fn(reply)
    return _then_later(reply, fn)


async def _then_later(
    reply: Awaitable[RemotingCommand | None],
    fn: Callable[[RemotingCommand | None], RemotingCommand | None],
) -> RemotingCommand | None:
    return fn(await reply)
