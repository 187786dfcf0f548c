"""Admin requests the broker forwards to one live consumer over that consumer's own connection
(RocketMQ's ``AdminBrokerProcessor.callConsumer`` and ``Broker2Client.callClient``).

::

    GET_CONSUMER_RUNNING_INFO  307  consumerGroup clientId [jstackEnable]
                                    -> the consumer's answer: ConsumerRunningInfo
    CONSUME_MESSAGE_DIRECTLY   309  consumerGroup clientId msgId [topic]
                                    -> the consumer's answer: ConsumeMessageDirectlyResult

Bodies: :mod:`remoting.consumer_bodies`.

Rules:

- The member is found by ``clientId`` in the group's table (:class:`ClientManager`); when it
  is not there, the answer is SYSTEM_ERROR ``The Consumer <group> <clientId> not online``.
- The request goes to the member with the admin's header fields and body, bounded by
  ``call_timeout_s`` (:data:`CALL_CLIENT_TIMEOUT_S`, RocketMQ's 10 s): no answer in time is
  CONSUME_MSG_TIMEOUT ``consumer <group> <clientId> Timeout: ...``, a broken connection
  SYSTEM_ERROR ``invoke consumer <group> <clientId> Exception: ...``. The member's answer,
  error or not, is relayed as it is (code, remark, body).
- For 309 the broker first reads the message that the offset message id ``msgId`` names from
  its store and sends it as the body, with ``brokerName`` added to the header; an id that is
  not an offset message id, or names no message here, is SYSTEM_ERROR and the member is not
  asked (RocketMQ sends an empty body then).
"""

from __future__ import annotations

import logging
from typing import Final

import trio

from broker.processors.client import ClientService
from common.message_id import decode_offset_msg_id
from common.record import RecordError
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import error, guarded, header_str
from store import MessageStore

log = logging.getLogger(__name__)

CALL_CLIENT_TIMEOUT_S: Final = 10.0
"""Upper bound of one forwarded call (RocketMQ's ``Broker2Client.callClient``: 10 s)."""


class ConsumerCallProcessor:
    """Forwards GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY; see the module rules."""

    def __init__(
        self,
        store: MessageStore,
        clients: ClientService,
        broker_name: str,
        *,
        call_timeout_s: float = CALL_CLIENT_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.clients = clients
        self.broker_name = broker_name
        self.call_timeout_s = call_timeout_s

    async def running_info(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO."""
        return await self._call_consumer(request, request.body, {})

    async def consume_directly(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY: the stored message goes along as the body."""
        msg_id = header_str(request, "msgId")
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
            raw = self.store.lookup_message_by_offset(phys) if phys >= 0 else None
        except (RecordError, ValueError):
            raw = None
        if raw is None:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"no message with offset message id {msg_id}"
            )
        return await self._call_consumer(request, raw, {"brokerName": self.broker_name})

    async def _call_consumer(
        self, request: RemotingCommand, body: bytes, extra: dict[str, ExtValue]
    ) -> RemotingCommand:
        group = header_str(request, "consumerGroup")
        client_id = header_str(request, "clientId")
        member = self.clients.manager.find_consumer(group, client_id)
        if member is None or member.channel.closed:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> not online",
            )
        fields = {**request.ext_fields, **extra}
        forwarded = RemotingCommand.request(request.code, fields, body, opaque=0)
        who = f"consumer <{group}> <{client_id}>"
        try:
            answer = await member.channel.invoke(forwarded, timeout_s=self.call_timeout_s)
        except RemotingTimeoutError as exc:
            return error(request, ResponseCode.CONSUME_MSG_TIMEOUT, f"{who} Timeout: {exc}")
        except (
            RemotingError,
            OSError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
        ) as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"invoke {who} Exception: {exc!r}")
        return RemotingCommand.response_to(
            request, answer.code, remark=answer.remark, body=answer.body
        )

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.GET_CONSUMER_RUNNING_INFO): guarded(self.running_info),
            int(RequestCode.CONSUME_MESSAGE_DIRECTLY): guarded(self.consume_directly),
        }
