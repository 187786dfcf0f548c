"""END_TRANSACTION (RocketMQ's ``EndTransactionProcessor``) and GET_PENDING_HALF_MESSAGES.

::

    END_TRANSACTION            37      producerGroup, tranStateTableOffset, commitLogOffset,
                                       commitOrRollback (0 unknown | 8 commit | 12 rollback),
                                       fromTransactionCheck, msgId, transactionId -> SUCCESS
    GET_PENDING_HALF_MESSAGES  100001  [producerGroup] -> remoting.transaction_bodies body

Rules:

- Producers send END_TRANSACTION oneway; the answer (when it was not oneway) still says what
  happened: SUCCESS for a commit, a rollback, an unknown (only logged) or an ignored second
  decision (remark "already decided"); SYSTEM_ERROR when the record at ``commitLogOffset`` is
  not a half message with that queue offset, or belongs to another producer group
  (RocketMQ's ``checkPrepareMessage``); the store's code when the put failed.
- The decision itself is :meth:`broker.transaction.TransactionService.end_transaction`.
"""

from __future__ import annotations

import logging

from broker.status_codes import put_response_code
from broker.transaction import EndOutcome, PutFailedError, TransactionService
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord, RecordError, decode_record
from common.topic import TRANS_HALF_TOPIC
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import error, guarded, header_int, header_str, opt_bool, opt_str
from remoting.transaction_bodies import encode_half_messages

log = logging.getLogger(__name__)

_DECISIONS = {
    MessageSysFlag.TRANSACTION_NOT_TYPE: "UNKNOW",
    MessageSysFlag.TRANSACTION_COMMIT_TYPE: "COMMIT",
    MessageSysFlag.TRANSACTION_ROLLBACK_TYPE: "ROLLBACK",
}


class EndTransactionProcessor:
    """Answers the transaction requests over one :class:`TransactionService`."""

    def __init__(self, service: TransactionService) -> None:
        self.service = service

    def _half_record(
        self, request: RemotingCommand, group: str, queue_offset: int, phys: int
    ) -> MessageRecord | RemotingCommand:
        """The validated half record, or the error answer."""
        raw = self.service.store.lookup_message_by_offset(phys)
        try:
            rec = decode_record(raw) if raw is not None else None
        except RecordError:
            rec = None
        if rec is None or rec.topic != TRANS_HALF_TOPIC or rec.queue_offset != queue_offset:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"find prepared transaction message failed (commitLogOffset {phys}, "
                f"tranStateTableOffset {queue_offset})",
            )
        if rec.properties.get(MessageConst.PGROUP) != group:
            return error(request, ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        return rec

    async def end_transaction(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand | None:
        """END_TRANSACTION: commit, roll back or log one half message."""
        group = header_str(request, "producerGroup")
        queue_offset = header_int(request, "tranStateTableOffset")
        phys = header_int(request, "commitLogOffset")
        decision = header_int(request, "commitOrRollback")
        from_check = opt_bool(request, "fromTransactionCheck")
        msg_id = opt_str(request, "msgId", "")
        if decision not in _DECISIONS:
            return error(request, ResponseCode.SYSTEM_ERROR, f"bad commitOrRollback {decision}")
        found = self._half_record(request, group, queue_offset, phys)
        if isinstance(found, RemotingCommand):
            log.warning("END_TRANSACTION of %s from %s: %s", msg_id, group, found.remark)
            return found
        try:
            outcome = await self.service.end_transaction(found, decision)
        except PutFailedError as exc:
            code, remark = put_response_code(exc.result.status)
            return error(request, code, exc.result.remark or remark)
        except ValueError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        what = _DECISIONS[decision]
        log.log(
            logging.WARNING if outcome == EndOutcome.IGNORED else logging.INFO,
            "transaction %s of %s: %s%s -> %s",
            msg_id,
            group,
            what,
            " (from check)" if from_check else "",
            outcome,
        )
        if outcome == EndOutcome.IGNORED:
            return RemotingCommand.response_to(
                request, ResponseCode.SUCCESS, remark="already decided"
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def pending_half_messages(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_PENDING_HALF_MESSAGES: the undecided half messages (of one group or all)."""
        group = opt_str(request, "producerGroup", "")
        entries = await self.service.list_pending(group or None)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_half_messages(entries)
        )

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.END_TRANSACTION): guarded(self.end_transaction),
            int(RequestCode.GET_PENDING_HALF_MESSAGES): guarded(self.pending_half_messages),
        }
