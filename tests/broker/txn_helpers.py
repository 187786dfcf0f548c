"""Helpers of the transaction tests: a hand-made transactional producer over RemotingClient."""

from __future__ import annotations

import itertools
import time

import trio

from broker.controller import BrokerController
from common.message import MessageConst, MessageSysFlag
from common.message_id import decode_offset_msg_id
from common.record import MessageRecord, decode_records, encode_properties
from remoting.channel import Channel, Handler
from remoting.client import RemotingClient
from remoting.client_bodies import HeartbeatData, encode_heartbeat
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from tests.broker.inprocess import LIMIT

GROUP = "tx-pg"
TOPIC = "Payments"
FAST_CHECKS = {"transactionCheckInterval": "200", "transactionTimeOut": "100"}
"""Broker overrides: a check round every 200 ms, half messages checked after 100 ms."""
_opaque = itertools.count(1)
_uniq = itertools.count(1)

COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE
ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
UNKNOW = MessageSysFlag.TRANSACTION_NOT_TYPE


def _req(code: int, body: bytes = b"", **ext: ExtValue) -> RemotingCommand:
    return _cmd(code, ext, body)


def _cmd(code: int, ext: dict[str, ExtValue], body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, ext, body, opaque=next(_opaque))


def new_uniq() -> str:
    """A fresh UNIQ_KEY-shaped id (32 hex chars)."""
    return f"{next(_uniq):032X}"


async def send_half(
    client: RemotingClient,
    addr: str,
    body: bytes,
    *,
    group: str = GROUP,
    topic: str = TOPIC,
    queue_id: int = 0,
    uniq: str | None = None,
    extra: dict[str, str] | None = None,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 of a half message, as the wire contract says."""
    props = {
        MessageConst.TRAN_MSG: "true",
        MessageConst.PGROUP: group,
        MessageConst.UNIQ_KEY: uniq or new_uniq(),
        **(extra or {}),
    }
    return await client.invoke(
        addr,
        _req(
            RequestCode.SEND_MESSAGE_V2,
            body,
            a=group,
            b=topic,
            e=str(queue_id),
            f=str(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
            g=str(time.time_ns() // 1_000_000),
            i=encode_properties(props).decode(),
        ),
    )


def end_fields(
    sent: RemotingCommand, decision: int, *, group: str = GROUP, from_check: bool = False
) -> dict[str, ExtValue]:
    """END_TRANSACTION header for the half message answered by ``sent``."""
    _, _, phys = decode_offset_msg_id(str(sent.ext_fields["msgId"]))
    uniq = str(sent.ext_fields["transactionId"])
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(sent.ext_fields["queueOffset"]),
        "commitLogOffset": str(phys),
        "commitOrRollback": str(decision),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": uniq,
        "transactionId": uniq,
    }


async def end_tx(client: RemotingClient, addr: str, fields: dict[str, ExtValue]) -> RemotingCommand:
    """END_TRANSACTION as a request with an answer (producers send it oneway)."""
    return await client.invoke(addr, _cmd(RequestCode.END_TRANSACTION, fields))


async def end_oneway(client: RemotingClient, addr: str, fields: dict[str, ExtValue]) -> None:
    """END_TRANSACTION oneway, as producers send it."""
    await client.invoke_oneway(addr, _cmd(RequestCode.END_TRANSACTION, fields))


async def heartbeat(client: RemotingClient, addr: str, client_id: str, group: str = GROUP) -> None:
    """Register this connection as a producer of ``group``."""
    body = encode_heartbeat(HeartbeatData(client_id, (group,)))
    resp = await client.invoke(addr, _req(RequestCode.HEART_BEAT, body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def queue_records(broker: BrokerController, topic: str, queue_id: int = 0) -> list[MessageRecord]:
    """Every record of a queue, read from the broker's store."""
    store = broker.store
    assert store is not None
    out: list[MessageRecord] = []
    offset = 0
    while offset < store.get_max_offset_in_queue(topic, queue_id):
        result = store.get_messages(topic, queue_id, offset, 32)
        out.extend(decode_records(b"".join(result.records)))
        offset = result.next_begin_offset
    return out


async def pull_all(
    client: RemotingClient, addr: str, topic: str = TOPIC, queue_id: int = 0
) -> list[MessageRecord]:
    """PULL_MESSAGE from offset 0 until the queue's end (no suspension)."""
    out: list[MessageRecord] = []
    offset = 0
    while True:
        cmd = _req(
            RequestCode.PULL_MESSAGE,
            consumerGroup="tx-cg",
            topic=topic,
            queueId=str(queue_id),
            queueOffset=str(offset),
            maxMsgNums="32",
        )
        resp = await client.invoke(addr, cmd)
        if resp.code != ResponseCode.SUCCESS:
            return out
        out.extend(decode_records(resp.body))
        offset = int(str(resp.ext_fields["nextBeginOffset"]))


class CheckInbox:
    """The CHECK_TRANSACTION_STATE requests a producer connection receives."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[RemotingCommand](100)

    def handlers(self) -> dict[int, Handler]:
        """A RemotingClient handler table with the check handler."""

        async def on_check(request: RemotingCommand, channel: Channel) -> None:
            self.send.send_nowait(request)

        return {int(RequestCode.CHECK_TRANSACTION_STATE): on_check}

    async def next(self) -> RemotingCommand:
        """The next check request (fails after LIMIT seconds)."""
        with trio.fail_after(LIMIT):
            return await self.receive.receive()


def check_end_fields(
    check: RemotingCommand, decision: int, group: str = GROUP
) -> dict[str, ExtValue]:
    """END_TRANSACTION header answering a check request."""
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(check.ext_fields["tranStateTableOffset"]),
        "commitLogOffset": str(check.ext_fields["commitLogOffset"]),
        "commitOrRollback": str(decision),
        "fromTransactionCheck": "true",
        "msgId": str(check.ext_fields["msgId"]),
        "transactionId": str(check.ext_fields["transactionId"]),
    }
