"""Test helpers for issue #4's broker features: pulls, sends with properties, send-backs."""

from __future__ import annotations

from common.message_id import decode_offset_msg_id
from common.record import MessageRecord, decode_records, encode_properties
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue
from tests.broker.inprocess import req

READER_GROUP = "reader_group"


async def pull_all(
    client: RemotingClient, addr: str, topic: str, queue_id: int = 0, group: str = READER_GROUP
) -> list[MessageRecord]:
    """Every message of ``topic``/``queue_id`` from offset 0 (up to 256)."""
    resp = await client.invoke(
        addr,
        req(
            RequestCode.PULL_MESSAGE,
            consumerGroup=group,
            topic=topic,
            queueId=str(queue_id),
            queueOffset="0",
            maxMsgNums="256",
        ),
    )
    if resp.code != ResponseCode.SUCCESS:
        return []
    return decode_records(resp.body)


async def send(
    client: RemotingClient,
    addr: str,
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    reconsume_times: int = 0,
    **props: str,
) -> int:
    """SEND_MESSAGE with ``props``; the stored message's commitlog offset."""
    resp = await client.invoke(
        addr,
        req(
            RequestCode.SEND_MESSAGE,
            body,
            producerGroup="pg",
            topic=topic,
            queueId=str(queue_id),
            bornTimestamp="1700000000000",
            properties=encode_properties(dict(props)).decode(),
            reconsumeTimes=str(reconsume_times),
        ),
    )
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return decode_offset_msg_id(str(resp.ext_fields["msgId"]))[2]


async def send_back(
    client: RemotingClient,
    addr: str,
    offset: int,
    group: str,
    *,
    delay_level: int = 0,
    max_reconsume_times: int | None = 16,
    reconsume_times: int | None = None,
) -> tuple[int, str]:
    """CONSUMER_SEND_MSG_BACK with the client's header types; ``(code, remark)``."""
    fields: dict[str, ExtValue] = {
        "offset": offset,
        "group": group,
        "delayLevel": delay_level,
        "originMsgId": "",
        "originTopic": "",
        "unitMode": False,
    }
    if max_reconsume_times is not None:
        fields["maxReconsumeTimes"] = max_reconsume_times
    if reconsume_times is not None:
        fields["reconsumeTimes"] = reconsume_times
    resp = await client.invoke(addr, req(RequestCode.CONSUMER_SEND_MSG_BACK, **fields))
    return resp.code, resp.remark or ""
