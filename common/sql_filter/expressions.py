"""The expression tree of an SQL92 selector (RocketMQ's ``filter/expression`` classes), pure.

Values are Java's: ``None`` (null), :class:`bool`, :class:`str`, :class:`JavaInt`
(``Integer``), :class:`JavaLong` (``Long``) and :class:`float` (``Double``). A literal such as
``5`` is an ``Integer`` when it fits in 32 bits, else a ``Long`` (``ConstantExpression
.createFromDecimal``); a literal with a point or an exponent is a ``Double``.

The tree mirrors what RocketMQ's parser builds, so it evaluates the same way:

- ``a <> b`` is ``NOT (a = b)``; ``a IS NOT NULL`` is ``NOT (a IS NULL)``;
  ``a BETWEEN x AND y`` is ``a >= x AND a <= y``; ``a NOT BETWEEN x AND y`` is
  ``a < x OR a > y``;
- a bare property where a boolean is needed (``a AND b``) is a :class:`BooleanCast`;
- ``AND`` / ``OR`` chains are flattened into one :class:`And` / :class:`Or` of all their
  operands, evaluated left to right exactly as RocketMQ's left-nested pairs are.

:func:`to_sql` writes a tree back as fully parenthesized selector text that parses to an equal
tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias


class JavaInt(int):
    """A ``java.lang.Integer`` value (an int that remembers its Java type)."""

    __slots__ = ()


class JavaLong(int):
    """A ``java.lang.Long`` value (an int that remembers its Java type)."""

    __slots__ = ()


Value: TypeAlias = "bool | str | JavaInt | JavaLong | float | None"
"""What an expression evaluates to (Java's null, Boolean, String, Integer, Long, Double)."""

INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Constant:
    """A literal. ``boolean`` marks ``TRUE`` / ``FALSE`` / ``NULL`` (RocketMQ's
    ``BooleanConstantExpression``), the only constants that are boolean expressions."""

    value: Value
    boolean: bool = False

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Constant)
            and type(self.value) is type(other.value)
            and self.value == other.value
            and self.boolean == other.boolean
        )

    def __hash__(self) -> int:
        return hash((type(self.value), self.value, self.boolean))


NULL: Final = Constant(None, boolean=True)
TRUE: Final = Constant(True, boolean=True)
FALSE: Final = Constant(False, boolean=True)


@dataclass(frozen=True, slots=True)
class Property:
    """A message property by name (its string value, or null when the message has none)."""

    name: str


@dataclass(frozen=True, slots=True)
class Negate:
    """Unary minus: a number negated, anything else null."""

    operand: Expression


@dataclass(frozen=True, slots=True)
class Not:
    """Logical NOT (null stays null)."""

    operand: Expression


@dataclass(frozen=True, slots=True)
class BooleanCast:
    """A property used as a boolean: null when missing, else FALSE (a property is a string,
    never a Boolean)."""

    operand: Expression


@dataclass(frozen=True, slots=True)
class And:
    """``o1 AND o2 AND ...`` (SQL three-valued logic, left to right, stops at FALSE)."""

    operands: tuple[Expression, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """``o1 OR o2 OR ...`` (SQL three-valued logic, left to right, stops at TRUE)."""

    operands: tuple[Expression, ...]


COMPARISON_OPERATORS: Final = ("=", ">", ">=", "<", "<=")


@dataclass(frozen=True, slots=True)
class Comparison:
    """``left <operator> right`` with ``operator`` one of :data:`COMPARISON_OPERATORS`."""

    operator: str
    left: Expression
    right: Expression


@dataclass(frozen=True, slots=True)
class IsNull:
    """``operand IS NULL``."""

    operand: Expression


@dataclass(frozen=True, slots=True)
class InList:
    """``property [NOT] IN ('v1', 'v2', ...)``."""

    operand: Property
    values: tuple[str, ...]
    negated: bool = False


STRING_MATCHES: Final = ("CONTAINS", "STARTSWITH", "ENDSWITH")


@dataclass(frozen=True, slots=True)
class StringMatch:
    """``operand [NOT] CONTAINS|STARTSWITH|ENDSWITH 'search'`` (RocketMQ 5)."""

    kind: str
    operand: Expression
    search: str
    negated: bool = False


Expression: TypeAlias = (
    "Constant | Property | Negate | Not | BooleanCast | And | Or | Comparison | IsNull"
    " | InList | StringMatch"
)
"""Any node of the tree."""

BOOLEAN_NODES: Final = (Not, BooleanCast, And, Or, Comparison, IsNull, InList, StringMatch)
"""The nodes that are RocketMQ ``BooleanExpression`` s (besides boolean constants)."""


def is_boolean(node: Expression) -> bool:
    """Whether ``node`` is a boolean expression in RocketMQ's sense (``BooleanExpression``)."""
    return isinstance(node, BOOLEAN_NODES) or (isinstance(node, Constant) and node.boolean)


def children(node: Expression) -> tuple[Expression, ...]:
    """The direct sub-expressions of ``node``."""
    if isinstance(node, And | Or):
        return node.operands
    if isinstance(node, Comparison):
        return (node.left, node.right)
    if isinstance(node, Negate | Not | BooleanCast | IsNull | InList | StringMatch):
        return (node.operand,)
    return ()


def quote(text: str) -> str:
    """``text`` as a selector string literal (``'`` doubled), RocketMQ's ``encodeString``."""
    return "'" + text.replace("'", "''") + "'"


def constant_text(value: Value) -> str:
    """A constant as selector text that reads back to the same value and type."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return quote(value)
    return repr(value) if isinstance(value, float) else str(int(value))


def to_sql(node: Expression) -> str:
    """``node`` as fully parenthesized selector text (parses back to an equal tree)."""
    if isinstance(node, Constant):
        return constant_text(node.value)
    if isinstance(node, Property):
        return node.name
    if isinstance(node, BooleanCast):
        return to_sql(node.operand)
    if isinstance(node, Negate):
        return f"(-{to_sql(node.operand)})"
    if isinstance(node, Not):
        return f"(NOT {to_sql(node.operand)})"
    if isinstance(node, And | Or):
        joiner = " AND " if isinstance(node, And) else " OR "
        return "(" + joiner.join(to_sql(o) for o in node.operands) + ")"
    if isinstance(node, Comparison):
        return f"({to_sql(node.left)} {node.operator} {to_sql(node.right)})"
    if isinstance(node, IsNull):
        return f"({to_sql(node.operand)} IS NULL)"
    if isinstance(node, InList):
        keyword = "NOT IN" if node.negated else "IN"
        return f"({node.operand.name} {keyword} ({', '.join(quote(v) for v in node.values)}))"
    keyword = f"NOT {node.kind}" if node.negated else node.kind
    return f"({to_sql(node.operand)} {keyword} {quote(node.search)})"
