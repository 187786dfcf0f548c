"""A :class:`ReceivedMessage` built by hand, for tests of the client's bookkeeping."""

from __future__ import annotations

from client.message import MessageQueue, ReceivedMessage


def received_at(queue: MessageQueue, offset: int, body: bytes) -> ReceivedMessage:
    """A message of ``queue`` at ``offset`` with ``body`` (ids and positions from the offset)."""
    return ReceivedMessage(
        topic=queue.topic,
        body=body,
        properties={},
        queue=queue,
        queue_offset=offset,
        msg_id=f"id{offset}",
        offset_msg_id=f"o{offset}",
        commitlog_offset=offset * 100,
        born_timestamp=0,
        store_timestamp=0,
        born_host="127.0.0.1:1",
        store_host="127.0.0.1:2",
    )
