"""SQL92 message selectors: RocketMQ's ``filter`` module (``SqlFilter``, ``SelectorParser``,
the expression classes) in pure Python, with no I/O and no trio.

A selector such as ``"a > 5 AND region IN ('eu', 'us') AND TAGS IS NOT NULL"`` is parsed once
(:func:`compile_sql`, or :func:`compile_sql_cached` with RocketMQ's 100-entry parse cache) into a
:class:`SqlSelector`; :meth:`SqlSelector.matches` then tells whether a message's properties (all
of them, user and system ones such as ``TAGS`` and ``KEYS``: strings, as on the wire) select
it: only a TRUE result does, never FALSE, null (a missing property) or a comparison RocketMQ
fails on (``a > 5`` where ``a`` is ``"abc"``).

- :mod:`common.sql_filter.lexer`: tokens and :class:`SelectorParseError`;
- :mod:`common.sql_filter.parser`: the grammar and RocketMQ's parse-time checks;
- :mod:`common.sql_filter.expressions`: the tree, Java value types and :func:`to_sql`;
- :mod:`common.sql_filter.comparisons`: Java's type conversions when comparing;
- :mod:`common.sql_filter.evaluate`: evaluation with SQL's three-valued logic.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from common.sql_filter.comparisons import JavaCompareError
from common.sql_filter.evaluate import Evaluator, compile_tree
from common.sql_filter.expressions import Expression, Value, to_sql
from common.sql_filter.lexer import SelectorParseError
from common.sql_filter.parser import parse

EXPRESSION_SQL92: Final = "SQL92"
"""RocketMQ's ``ExpressionType.SQL92``."""
PARSE_CACHE_SIZE: Final = 100
"""Entries of RocketMQ's ``SelectorParser.PARSE_CACHE``."""


@dataclass(frozen=True, slots=True)
class SqlSelector:
    """A parsed, compiled SQL92 selector."""

    expression: str
    """The text it was compiled from."""
    tree: Expression
    """Its expression tree."""
    _evaluate: Evaluator = field(repr=False, compare=False)

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        """The expression's value for a message with ``properties``: True, False or None
        (null); raises :class:`JavaCompareError` where RocketMQ throws."""
        return self._evaluate(properties)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether a message with ``properties`` is selected: only a TRUE result selects it
        (RocketMQ's ``ExpressionMessageFilter.isMatchedByCommitLog``)."""
        try:
            return self._evaluate(properties) is True
        except JavaCompareError:
            return False


def compile_sql(expression: str) -> SqlSelector:
    """Parse and compile ``expression``; raises :class:`SelectorParseError` (a ValueError)
    naming where it is wrong."""
    tree = parse(expression)
    return SqlSelector(expression, tree, compile_tree(tree))


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _compile_or_error(expression: str) -> SqlSelector | SelectorParseError:
    try:
        return compile_sql(expression)
    except SelectorParseError as exc:
        return exc


def compile_sql_cached(expression: str) -> SqlSelector:
    """:func:`compile_sql` through an LRU cache of the last :data:`PARSE_CACHE_SIZE`
    expressions, errors included (RocketMQ's ``SelectorParser.PARSE_CACHE``)."""
    result = _compile_or_error(expression)
    if isinstance(result, SelectorParseError):  # a fresh one: a cached one's traceback grows
        raise SelectorParseError(result.expression, result.position, result.reason)
    return result


__all__ = [
    "EXPRESSION_SQL92",
    "JavaCompareError",
    "SelectorParseError",
    "SqlSelector",
    "compile_sql",
    "compile_sql_cached",
    "parse",
    "to_sql",
]
