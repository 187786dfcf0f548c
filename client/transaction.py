"""Transactional messages, trio-native (RocketMQ's ``TransactionMQProducer``).

::

    async with TransactionProducer(group="tx-pg", namesrv=..., checker=check) as producer:
        result = await producer.send_in_transaction(Message("Payments", b"..."), execute)

Rules (``DefaultMQProducerImpl#sendMessageInTransaction`` and ``checkTransactionState``):

- The message is validated before any network call; a delay level is refused. It gets
  ``TRAN_MSG=true`` and ``PGROUP=<group>`` and is sent as a *half* message (sysflag
  ``TRANSACTION_PREPARED_TYPE``), with the usual retries on another broker. A failed half send
  raises and ``execute`` is not run; a half message stored with a status other than
  ``SEND_OK`` (e.g. a flush timeout) is rolled back without running ``execute``.
- ``execute(msg, arg)`` then runs the local transaction: a plain function in a worker thread,
  an ``async def`` awaited. An exception, or anything but a :class:`LocalTransactionState`,
  counts as ``UNKNOW`` — never as a commit.
- The decision goes ONEWAY as END_TRANSACTION (``commitOrRollback`` 8 / 12 / 0) to the broker
  that stored the half message; losing it is logged only: the broker's check service asks later.
- When a broker asks (CHECK_TRANSACTION_STATE, routed here by the client instance by the
  record's PGROUP), the message is rebuilt with its real topic and queue (REAL_TOPIC /
  REAL_QID), ``checker(msg)`` runs like ``execute`` (exception: UNKNOW) and the answer goes
  ONEWAY as END_TRANSACTION with ``fromTransactionCheck=true`` to the asking broker.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeAlias

import trio

from client.errors import CLIENT_ERROR, ClientClosedError, MessageInvalidError, MQClientError
from client.instance import ClientInstance
from client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from client.message import from_record as _from_record
from client.producer import Producer
from client.validation import validate_message
from common.message import MessageConst, MessageSysFlag
from common.message_id import decode_offset_msg_id
from common.record import MessageRecord
from remoting.codes import RequestCode
from remoting.command import ExtValue, RemotingCommand

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    """The outcome of a local transaction (RocketMQ's spelling, ``UNKNOW`` included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"

    @property
    def commit_or_rollback(self) -> int:
        """END_TRANSACTION's ``commitOrRollback``: the transaction sysflag (8 / 12 / 0)."""
        return _COMMIT_OR_ROLLBACK[self]


_COMMIT_OR_ROLLBACK = {
    LocalTransactionState.COMMIT_MESSAGE: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: MessageSysFlag.TRANSACTION_NOT_TYPE,
}

LocalExecutor: TypeAlias = Callable[[Message, Any], Any]
"""``execute(msg, arg) -> LocalTransactionState``, plain or ``async def``."""
TransactionChecker: TypeAlias = Callable[[ReceivedMessage], Any]
"""``checker(msg) -> LocalTransactionState``, plain or ``async def``; ``msg`` carries its
real topic and queue."""


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """What :meth:`TransactionProducer.send_in_transaction` returns: the half message's send
    result plus the local transaction's outcome."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str
    local_state: LocalTransactionState


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for an ``async def`` function (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


async def run_local(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    """Run an executor or checker: a plain function in a worker thread, an ``async def``
    awaited. An exception or a result that is not a state is logged and gives ``UNKNOW``."""
    try:
        if is_async_callable(fn):
            outcome = await fn(*args)
        else:
            outcome = await trio.to_thread.run_sync(fn, *args)
    except Exception:
        log.exception("local transaction callback %r raised; state UNKNOW", fn)
        return LocalTransactionState.UNKNOW
    if not isinstance(outcome, LocalTransactionState):
        log.warning("%r returned %r, not a LocalTransactionState; state UNKNOW", fn, outcome)
        return LocalTransactionState.UNKNOW
    return outcome


def run_local_sync(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    """:func:`run_local` for a plain function in the calling thread (the blocking facade)."""
    try:
        outcome = fn(*args)
    except Exception:
        log.exception("local transaction callback %r raised; state UNKNOW", fn)
        return LocalTransactionState.UNKNOW
    if not isinstance(outcome, LocalTransactionState):
        log.warning("%r returned %r, not a LocalTransactionState; state UNKNOW", fn, outcome)
        return LocalTransactionState.UNKNOW
    return outcome


def end_transaction_request(
    *,
    group: str,
    topic: str,
    offset_msg_id: str,
    tran_state_table_offset: int,
    msg_id: str,
    transaction_id: str,
    state: LocalTransactionState,
    from_check: bool,
    commit_log_offset: int | None = None,
) -> RemotingCommand:
    """END_TRANSACTION; ``commitLogOffset`` is decoded from ``offset_msg_id`` unless given."""
    if commit_log_offset is None:
        commit_log_offset = decode_offset_msg_id(offset_msg_id)[2]
    header: dict[str, ExtValue] = {
        "topic": topic,
        "producerGroup": group,
        "tranStateTableOffset": tran_state_table_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": state.commit_or_rollback,
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": msg_id,
        "transactionId": transaction_id,
    }
    return RemotingCommand.request(RequestCode.END_TRANSACTION, header, opaque=0)


def checked_message(record: MessageRecord, broker_name: str) -> ReceivedMessage:
    """The message a checker sees: the half record with its real topic and queue restored."""
    msg = _from_record(record, broker_name)
    topic = msg.properties.get(MessageConst.REAL_TOPIC, msg.topic)
    try:
        queue_id = int(msg.properties.get(MessageConst.REAL_QID, msg.queue.queue_id))
    except ValueError:
        queue_id = msg.queue.queue_id
    return dataclasses.replace(msg, topic=topic, queue=MessageQueue(topic, broker_name, queue_id))


class TransactionProducer(Producer):
    """A producer of transactional messages; ``checker`` answers the brokers' checks.

    Options are those of :class:`client.aio.Producer`. One transactional producer per group
    and client instance.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        checker: TransactionChecker,
        instance: ClientInstance | None = None,
        **options: Any,
    ) -> None:
        if not callable(checker):
            raise MQClientError(CLIENT_ERROR, "a TransactionProducer needs a checker callable")
        super().__init__(group, namesrv, instance=instance, **options)
        self.checker = checker

    async def __aenter__(self) -> TransactionProducer:
        await super().__aenter__()
        try:
            self._instance.register_transaction_checker(self.group, self._on_check)
        except BaseException:
            await super().__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._instance.unregister_transaction_checker(self.group)
        await super().__aexit__(exc_type, exc, tb)

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues; also heartbeats to its brokers at once, so a member
        that has not sent yet can be asked to check its group's half messages."""
        queues = await self._queues(topic)
        await self._instance.heartbeat_all()
        return queues

    # ------------------------------------------------------------------ sending

    async def send_in_transaction(
        self, msg: Message, execute: LocalExecutor, arg: Any = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``execute(msg, arg)``, commit or roll back."""
        half = await self.send_half(msg)
        if half.status is SendStatus.SEND_OK:
            state = await run_local(execute, msg, arg)
        else:
            log.warning("half message %s stored with %s: rolled back", half.msg_id, half.status)
            state = LocalTransactionState.ROLLBACK_MESSAGE
        return await self.end_transaction(half, state)

    async def send_half(self, msg: Message) -> SendResult:
        """Validate ``msg`` and store it as a half message (step one of
        :meth:`send_in_transaction`); raises if no broker stored it."""
        if not self._running:
            raise ClientClosedError(f"producer {self.group}")
        validate_message(msg, self.max_message_size)
        if msg.properties.get(MessageConst.DELAY, "0") not in ("", "0"):  # "1s" included
            raise MessageInvalidError(
                msg.topic, "DelayTimeLevel is not supported for transaction message"
            )
        msg.properties[MessageConst.TRAN_MSG] = "true"
        msg.properties[MessageConst.PGROUP] = self.group
        uniq, body, sys_flag = self._prepare(msg)
        msg.transaction_id = uniq
        sys_flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
        return await self._send_with_retries(msg, uniq, body, sys_flag, self.send_timeout)

    async def end_transaction(
        self, half: SendResult, state: LocalTransactionState
    ) -> TransactionSendResult:
        """Send the decision on a stored half message ONEWAY to its broker (failures are
        logged: the broker will check) and return the transaction's result."""
        transaction_id = half.transaction_id or half.msg_id
        try:
            addr = await self._instance.find_broker_addr(half.queue)
            cmd = end_transaction_request(
                group=self.group,
                topic=half.queue.topic,
                offset_msg_id=half.offset_msg_id,
                tran_state_table_offset=half.queue_offset,
                msg_id=half.msg_id,
                transaction_id=transaction_id,
                state=state,
                from_check=False,
            )
            await self._instance.invoke_oneway(addr, cmd)
        except (MQClientError, ValueError) as exc:
            log.warning("END_TRANSACTION %s (%s) not sent: %s", half.msg_id, state.name, exc)
        return TransactionSendResult(
            status=half.status,
            msg_id=half.msg_id,
            offset_msg_id=half.offset_msg_id,
            queue=half.queue,
            queue_offset=half.queue_offset,
            transaction_id=transaction_id,
            local_state=state,
        )

    # ------------------------------------------------------------------ checks

    async def _on_check(self, record: MessageRecord, request: RemotingCommand, addr: str) -> None:
        """Answer one CHECK_TRANSACTION_STATE from the broker at ``addr``."""
        broker_name = self._instance.broker_name_of(addr) or ""
        msg = checked_message(record, broker_name)
        state = await run_local(self.checker, msg)
        fields = request.ext_fields
        try:
            cmd = end_transaction_request(
                group=self.group,
                topic=msg.topic,
                offset_msg_id=str(fields.get("offsetMsgId", msg.offset_msg_id)),
                tran_state_table_offset=_int(fields.get("tranStateTableOffset")),
                commit_log_offset=_int(fields.get("commitLogOffset")),
                msg_id=msg.uniq_key or str(fields.get("msgId", "")),
                transaction_id=str(fields.get("transactionId", "") or msg.uniq_key or ""),
                state=state,
                from_check=True,
            )
            await self._instance.invoke_oneway(addr, cmd)
        except (MQClientError, ValueError) as exc:
            log.warning("answer to the check of %s not sent to %s: %s", msg.msg_id, addr, exc)


def _int(value: object) -> int:
    if value is None or isinstance(value, bool):
        raise ValueError(f"not an integer header value: {value!r}")
    return int(value)  # type: ignore[call-overload, no-any-return]
