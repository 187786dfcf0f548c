"""The trio-native client: the same names as :mod:`client`, with ``async`` methods.

::

    from client.aio import Producer, PullConsumer

    async with Producer(group="pg", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"..."))

Bound any call with trio's cancel scopes (``with trio.fail_after(2): ...``); each request in
it still gives up after ``request_timeout_s`` unless the call runs under
:func:`with_call_budget` (``await with_call_budget(10, consumer.committed, mq)``). Pass one
:class:`ClientInstance` as ``instance=`` to several producers and consumers to share their
connections, routes and heartbeats.
"""

from client.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    MachineRoomResolver,
)
from client.config import ClientConfig
from client.consume_service import ConsumeResult
from client.instance import ClientInstance, with_call_budget
from client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from client.producer import Producer
from client.producer_options import ProducerOptions, TransactionProducerOptions
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from client.transaction import LocalTransactionState, TransactionProducer, TransactionSendResult
from common.subscription import MessageSelector
from remoting.client_bodies import ConsumeFrom, ConsumeFromWhere, MessageModel

__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "ClientConfig",
    "ClientInstance",
    "ConsumeFrom",
    "ConsumeFromWhere",
    "ConsumeResult",
    "LocalTransactionState",
    "MachineRoomResolver",
    "Message",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "ProducerOptions",
    "PullConsumer",
    "PushConsumer",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
    "TransactionProducerOptions",
    "TransactionSendResult",
    "with_call_budget",
]
