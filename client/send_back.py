"""A push consumer's fallback when the broker that stored a failed message does not take it
back (RocketMQ's ``DefaultMQPushConsumerImpl#sendMessageBackAsNormalMessage``).

Rules:

- The message is sent, as a new message, to the group's retry topic ``%RETRY%<group>`` with
  the client instance's inner producer (group ``CLIENT_INNER_PRODUCER``), to any broker that
  has that topic, the first attempt to another broker than the one that failed.
- The new message has the original's body, flag and properties (UNIQ_KEY, KEYS and TAGS
  included, so the consumer sees the same ``msg_id``), RETRY_TOPIC = the topic the group
  consumed it from, ORIGIN_MESSAGE_ID = the original's (else its ``msg_id``), delay level
  ``3 + reconsume times``, and RECONSUME_TIME = ``reconsume times + 1`` and
  MAX_RECONSUME_TIMES = the consumer's ``max_reconsume_times``, which the producer sends as
  the header's ``reconsumeTimes`` / ``maxReconsumeTimes``. TRAN_MSG is dropped.
- The broker stores it in the retry topic, or in ``%DLQ%<group>`` when RECONSUME_TIME is over
  the maximum (the header's, else the group's ``retryMaxTimes``), the same message
  CONSUMER_SEND_MSG_BACK would have sent there. An orderly consumer's message that used up
  its retries (``reconsume times >= max_reconsume_times``) therefore reaches the DLQ this way
  too, as RocketMQ's ``ConsumeMessageOrderlyService#sendMessageBack``.
- Only when this send fails too is the message consumed again locally (the caller's rule).
"""

from __future__ import annotations

import logging

from client.errors import MQClientError
from client.instance import ClientInstance
from client.message import Message, ReceivedMessage
from common.message import MessageConst
from common.topic import retry_topic

log = logging.getLogger(__name__)

RETRY_DELAY_LEVEL_BASE = 3
"""The new message's delay level is this plus its reconsume times (as CONSUMER_SEND_MSG_BACK's
delay level 0)."""


def retry_message(msg: ReceivedMessage, group: str, max_reconsume_times: int) -> Message:
    """The message to send to ``group``'s retry topic in place of ``msg`` (module docstring)."""
    props = dict(msg.properties)
    props.pop(MessageConst.TRAN_MSG, None)
    props[MessageConst.ORIGIN_MESSAGE_ID] = props.get(MessageConst.ORIGIN_MESSAGE_ID) or msg.msg_id
    props[MessageConst.RETRY_TOPIC] = msg.topic
    props[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times + 1)
    props[MessageConst.MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    props[MessageConst.DELAY] = str(RETRY_DELAY_LEVEL_BASE + msg.reconsume_times)
    return Message(retry_topic(group), msg.body, properties=props, flag=msg.flag)


async def send_to_retry_topic(
    instance: ClientInstance, msg: ReceivedMessage, group: str, max_reconsume_times: int
) -> bool:
    """Send :func:`retry_message` of ``msg`` with ``instance``'s inner producer, avoiding the
    broker that stored ``msg``; True when a broker stored it."""
    try:
        producer = await instance.inner_producer()
        await producer.send(
            retry_message(msg, group, max_reconsume_times), avoid_broker=msg.queue.broker_name
        )
    except MQClientError as exc:
        log.warning("sending %s to the retry topic of %s failed: %s", msg.msg_id, group, exc)
        return False
    return True


__all__ = ["RETRY_DELAY_LEVEL_BASE", "retry_message", "send_to_retry_topic"]
