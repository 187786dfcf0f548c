"""Topic and group names: RocketMQ's ``TopicValidator`` and the system names of ``MixAll``.

One place for the rules every process applies: the store refuses illegal topics, the broker
refuses them (and reserved ones) before touching the store, the client before any network call.

Rules: names match ``^[%|a-zA-Z0-9_-]+$``; a topic has at most 127 characters, a group at most
120. Clients may not send to :data:`NOT_ALLOWED_SEND_TOPICS`.
"""

from __future__ import annotations

import re
from typing import Final

VALID_NAME: Final = re.compile(r"^[%|a-zA-Z0-9_-]+$")
NAME_CHARS: Final = b"%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""The bytes of :data:`VALID_NAME`, for C-speed checks (``raw.translate(None, NAME_CHARS)``
leaves nothing of a valid name)."""
TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 120

AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"

SYSTEM_TOPICS: Final = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        TRACE_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
"""RocketMQ's ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``."""


def topic_problem(topic: object, max_length: int = TOPIC_MAX_LENGTH) -> str | None:
    """Why ``topic`` is not a valid topic name, or None when it is."""
    return _name_problem("topic", topic, max_length)


def group_problem(group: object) -> str | None:
    """Why ``group`` is not a valid group name, or None when it is."""
    return _name_problem("group", group, GROUP_MAX_LENGTH)


def _name_problem(kind: str, name: object, max_length: int) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return f"the {kind} name is blank"
    if len(name) > max_length:
        return f"the {kind} name is longer than {max_length} characters"
    if not VALID_NAME.fullmatch(name):
        return f"the {kind} name {name!r} has characters outside {VALID_NAME.pattern}"
    return None


def is_system_topic(topic: str) -> bool:
    """True for RocketMQ's system topics (the fixed set and the ``rmq_sys_`` prefix)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_not_allowed_send_topic(topic: str) -> bool:
    """True for the system topics that clients may not send to."""
    return topic in NOT_ALLOWED_SEND_TOPICS


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a group's failed messages are re-delivered from."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after the last retry."""
    return DLQ_GROUP_TOPIC_PREFIX + group
