"""minimq's client.

- :class:`Producer` and :class:`PullConsumer` here are the blocking API for ordinary programs;
  :mod:`client.aio` has the trio-native ones with the same names.
- Messages, queues and results (:class:`Message`, :class:`MessageQueue`, :class:`SendResult`,
  :class:`ReceivedMessage`), errors (:class:`MQClientError` and its subclasses) and the pure
  building blocks (validation, compression, queue selection) are shared by both.

Importing this package never imports pyspark.
"""

from client.blocking import Producer, PullConsumer
from client.compression import decompress_if_needed, maybe_compress
from client.errors import (
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
from client.queue_selector import (
    LatencyFaultTolerance,
    MQFaultStrategy,
    RoundRobinSelector,
    publish_queues,
    select_by_key,
)
from client.validation import validate_group, validate_message
from remoting.client_bodies import ConsumeFromWhere

__all__ = [
    "ClientClosedError",
    "ConsumeFromWhere",
    "GroupInvalidError",
    "LatencyFaultTolerance",
    "MQBrokerError",
    "MQClientError",
    "MQFaultStrategy",
    "Message",
    "MessageInvalidError",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "ReceivedMessage",
    "RemotingFailedError",
    "RequestTimeoutError",
    "RoundRobinSelector",
    "SendResult",
    "SendStatus",
    "TopicRouteError",
    "decompress_if_needed",
    "from_record",
    "maybe_compress",
    "publish_queues",
    "select_by_key",
    "validate_group",
    "validate_message",
]
