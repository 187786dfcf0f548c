"""minimq's client: messages, ids, validation, compression and producer queue selection.

The modules here are pure (no sockets, no trio); the networked Producer and PullConsumer build
on them. Importing this package needs nothing beyond minimq's ``common`` package.
"""

from client.compression import decompress_if_needed, maybe_compress
from client.errors import GroupInvalidError, MessageInvalidError, MQClientError
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

__all__ = [
    "GroupInvalidError",
    "LatencyFaultTolerance",
    "MQClientError",
    "MQFaultStrategy",
    "Message",
    "MessageInvalidError",
    "MessageQueue",
    "ReceivedMessage",
    "RoundRobinSelector",
    "SendResult",
    "SendStatus",
    "decompress_if_needed",
    "from_record",
    "maybe_compress",
    "publish_queues",
    "select_by_key",
    "validate_group",
    "validate_message",
]
