"""Topic attributes the store and the broker share (RocketMQ's ``TopicAttributes``, ``CQType``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class CQType(StrEnum):
    """A topic's consume queue type (RocketMQ's ``CQType``)."""

    SIMPLE_CQ = "SimpleCQ"
    BATCH_CQ = "BatchCQ"


QUEUE_TYPE: Final = "queue.type"
"""The topic attribute naming its :class:`CQType` (RocketMQ's ``QUEUE_TYPE_ATTRIBUTE``)."""
