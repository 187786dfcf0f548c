"""Subscription expressions (RocketMQ's ``FilterAPI`` and ``SubscriptionData``), pure.

A TAG expression is ``"*"`` (everything; an empty expression means the same) or tags joined by
``||`` (``"TagA || TagB"``). The broker filters by the tags' Java ``String.hashCode`` (what the
consume queue stores); the client re-checks the exact tag, because two tags may share a hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.hashing import java_string_hash

SUB_ALL: Final = "*"
EXPRESSION_TAG: Final = "TAG"


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic subscription: the expression and its parsed tags and tag hash codes.

    ``tags_set`` is empty for ``"*"`` (match everything). ``sub_version`` is the time the
    subscription was built (ms), as in RocketMQ, so a broker can tell the newer of two.
    """

    topic: str
    sub_string: str = SUB_ALL
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG

    @property
    def matches_all(self) -> bool:
        """True for ``"*"``."""
        return not self.tags_set

    def matches_tag(self, tag: str | None) -> bool:
        """The client-side exact check (``"*"`` matches a message without tags too)."""
        return not self.tags_set or (tag is not None and tag in self.tags_set)


def parse_tags(expression: str) -> tuple[str, ...]:
    """The tags of a TAG expression; ``()`` for ``"*"`` or empty. Order kept, duplicates removed."""
    text = expression.strip()
    if not text or text == SUB_ALL:
        return ()
    tags: list[str] = []
    for part in text.split("||"):
        tag = part.strip()
        if tag and tag not in tags:
            tags.append(tag)
    if not tags:
        raise ValueError(f"subscription expression {expression!r} names no tag")
    return tuple(tags)


def build_subscription(
    topic: str, expression: str | None, sub_version: int = 0
) -> SubscriptionData:
    """``FilterAPI.buildSubscriptionData``: parse ``expression`` (None means ``"*"``)."""
    text = (expression or SUB_ALL).strip() or SUB_ALL
    tags = parse_tags(text)
    return SubscriptionData(
        topic=topic,
        sub_string=text,
        tags_set=tags,
        code_set=tuple(java_string_hash(t) for t in tags),
        sub_version=sub_version,
    )


def tag_codes(expression: str) -> frozenset[int] | None:
    """Tag hash codes of a TAG expression; None for ``"*"`` (match everything)."""
    tags = parse_tags(expression)
    return frozenset(java_string_hash(t) for t in tags) if tags else None
