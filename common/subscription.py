"""Subscription expressions (RocketMQ's ``FilterAPI``, ``SubscriptionData`` and
``MessageSelector``), pure.

A TAG expression is ``"*"`` (everything; an empty expression means the same) or tags joined by
``||`` (``"TagA || TagB"``). The broker filters by the tags' Java ``String.hashCode`` (what the
consume queue stores); the client re-checks the exact tag, because two tags may share a hash.

An SQL92 expression (``MessageSelector.by_sql("a > 5 AND b = 'x'")``) selects messages by their
properties (:mod:`common.sql_filter`); only brokers with ``enablePropertyFilter=true`` serve it.
It is checked with the broker's own parser when the subscription is built, and the broker alone
filters: the client does not re-check what it receives.

Wherever a subscription expression is taken, a plain string is a TAG expression and a
:class:`MessageSelector` says its type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from common.hashing import java_string_hash
from common.sql_filter import EXPRESSION_SQL92, compile_sql_cached

SUB_ALL: Final = "*"
EXPRESSION_TAG: Final = "TAG"
"""RocketMQ's ``ExpressionType.TAG``."""
EXPRESSION_TYPES: Final = (EXPRESSION_TAG, EXPRESSION_SQL92)


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """A subscription expression and its type (RocketMQ's ``MessageSelector``)."""

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """An SQL92 selector over message properties; raises
        :class:`common.sql_filter.SelectorParseError` (a ValueError naming the position) if
        ``sql`` is not a valid selector."""
        compile_sql_cached(sql)
        return cls(EXPRESSION_SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str) -> MessageSelector:
        """A TAG expression: ``"*"``, or tags joined by ``||``."""
        return cls(EXPRESSION_TAG, tag)


SubscriptionExpression: TypeAlias = "str | MessageSelector"
"""What a subscription takes: a TAG expression as a plain string, or a :class:`MessageSelector`."""


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
        """True for the TAG expression ``"*"``."""
        return not self.tags_set and self.expression_type == EXPRESSION_TAG

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
    topic: str, expression: SubscriptionExpression | None, sub_version: int = 0
) -> SubscriptionData:
    """``FilterAPI.build``: parse ``expression`` (None means ``"*"``); ValueError if it is not
    valid (an SQL92 one raises :class:`common.sql_filter.SelectorParseError`, naming where)."""
    if isinstance(expression, MessageSelector):
        if expression.expression_type == EXPRESSION_SQL92:
            compile_sql_cached(expression.expression)
            return SubscriptionData(
                topic=topic,
                sub_string=expression.expression,
                sub_version=sub_version,
                expression_type=EXPRESSION_SQL92,
            )
        if expression.expression_type != EXPRESSION_TAG:
            raise ValueError(
                f"expression type {expression.expression_type!r} is not one of {EXPRESSION_TYPES}"
            )
        expression = expression.expression
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
