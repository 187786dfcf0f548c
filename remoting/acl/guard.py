"""Put the ACL check in front of a handler table (RocketMQ's server ``RPCHook``
``doBeforeRequest``), with no cost for tables that are not guarded.

Rules:

- :func:`guard_handlers` returns a new table whose handlers (all, or those of ``codes``) run
  :meth:`~remoting.acl.validator.AclValidator.check` first; a refused request is answered
  ``NO_PERMISSION`` (16) with the reason as remark, and its handler is not called. A code absent
  from the table stays absent, so the channel still answers it ``REQUEST_CODE_NOT_SUPPORTED``
  before any ACL work.
- ``lookups`` gives, per code, how the server finds more resources in what it stores (the
  topic of the message a request names); the validator asks it once the signature passed.
- With ACL off the server keeps its own table: no wrapper, nothing checked per request.
- A refusal is logged as a warning through the channel's
  :class:`~remoting.log_limit.WarningLimiter` (a flood is summarised), with the peer and the
  reason, never a secret or a signature.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from remoting.acl.resource import NeedsLookup
from remoting.acl.validator import AclValidator
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.log_limit import suppressed_note
from remoting.reply import Reply

if TYPE_CHECKING:
    from remoting.channel import Channel, Handler

log = logging.getLogger(__name__)

DENIED_WARNING = "acl denied"
"""The :class:`~remoting.log_limit.WarningLimiter` kind of the refusal warning."""


def guard_handlers(
    handlers: Mapping[int, Handler],
    validator: AclValidator,
    *,
    codes: Collection[int] | None = None,
    lookups: Mapping[int, NeedsLookup] | None = None,
) -> dict[int, Handler]:
    """``handlers`` with the ACL check before each one (of ``codes``, when given), asking
    ``lookups[code]`` for the resources found in the store."""
    found = lookups or {}
    return {
        code: _guarded(handler, validator, found.get(code))
        if codes is None or code in codes
        else handler
        for code, handler in handlers.items()
    }


def _guarded(handler: Handler, validator: AclValidator, lookup: NeedsLookup | None) -> Handler:
    def checked(request: RemotingCommand, channel: Channel) -> Reply:
        reason = validator.check(request, channel.remote_addr, lookup)
        if reason is None:
            return handler(request, channel)
        _warn_denied(channel, reason)
        return RemotingCommand.response_to(request, ResponseCode.NO_PERMISSION, remark=reason)

    return checked


def _warn_denied(channel: Channel, reason: str) -> None:
    dropped = channel.warnings.allow(DENIED_WARNING)
    if dropped is not None:
        log.warning(
            "refused a request from %s: %s%s", channel.remote_addr, reason, suppressed_note(dropped)
        )
