"""The ACL resources only the broker's store knows: the topic of the message a request names
(the thin I/O shell of :func:`remoting.acl.resource.half_message_needs` and
:func:`~remoting.acl.resource.viewed_message_needs`).

Rules:

- END_TRANSACTION names its half message by ``commitLogOffset``: PUB on that message's real
  topic is needed, so an account cannot commit or roll back another topic's transaction by
  naming it (its header ``topic``, RocketMQ 5's check, is checked as well but is the
  client's word).
- VIEW_MESSAGE_BY_ID names a message by ``offset``: SUB on its topic is needed.
- An offset that is missing or not a number adds nothing: the handler refuses it, reading
  nothing.
- An offset where no message the store dispatched starts
  (:meth:`store.message_store.MessageStore.is_dispatched_message`) makes the lookup answer
  None and the request is refused (fail closed): the commitlog returns whatever record-shaped
  bytes lie at an offset, and a fake record planted in a message's body could otherwise name a
  topic its sender may read while its tail covers the messages stored after it; an offset
  with nothing yet could be written between the check and the handler's read. An admin
  account with no explicit permission is not asked (it may read everything).
- The lookups run only with ``aclEnable``, after the request's signature passed
  (:class:`remoting.acl.validator.AclValidator`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from common.record import MessageRecord, RecordError, decode_record
from remoting.acl.resource import (
    Needs,
    NeedsLookup,
    half_message_needs,
    viewed_message_needs,
)
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from store.message_store import MessageStore


class NotAStoredMessage(Exception):
    """Bytes at an offset that are not the start of a message the store dispatched."""


def stored_message_lookups(store: MessageStore) -> dict[int, NeedsLookup]:
    """``{request code: lookup}`` for :func:`remoting.acl.guard.guard_handlers`."""
    return {
        int(RequestCode.END_TRANSACTION): partial(
            _needs_of_record, store, "commitLogOffset", half_message_needs
        ),
        int(RequestCode.VIEW_MESSAGE_BY_ID): partial(
            _needs_of_record, store, "offset", viewed_message_needs
        ),
    }


def _needs_of_record(
    store: MessageStore,
    field: str,
    needs_of: Callable[[MessageRecord | None], Needs],
    request: RemotingCommand,
) -> Needs | None:
    try:
        record = record_at(store, request.ext_fields.get(field))
    except NotAStoredMessage:
        return None
    return needs_of(record)


def record_at(store: MessageStore, offset: object) -> MessageRecord | None:
    """The message (without its body) at commitlog ``offset`` (decimal text or int); None
    when the offset is not a number; NotAStoredMessage when no dispatched message starts
    there."""
    phys = _offset(offset)
    if phys is None:
        return None
    try:
        raw = store.lookup_message_by_offset(phys)
        if raw is None:
            raise NotAStoredMessage(phys)
        record = decode_record(raw, with_body=False)
    except (RecordError, ValueError):
        raise NotAStoredMessage(phys) from None
    if not store.is_dispatched_message(phys, record):
        raise NotAStoredMessage(phys)
    return record


def _offset(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        return int(value)
    return None
