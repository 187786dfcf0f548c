"""Evaluation of a selector tree over a message's properties, as RocketMQ evaluates it, pure.

:func:`compile_tree` turns the tree into nested closures once; each evaluation then only calls
them. The results follow RocketMQ's expression classes:

- a property is its string value, or null when the message does not have it;
- comparisons with a null operand are null (three-valued logic), except that ``IS NULL`` is
  TRUE for null and ``'x' = a`` (a constant on the left, a missing property on the right) is
  FALSE, not null, as RocketMQ's ``doCreateEqual`` answers;
- ``> >= < <=`` between two strings (two properties) compare them as doubles; other mixes follow
  :func:`common.sql_filter.comparisons.java_compare`;
- ``IN`` is null for a missing property; ``CONTAINS`` / ``STARTSWITH`` / ``ENDSWITH`` and their
  ``NOT`` forms are FALSE for a missing property and for an empty search string;
- ``AND`` / ``OR`` / ``NOT`` use SQL's three-valued logic, left to right, stopping at the first
  FALSE (AND) or TRUE (OR) operand.

A comparison RocketMQ fails with an exception raises
:class:`common.sql_filter.comparisons.JavaCompareError`; ``matches`` treats it as no match, as
the broker's ``ExpressionMessageFilter.isMatchedByCommitLog`` does.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Final

from common.sql_filter.comparisons import compare_doubles, java_compare, java_parse_double
from common.sql_filter.expressions import (
    And,
    BooleanCast,
    Comparison,
    Constant,
    Expression,
    InList,
    IsNull,
    JavaInt,
    JavaLong,
    Negate,
    Not,
    Or,
    Property,
    Value,
)

Properties = Mapping[str, str]
Evaluator = Callable[[Properties], Value]
"""A compiled expression: properties in, a Java value out."""

_ORDERINGS: Final[dict[str, Callable[[int, int], bool]]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
_STRING_TESTS: Final[dict[str, Callable[[str, str], bool]]] = {
    "CONTAINS": str.__contains__,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


def compile_tree(node: Expression) -> Evaluator:
    """The evaluator of ``node`` (see the module rules)."""
    if isinstance(node, Constant):
        return _constant(node.value)
    if isinstance(node, Property):
        return _property(node.name)
    if isinstance(node, Negate):
        return _negate(compile_tree(node.operand))
    if isinstance(node, Not):
        return _not(compile_tree(node.operand))
    if isinstance(node, BooleanCast):
        return _boolean_cast(compile_tree(node.operand))
    if isinstance(node, And):
        return _and(tuple(compile_tree(o) for o in node.operands))
    if isinstance(node, Or):
        return _or(tuple(compile_tree(o) for o in node.operands))
    if isinstance(node, Comparison):
        return _comparison(node.operator, compile_tree(node.left), compile_tree(node.right))
    if isinstance(node, IsNull):
        return _is_null(compile_tree(node.operand))
    if isinstance(node, InList):
        return _in_list(node.operand.name, frozenset(node.values), node.negated)
    return _string_match(node.kind, compile_tree(node.operand), node.search, node.negated)


def _constant(value: Value) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        return value

    return evaluate


def _property(name: str) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        return props.get(name)

    return evaluate


def _negate(operand: Evaluator) -> Evaluator:
    """Unary minus (Java's wrapping negation); null for anything but a number."""

    def evaluate(props: Properties) -> Value:
        value = operand(props)
        if isinstance(value, JavaInt):
            return JavaInt(_wrap(-value, 32))
        if isinstance(value, JavaLong):
            return JavaLong(_wrap(-value, 64))
        if isinstance(value, float):
            return -value
        return None

    return evaluate


def _wrap(value: int, bits: int) -> int:
    """``value`` as a signed ``bits``-bit two's complement integer."""
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def _not(operand: Evaluator) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        value = operand(props)
        return None if value is None else not value

    return evaluate


def _boolean_cast(operand: Evaluator) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        value = operand(props)
        if value is None:
            return None
        return value if type(value) is bool else False

    return evaluate


def _and(operands: tuple[Evaluator, ...]) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        unknown = False
        for operand in operands:
            value = operand(props)
            if value is None:
                unknown = True
            elif not value:
                return False
        return None if unknown else True

    return evaluate


def _or(operands: tuple[Evaluator, ...]) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        unknown = False
        for operand in operands:
            value = operand(props)
            if value is None:
                unknown = True
            elif value:
                return True
        return None if unknown else False

    return evaluate


def _comparison(symbol: str, left: Evaluator, right: Evaluator) -> Evaluator:
    if symbol == "=":
        return _equal(left, right)
    ordered = _ORDERINGS[symbol]

    def evaluate(props: Properties) -> Value:
        lv = left(props)
        if lv is None:
            return None
        rv = right(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            answer = compare_doubles(java_parse_double(lv), java_parse_double(rv))
        else:
            answer = java_compare(lv, rv)
        return ordered(answer, 0)

    return evaluate


def _equal(left: Evaluator, right: Evaluator) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        lv, rv = left(props), right(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return java_compare(lv, rv) == 0

    return evaluate


def _is_null(operand: Evaluator) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        return operand(props) is None

    return evaluate


def _in_list(name: str, values: frozenset[str], negated: bool) -> Evaluator:
    def evaluate(props: Properties) -> Value:
        value = props.get(name)
        if value is None:
            return None
        return (value in values) is not negated

    return evaluate


def _string_match(kind: str, operand: Evaluator, search: str, negated: bool) -> Evaluator:
    test = _STRING_TESTS[kind]

    def evaluate(props: Properties) -> Value:
        if not search:
            return False
        value = operand(props)
        if type(value) is not str:
            return False
        return test(value, search) is not negated

    return evaluate
