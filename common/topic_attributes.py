"""Topic attributes (RocketMQ 5's ``TopicAttributes``, ``AttributeParser``, ``AttributeUtil``,
``QueueTypeUtils``), as pure functions of strings and maps.

A topic config holds ``attributes``: ``{key: value}``. A request changes them with a
*modification* string, RocketMQ's ``+key=value,+key2=value2,-key3`` (the ``attributes`` field
of UPDATE_AND_CREATE_TOPIC, ``mqadmin updateTopic -a``): ``+`` adds or updates a key, ``-``
deletes one.

Rules (``AttributeUtil.alterCurrentAttributes``):

- Creating a topic takes ``+`` keys only; a key must be known (:data:`TOPIC_ATTRIBUTES`) and its
  value valid; a key appears at most once.
- Updating an existing topic: ``+`` adds or updates, ``-`` deletes a key it has; an
  unchangeable attribute (``queue.type``) may not be added, updated or deleted. minimq accepts
  ``+key=value`` of an unchangeable key whose current value (its default when the topic does
  not have it) is already ``value``: re-running the command that created the topic succeeds
  (RocketMQ refuses it).
- No modification keeps the current attributes (an update of queue counts or perm alone).

Only ``queue.type`` (``SimpleCQ``, the default, or ``BatchCQ``) is supported; RocketMQ's other
keys (``cleanup.policy``, ``message.type``, ``reserve.time``) are refused as unsupported.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


class CQType(enum.StrEnum):
    """The consume queue type of a topic (RocketMQ's ``CQType``)."""

    SIMPLE_CQ = "SimpleCQ"
    BATCH_CQ = "BatchCQ"


QUEUE_TYPE: Final = "queue.type"
"""The attribute key of a topic's :class:`CQType` (``TopicAttributes.QUEUE_TYPE_ATTRIBUTE``)."""

ADD_SIGN: Final = "+"
DELETE_SIGN: Final = "-"
ARRAY_SEPARATOR: Final = ","
KEY_VALUE_SIGN: Final = "="


class TopicAttributeError(ValueError):
    """A modification string or attribute change that cannot be applied (nothing changes)."""


@dataclass(frozen=True, slots=True)
class EnumAttribute:
    """An attribute whose value is one of a set (RocketMQ's ``EnumAttribute``)."""

    name: str
    changeable: bool
    universe: frozenset[str]
    default: str

    def verify(self, value: str) -> None:
        """TopicAttributeError unless ``value`` is one of :attr:`universe`."""
        if value not in self.universe:
            raise TopicAttributeError(
                f"value {value!r} of attribute {self.name} is not in set: {sorted(self.universe)}"
            )


QUEUE_TYPE_ATTRIBUTE: Final = EnumAttribute(
    QUEUE_TYPE, False, frozenset(t.value for t in CQType), CQType.SIMPLE_CQ.value
)
TOPIC_ATTRIBUTES: Final[Mapping[str, EnumAttribute]] = {QUEUE_TYPE: QUEUE_TYPE_ATTRIBUTE}
"""The attributes minimq supports (RocketMQ's ``TopicAttributes.ALL`` has more)."""


def parse_to_map(modification: str | None) -> dict[str, str]:
    """RocketMQ's ``AttributeParser.parseToMap``: ``"+a=b,-c"`` -> ``{"+a": "b", "-c": ""}``
    (keys keep their sign). TopicAttributeError for a malformed string or a key given twice."""
    if not modification:
        return {}
    out: dict[str, str] = {}
    for kv in modification.split(ARRAY_SEPARATOR):
        key, sep, value = kv.partition(KEY_VALUE_SIGN)
        if sep:
            if not key.startswith(ADD_SIGN) or not value or KEY_VALUE_SIGN in value:
                raise TopicAttributeError(f"add/alter attribute format is wrong: {kv!r}")
        elif not key.startswith(DELETE_SIGN):
            raise TopicAttributeError(f"delete attribute format is wrong: {kv!r}")
        if key in out:
            raise TopicAttributeError(f"key duplication: {key}")
        out[key] = value
    return out


def parse_to_string(modification: Mapping[str, str]) -> str:
    """RocketMQ's ``AttributeParser.parseToString``: the inverse of :func:`parse_to_map`."""
    return ARRAY_SEPARATOR.join(
        f"{key}{KEY_VALUE_SIGN}{value}" if value else key for key, value in modification.items()
    )


def add_modification(attributes: Mapping[str, str]) -> str:
    """The modification string that sets every ``{key: value}`` of ``attributes``
    (``"+key=value,..."``): how a client creates a topic with attributes."""
    return parse_to_string({ADD_SIGN + k: v for k, v in attributes.items()})


def alter_current_attributes(
    create: bool, current: Mapping[str, str], modification: Mapping[str, str]
) -> dict[str, str]:
    """The attributes after applying ``modification`` (from :func:`parse_to_map`) to
    ``current``, RocketMQ's ``AttributeUtil.alterCurrentAttributes`` (see the module rules);
    TopicAttributeError when the change is not allowed."""
    final = dict(current)
    seen: set[str] = set()
    for signed, value in modification.items():
        key = _real_key(signed)
        if key in seen:
            raise TopicAttributeError(f"alter duplication key. key: {key}")
        seen.add(key)
        attribute = TOPIC_ATTRIBUTES.get(key)
        if attribute is None:
            raise TopicAttributeError(
                f"unsupported key: {key} (supported: {', '.join(sorted(TOPIC_ATTRIBUTES))})"
            )
        if signed.startswith(ADD_SIGN):
            attribute.verify(value)
            _check_set(create, attribute, current.get(key, attribute.default), value)
            final[key] = value
        elif create:
            raise TopicAttributeError(
                f"only add attribute is supported while creating topic. key: {key}"
            )
        else:
            _check_delete(attribute, current)
            del final[key]
    return final


def _real_key(signed: str) -> str:
    """The key without its sign; TopicAttributeError when it is blank or has a sign inside."""
    if signed[:1] not in (ADD_SIGN, DELETE_SIGN):
        raise TopicAttributeError(f"wrong format key: {signed!r}")
    key = signed[1:]
    if not key or ADD_SIGN in key or DELETE_SIGN in key:
        raise TopicAttributeError(f"kv string format wrong: {signed!r}")
    return key


def _check_set(create: bool, attribute: EnumAttribute, current: str, value: str) -> None:
    if create or attribute.changeable or current == value:
        return
    raise TopicAttributeError(
        f"attempt to update an unchangeable attribute. key: {attribute.name} "
        f"(the topic has {current}, asked for {value})"
    )


def _check_delete(attribute: EnumAttribute, current: Mapping[str, str]) -> None:
    if attribute.name not in current:
        raise TopicAttributeError(f"attempt to delete a nonexistent key: {attribute.name}")
    if not attribute.changeable:
        raise TopicAttributeError(
            f"attempt to update an unchangeable attribute. key: {attribute.name}"
        )


def queue_type_of(attributes: Mapping[str, str]) -> CQType:
    """The topic's :class:`CQType` (``QueueTypeUtils.getCQType``): its ``queue.type``
    attribute, SimpleCQ when absent or not a known type."""
    value = attributes.get(QUEUE_TYPE)
    if value == CQType.BATCH_CQ:
        return CQType.BATCH_CQ
    return CQType.SIMPLE_CQ


def check_attributes(attributes: Mapping[str, str]) -> None:
    """TopicAttributeError unless every key of a stored attribute map is supported and its
    value valid (a topics file or a request that carries final attributes)."""
    for key, value in attributes.items():
        attribute = TOPIC_ATTRIBUTES.get(key)
        if attribute is None:
            raise TopicAttributeError(f"unsupported key: {key}")
        attribute.verify(value)


__all__ = [
    "QUEUE_TYPE",
    "QUEUE_TYPE_ATTRIBUTE",
    "TOPIC_ATTRIBUTES",
    "CQType",
    "EnumAttribute",
    "TopicAttributeError",
    "add_modification",
    "alter_current_attributes",
    "check_attributes",
    "parse_to_map",
    "parse_to_string",
    "queue_type_of",
]
