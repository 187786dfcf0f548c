"""Transactional messages, trio-native (RocketMQ's ``TransactionMQProducer``).

::

    async with TransactionProducer(group="tx-pg", namesrv=..., checker=check) as producer:
        result = await producer.send_in_transaction(Message("Payments", b"..."), execute)

Rules (``DefaultMQProducerImpl#sendMessageInTransaction`` and ``checkTransactionState``):

- The message and ``execute`` are checked before any network call: one :class:`Message` (a
  batch is refused), a callable ``execute`` (RocketMQ: "tranExecutor is null"), no delay level.
  The message gets ``TRAN_MSG=true`` and ``PGROUP=<group>`` and is sent as a *half* message
  (sysflag ``TRANSACTION_PREPARED_TYPE``), with the usual retries on another broker, within
  ``send_timeout`` (the call's, else the producer's). A failed half send raises and
  ``execute`` is not run; a half message stored with a status other than ``SEND_OK`` (e.g. a
  flush timeout) is rolled back without running ``execute``.
- ``execute(msg, arg)`` then runs the local transaction: a plain function in a worker thread,
  an ``async def`` awaited. An exception, or anything but a :class:`LocalTransactionState`,
  counts as ``UNKNOW`` — never as a commit.
- The decision goes ONEWAY as END_TRANSACTION (``commitOrRollback`` 8 / 12 / 0) to the broker
  that stored the half message; losing it is logged only: the broker's check service asks later.
- When a broker asks (CHECK_TRANSACTION_STATE, routed here by the client instance by the
  record's PGROUP), the message is rebuilt with its real topic and queue (REAL_TOPIC /
  REAL_QID), ``checker(msg)`` runs like ``execute`` (exception: UNKNOW) and the answer goes
  ONEWAY as END_TRANSACTION with ``fromTransactionCheck=true`` to the asking broker.
- Checks run on a pool of their own (RocketMQ's ``checkThreadPoolMaxSize`` and
  ``checkRequestHoldMax``): at most ``check_threads`` checkers at once (1 by default), never
  on the worker threads of ``execute``; beyond ``check_request_hold_max`` checks waiting or
  running, a new one is dropped with a warning (the broker asks again). Leaving the producer
  abandons the checks still running (a plain checker's thread is left to finish alone, its
  answer dropped): the broker asks again.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeAlias, Unpack

import trio

from client.errors import CLIENT_ERROR, ClientClosedError, MessageInvalidError, MQClientError
from client.instance import ClientInstance
from client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from client.message import from_record as _from_record
from client.producer import Producer
from client.producer_options import TransactionProducerOptions, producer_settings
from client.validation import validate_group, validate_message
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


async def run_local(
    fn: Callable[..., Any],
    *args: Any,
    limiter: trio.CapacityLimiter | None = None,
    abandon_on_cancel: bool = False,
) -> LocalTransactionState:
    """Run an executor or checker: a plain function in a worker thread, an ``async def``
    awaited. An exception or a result that is not a state is logged and gives ``UNKNOW``.

    ``limiter`` bounds how many run at once (None: trio's default thread limiter, for plain
    functions only); ``abandon_on_cancel``: a cancelled plain function's thread is left to
    finish alone (it still holds ``limiter`` until it does)."""
    try:
        if is_async_callable(fn):
            if limiter is None:
                outcome = await fn(*args)
            else:
                async with limiter:
                    outcome = await fn(*args)
        else:
            outcome = await trio.to_thread.run_sync(
                fn, *args, limiter=limiter, abandon_on_cancel=abandon_on_cancel
            )
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


def check_transaction_args(msg: object, execute: object) -> None:
    """Refuse what :meth:`TransactionProducer.send_in_transaction` cannot send, before any
    network call: anything but one :class:`Message`, or an ``execute`` that is not callable."""
    if isinstance(msg, list | tuple):
        raise MQClientError(
            CLIENT_ERROR,
            "transactional messages cannot be sent as a batch: send_in_transaction takes one "
            "Message",
        )
    if not isinstance(msg, Message):
        topic = getattr(msg, "topic", "")
        raise MessageInvalidError(
            topic if isinstance(topic, str) else "",
            f"send_in_transaction takes a client Message, got {type(msg).__name__}",
        )
    if execute is None:
        raise MQClientError(CLIENT_ERROR, "tranExecutor is null")
    if not callable(execute):
        raise MQClientError(
            CLIENT_ERROR, f"the local transaction executor must be callable, got {execute!r}"
        )


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

    Options are those of :class:`client.aio.Producer`, plus ``check_threads`` (checkers
    running at once, 1 by default, as RocketMQ's ``checkThreadPoolMaxSize``) and
    ``check_request_hold_max`` (checks waiting or running beyond which a new one is dropped,
    2000, as RocketMQ's ``checkRequestHoldMax``). One transactional producer per group and
    client instance.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        checker: TransactionChecker,
        instance: ClientInstance | None = None,
        **options: Unpack[TransactionProducerOptions],
    ) -> None:
        if not callable(checker):
            raise MQClientError(CLIENT_ERROR, "a TransactionProducer needs a checker callable")
        validate_group(group)
        settings = producer_settings(options, who="TransactionProducer", transactional=True)
        self._init(group, namesrv, instance, settings)
        self.checker = checker
        self.check_request_hold_max = settings.check_request_hold_max
        self._check_limiter = trio.CapacityLimiter(settings.check_threads)
        self._checks: set[trio.CancelScope] = set()
        self.checks_dropped = 0
        """Checks dropped because ``check_request_hold_max`` were waiting or running."""

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
        for scope in self._checks:  # their answers would be dropped: the broker asks again
            scope.cancel()
        await super().__aexit__(exc_type, exc, tb)

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues (a list of the caller's own); also heartbeats to its
        brokers at once, so a member that has not sent yet can be asked to check its group's
        half messages."""
        queues = await self._queues(topic)
        await self._instance.heartbeat_all()
        return list(queues)  # not the producer's cached list, which every send picks from

    # ------------------------------------------------------------------ sending

    async def send_in_transaction(
        self,
        msg: Message,
        execute: LocalExecutor,
        arg: Any = None,
        *,
        send_timeout: float | None = None,
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``execute(msg, arg)``, commit or roll back.

        The half send, retries included, takes at most ``send_timeout`` seconds (default: the
        producer's), as :meth:`send`; ``execute`` takes what it takes."""
        check_transaction_args(msg, execute)
        half = await self.send_half(msg, send_timeout=send_timeout)
        if half.status is SendStatus.SEND_OK:
            state = await run_local(execute, msg, arg)
        else:
            log.warning("half message %s stored with %s: rolled back", half.msg_id, half.status)
            state = LocalTransactionState.ROLLBACK_MESSAGE
        return await self.end_transaction(half, state)

    async def send_half(self, msg: Message, *, send_timeout: float | None = None) -> SendResult:
        """Validate ``msg`` and store it as a half message (step one of
        :meth:`send_in_transaction`) within ``send_timeout`` seconds (default: the
        producer's); raises if no broker stored it."""
        budget_s = self._budget(send_timeout)
        if not self._running:
            raise ClientClosedError(f"producer {self.group}")
        check_transaction_args(msg, _no_executor)
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
        with self._as_closed_when_closed():
            return await self._send_with_retries(msg, uniq, body, sys_flag, budget_s)

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
        """Answer one CHECK_TRANSACTION_STATE from the broker at ``addr``, unless
        ``check_request_hold_max`` checks are already waiting or running; leaving the producer
        cancels it."""
        if len(self._checks) >= self.check_request_hold_max:
            self.checks_dropped += 1
            log.warning(
                "check of %s from %s dropped: %d checks of %s waiting or running "
                "(check_request_hold_max); the broker asks again",
                record.uniq_key,
                addr,
                len(self._checks),
                self.group,
            )
            return
        with trio.CancelScope() as scope:
            self._checks.add(scope)
            try:
                await self._answer_check(record, request, addr)
            finally:
                self._checks.discard(scope)
        if scope.cancelled_caught:
            log.info(
                "check of %s from %s abandoned: the producer is closing", record.uniq_key, addr
            )

    async def _answer_check(
        self, record: MessageRecord, request: RemotingCommand, addr: str
    ) -> None:
        broker_name = self._instance.broker_name_of(addr) or ""
        msg = checked_message(record, broker_name)
        state = await run_local(
            self.checker, msg, limiter=self._check_limiter, abandon_on_cancel=True
        )
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


def _no_executor(msg: Message, arg: Any) -> None:
    """Stands for ``execute`` when :meth:`TransactionProducer.send_half` checks a message."""


def _int(value: object) -> int:
    if value is None or isinstance(value, bool):
        raise ValueError(f"not an integer header value: {value!r}")
    return int(value)  # type: ignore[call-overload, no-any-return]
