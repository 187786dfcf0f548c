"""minimq's client.

- :class:`Producer` and :class:`PullConsumer` here are the blocking API for ordinary programs;
  :mod:`client.aio` has the trio-native ones with the same names.
- Messages, queues and results (:class:`Message`, :class:`MessageQueue`, :class:`SendResult`,
  :class:`ReceivedMessage`), errors (:class:`MQClientError` and its subclasses) and the pure
  building blocks (validation, compression, queue selection) are shared by both.

Importing this package never imports pyspark.
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
from client.blocking import Producer, PullConsumer, PushConsumer, TransactionProducer
from client.compression import decompress_if_needed, maybe_compress
from client.config import ClientConfig
from client.consume_service import ConsumeResult
from client.errors import (
    BrokerNotFoundError,
    ClientClosedError,
    GroupInvalidError,
    MessageInvalidError,
    MQBrokerError,
    MQClientError,
    RemotingFailedError,
    RequestTimeoutError,
    TopicRouteError,
)
from client.message import (
    Message,
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
    from_record,
)
from client.producer_options import ProducerOptions, TransactionProducerOptions
from client.queue_selector import (
    LatencyFaultTolerance,
    MQFaultStrategy,
    RoundRobinSelector,
    publish_queues,
    select_by_key,
)
from client.transaction import LocalTransactionState, TransactionSendResult
from client.validation import validate_group, validate_message
from common.sql_filter import SelectorParseError
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
    "BrokerNotFoundError",
    "ClientClosedError",
    "ClientConfig",
    "ConsumeFrom",
    "ConsumeFromWhere",
    "ConsumeResult",
    "GroupInvalidError",
    "LatencyFaultTolerance",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "MQFaultStrategy",
    "MachineRoomResolver",
    "Message",
    "MessageInvalidError",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "ProducerOptions",
    "PullConsumer",
    "PushConsumer",
    "ReceivedMessage",
    "RemotingFailedError",
    "RequestTimeoutError",
    "RoundRobinSelector",
    "SelectorParseError",
    "SendResult",
    "SendStatus",
    "TopicRouteError",
    "TransactionProducer",
    "TransactionProducerOptions",
    "TransactionSendResult",
    "decompress_if_needed",
    "from_record",
    "maybe_compress",
    "publish_queues",
    "select_by_key",
    "validate_group",
    "validate_message",
]
