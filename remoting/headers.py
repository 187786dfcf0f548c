"""Request headers and handler safety shared by every processor (name server and broker).

Rules:

- Headers arrive as ``ext_fields`` strings (ints and bools are accepted too, as RocketMQ sends
  every header as a string); a missing or ill-typed field raises :class:`BadRequestError`
  naming it.
- :func:`guarded` makes a handler that never raises: a :class:`BadRequestError` becomes
  ``SYSTEM_ERROR`` with the reason as remark (RocketMQ answers a failed header decode the same
  way), and any other exception is logged and answered ``SYSTEM_ERROR`` too. A ready reply
  stays ready. :func:`failure_response` is that answer; the channel gives it for an unguarded
  handler's exception as well.

No trio here: the handler types come from :mod:`remoting.channel` for annotations only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from common.deferred import Deferred
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.log_limit import suppressed_note
from remoting.reply import Reply

if TYPE_CHECKING:
    from remoting.channel import Channel, Handler

log = logging.getLogger(__name__)


class BadRequestError(ValueError):
    """A request header or body is missing a field or holds a value of the wrong type."""


def header_str(request: RemotingCommand, name: str, *, allow_empty: bool = False) -> str:
    """The string header ``name``; BadRequestError when missing, not a str or empty."""
    value = request.ext_fields.get(name)
    if value is None:
        raise BadRequestError(f"missing header field {name!r}")
    if not isinstance(value, str):
        raise BadRequestError(f"header field {name!r} must be a str, got {type(value).__name__}")
    if not value and not allow_empty:
        raise BadRequestError(f"header field {name!r} must not be empty")
    return value


def opt_str(request: RemotingCommand, name: str, default: str) -> str:
    """The string header ``name``, or ``default`` when absent."""
    if request.ext_fields.get(name) is None:
        return default
    return header_str(request, name, allow_empty=True)


_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def header_int(request: RemotingCommand, name: str) -> int:
    """The int header ``name`` (an int or a decimal string) within a Java long, as RocketMQ's
    header fields are; BadRequestError otherwise."""
    value = request.ext_fields.get(name)
    if value is None:
        raise BadRequestError(f"missing header field {name!r}")
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = int(value.strip())
    if number is None:
        raise BadRequestError(f"header field {name!r} must be an integer, got {value!r}")
    if not _LONG_MIN <= number <= _LONG_MAX:
        raise BadRequestError(f"header field {name!r} is out of a 64-bit range: {value!r}")
    return number


def opt_int(request: RemotingCommand, name: str, default: int) -> int:
    """The int header ``name``, or ``default`` when absent (or an empty string)."""
    value = request.ext_fields.get(name)
    if value is None or value == "":
        return default
    return header_int(request, name)


def opt_bool(request: RemotingCommand, name: str, default: bool = False) -> bool:
    """The bool header ``name`` (a bool or ``"true"``/``"false"``), or ``default``."""
    value = request.ext_fields.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise BadRequestError(f"header field {name!r} must be a boolean, got {value!r}")


def error(request: RemotingCommand, code: ResponseCode, remark: str) -> RemotingCommand:
    """A response with ``code`` and ``remark`` and nothing else."""
    return RemotingCommand.response_to(request, code, remark=remark)


RawHandler = Callable[[RemotingCommand, "Channel"], Reply]


def guarded(fn: RawHandler) -> Handler:
    """Wrap ``fn`` so it never raises: bad requests and failures become SYSTEM_ERROR.

    A reply that is ready stays ready (the channel answers it inline), a deferred one deferred;
    an awaitable one is guarded when it is awaited.
    """

    def handler(request: RemotingCommand, channel: Channel) -> Reply:
        try:
            reply = fn(request, channel)
        except Exception as exc:  # noqa: BLE001 - answered SYSTEM_ERROR and logged
            return failure_response(request, channel, exc)
        if reply is None or isinstance(reply, (RemotingCommand, Deferred)):
            return reply  # a deferred's resolver guards itself (common.deferred)
        return _guarded_later(request, channel, reply)

    return handler


async def _guarded_later(
    request: RemotingCommand, channel: Channel, reply: Awaitable[RemotingCommand | None]
) -> RemotingCommand | None:
    try:
        return await reply
    except Exception as exc:  # noqa: BLE001 - answered SYSTEM_ERROR and logged
        return failure_response(request, channel, exc)


def failure_response(request: RemotingCommand, channel: Channel, exc: Exception) -> RemotingCommand:
    """Log a handler's exception; the SYSTEM_ERROR response standing in for its reply.

    A :class:`BadRequestError` (the peer's mistake) only warns, at most once per interval
    (the channel's :class:`~remoting.log_limit.WarningLimiter`); anything else is logged with
    its traceback.
    """
    if isinstance(exc, BadRequestError):
        dropped = channel.warnings.allow("bad request")
        if dropped is not None:
            log.warning(
                "bad request code=%s from %s: %s%s",
                request.code,
                channel.remote_addr,
                exc,
                suppressed_note(dropped),
            )
        return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
    log.error("request code=%s from %s failed", request.code, channel.remote_addr, exc_info=exc)
    return error(request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
