"""A recursive-descent parser of RocketMQ's SQL92 selector grammar (``SelectorParser.jj``), pure.

Grammar (lowest precedence first; keywords ignore case)::

    selector    := or EOF
    or          := and (OR and)*
    and         := equality (AND equality)*
    equality    := comparison ( "=" comparison | "<>" comparison | IS NULL | IS NOT NULL )*
    comparison  := unary ( (">" | ">=" | "<" | "<=") unary
                         | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) STRING
                         | [NOT] BETWEEN unary AND unary
                         | [NOT] IN "(" STRING ("," STRING)* ")" )*
    unary       := "+" unary | "-" unary | NOT unary | primary
    primary     := literal | ID | "(" or ")"
    literal     := STRING | DECIMAL | FLOAT | TRUE | FALSE | NULL

As in RocketMQ, ``NOT`` binds tighter than a comparison (``NOT a = 1`` is ``(NOT a) = 1``;
write ``NOT (a = 1)``), and the checks of RocketMQ's ``ComparisonExpression`` /
``ConstantExpression`` factories are parse errors here too:

- ``> >= < <=`` and BETWEEN take numbers, properties or negations, never a string, boolean or
  NULL literal nor a boolean expression;
- ``=`` / ``<>`` never take the NULL literal, and ``TRUE`` / ``FALSE`` on the left may only be
  compared with a boolean constant on the right;
- BETWEEN's two constant bounds must not be NULL, and the low one must not exceed the high one;
- IN takes a property on its left;
- an integer literal must fit in a Java long; a decimal one must be a finite double not below
  ``Double.MIN_VALUE`` (so ``0.0`` is refused, as RocketMQ refuses it);
- the whole selector, and each side of AND / OR / NOT, must be a boolean expression or a
  property.

Differences from RocketMQ, on purpose: text after a complete expression is an error (RocketMQ's
parser stops there and ignores the rest, so ``a = 1 b = 2`` means ``a = 1``); nesting deeper
than :data:`MAX_NESTING` and trees deeper than :data:`MAX_DEPTH` are errors (RocketMQ fails with
a ``StackOverflowError`` somewhere beyond).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from common.sql_filter.comparisons import JavaCompareError, java_compare
from common.sql_filter.expressions import (
    FALSE,
    NULL,
    TRUE,
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
    StringMatch,
    children,
    is_boolean,
    to_sql,
)
from common.sql_filter.lexer import SelectorParseError, Token, TokenKind, tokenize

MAX_NESTING: Final = 48
"""Deepest nesting of parentheses and unary operators accepted."""
MAX_DEPTH: Final = 200
"""Deepest expression tree accepted (``a = 1 = TRUE = TRUE ...`` nests without parentheses)."""

_DOUBLE_MAX: Final = 1.7976931348623157e308
_DOUBLE_MIN_VALUE: Final = 5e-324
_LONG_MAX: Final = 2**63 - 1
_INT_MAX: Final = 2**31 - 1
_ORDERING: Final = (">", ">=", "<", "<=")
_NOT_FOLLOWERS: Final = ("CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN")


def parse(text: str) -> Expression:
    """The boolean expression tree of selector ``text`` (RocketMQ's ``SelectorParser.parse``);
    raises :class:`SelectorParseError` naming the position of the problem."""
    return _Parser(text).selector()


class _Parser:
    """One parse over the tokens of one text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.nesting = 0
        self.depths: dict[int, tuple[Expression, int]] = {}

    # ------------------------------------------------------------------ token access

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.current
        if token.kind is not TokenKind.EOF:
            self.index += 1
        return token

    def fail(self, reason: str, token: Token | None = None) -> SelectorParseError:
        return SelectorParseError(self.text, (token or self.current).position, reason)

    def unexpected(self, expected: str) -> SelectorParseError:
        token = self.current
        found = "end of input" if token.kind is TokenKind.EOF else repr(token.text)
        return self.fail(f"Encountered {found}; expected {expected}")

    def expect_punct(self, symbol: str) -> Token:
        if not self.current.is_punct(symbol):
            raise self.unexpected(repr(symbol))
        return self.advance()

    def expect_keyword(self, word: str) -> Token:
        if not self.current.is_keyword(word):
            raise self.unexpected(word)
        return self.advance()

    def checked(self, node: Expression, at: Token) -> Expression:
        """``node``, unless the tree got deeper than :data:`MAX_DEPTH`."""
        if self.depth_of(node) > MAX_DEPTH:
            raise self.fail(f"Expression nested deeper than {MAX_DEPTH}", at)
        return node

    def depth_of(self, node: Expression) -> int:
        """The depth of ``node`` (1 for a leaf), remembered for the nodes :meth:`checked` saw
        (the memo holds the node too, so its id is not reused meanwhile)."""
        known = self.depths.get(id(node))
        if known is not None:
            return known[1]
        depth = 1 + max((self.depth_of(child) for child in children(node)), default=0)
        self.depths[id(node)] = (node, depth)
        return depth

    # ------------------------------------------------------------------ productions

    def selector(self) -> Expression:
        start = self.current
        node = self.or_expression()
        if self.current.kind is not TokenKind.EOF:
            raise self.unexpected("AND, OR or the end of the expression")
        return self.as_boolean(node, start)

    def or_expression(self) -> Expression:
        return self.chain(Or, "OR", self.and_expression)

    def and_expression(self) -> Expression:
        return self.chain(And, "AND", self.equality_expression)

    def chain(
        self, kind: type[And] | type[Or], keyword: str, operand: Callable[[], Expression]
    ) -> Expression:
        """``operand (keyword operand)*`` as one flat AND / OR (or the lone operand)."""
        starts, operands = [self.current], [operand()]
        while self.current.is_keyword(keyword):
            self.advance()
            starts.append(self.current)
            operands.append(operand())
        if len(operands) == 1:
            return operands[0]
        flat: list[Expression] = []
        for node, at in zip(operands, starts, strict=True):
            node = self.as_boolean(node, at)
            flat.extend(node.operands if isinstance(node, kind) else (node,))
        return self.checked(kind(tuple(flat)), starts[1])

    def equality_expression(self) -> Expression:
        left = self.comparison_expression()
        while True:
            at = self.current
            if at.is_punct("=", "<>"):
                self.advance()
                equal = self.equal(left, self.comparison_expression(), at)
                left = equal if at.text == "=" else Not(equal)
            elif at.is_keyword("IS"):
                self.advance()
                negated = self.current.is_keyword("NOT")
                if negated:
                    self.advance()
                if not self.current.is_keyword("NULL"):
                    raise self.unexpected("NULL" if negated else "NULL or NOT NULL")
                self.advance()
                left = Not(IsNull(left)) if negated else IsNull(left)
            else:
                return left
            left = self.checked(left, at)

    def comparison_expression(self) -> Expression:
        left = self.unary_expression()
        while True:
            at = self.current
            negated = at.is_keyword("NOT") and self.peek().is_keyword(*_NOT_FOLLOWERS)
            if negated:
                self.advance()
            operator = self.current
            if operator.is_punct(*_ORDERING):
                self.advance()
                left = self.ordering(operator.text, left, self.unary_expression(), operator)
            elif operator.is_keyword(*_NOT_FOLLOWERS[:3]):
                self.advance()
                left = StringMatch(operator.text, left, self.string_literal(), negated)
            elif operator.is_keyword("BETWEEN"):
                self.advance()
                left = self.between(left, negated, operator)
            elif operator.is_keyword("IN"):
                self.advance()
                left = self.in_list(left, negated, operator)
            else:
                return left
            left = self.checked(left, at)

    def unary_expression(self) -> Expression:
        token = self.current
        if not token.is_punct("+", "-") and not token.is_keyword("NOT"):
            return self.primary_expression()
        self.advance()
        operand = self.nested(self.unary_expression, token)
        if token.is_punct("+"):
            return operand
        if token.is_punct("-"):
            return self.checked(Negate(operand), token)
        return self.checked(Not(self.as_boolean(operand, token)), token)

    def primary_expression(self) -> Expression:
        token = self.current
        if token.is_punct("("):
            self.advance()
            node = self.nested(self.or_expression, token)
            self.expect_punct(")")
            return node
        if token.kind is TokenKind.ID:
            self.advance()
            return Property(token.text)
        return self.literal()

    def nested(self, production: Callable[[], Expression], at: Token) -> Expression:
        """Run ``production`` one nesting level deeper (at most :data:`MAX_NESTING`)."""
        if self.nesting >= MAX_NESTING:
            raise self.fail(f"Expression nested deeper than {MAX_NESTING} levels", at)
        self.nesting += 1
        try:
            return production()
        finally:
            self.nesting -= 1

    def literal(self) -> Expression:
        token = self.current
        if token.kind is TokenKind.STRING:
            return Constant(self.string_literal())
        if token.kind is TokenKind.DECIMAL:
            self.advance()
            return Constant(self.decimal(token))
        if token.kind is TokenKind.FLOAT:
            self.advance()
            return Constant(self.floating(token))
        if token.is_keyword("TRUE", "FALSE", "NULL"):
            self.advance()
            return {"TRUE": TRUE, "FALSE": FALSE, "NULL": NULL}[token.text]
        raise self.unexpected("a literal, a property name, '(' , '+', '-' or NOT")

    def string_literal(self) -> str:
        token = self.current
        if token.kind is not TokenKind.STRING:
            raise self.unexpected("a string literal")
        self.advance()
        return token.text[1:-1].replace("''", "'")

    # ------------------------------------------------------------------ RocketMQ's factories

    def decimal(self, token: Token) -> JavaInt | JavaLong:
        """``ConstantExpression.createFromDecimal``: an Integer if it fits, else a Long."""
        value = int(token.text.rstrip("lL"))
        if value > _LONG_MAX:
            raise self.fail(f"Integer literal {token.text} does not fit in a long", token)
        return JavaInt(value) if value <= _INT_MAX else JavaLong(value)

    def floating(self, token: Token) -> float:
        """``ConstantExpression.createFloat``: a finite double, not below ``Double.MIN_VALUE``."""
        value = float(token.text)
        if value > _DOUBLE_MAX:
            raise self.fail(f"{token.text} is greater than {_DOUBLE_MAX!r}", token)
        if value < _DOUBLE_MIN_VALUE:
            raise self.fail(f"{token.text} is less than {_DOUBLE_MIN_VALUE!r}", token)
        return value

    def as_boolean(self, node: Expression, at: Token) -> Expression:
        """``asBooleanExpression``: a boolean expression as is, a property cast, else an error."""
        if is_boolean(node):
            return node
        if isinstance(node, Property):
            return BooleanCast(node)
        raise self.fail(f"Expression will not result in a boolean value: {to_sql(node)}", at)

    def ordering(self, operator: str, left: Expression, right: Expression, at: Token) -> Expression:
        """``createGreaterThan`` and friends: both operands must be orderable."""
        self.check_orderable(left, at)
        self.check_orderable(right, at)
        return Comparison(operator, left, right)

    def check_orderable(self, node: Expression, at: Token) -> None:
        """``checkLessThanOperand``: no string / boolean / NULL literal, no boolean expression."""
        is_number = isinstance(node, Constant) and isinstance(
            node.value, JavaInt | JavaLong | float
        )
        if (isinstance(node, Constant) and not is_number) or is_boolean(node):
            raise self.fail(f"Value '{to_sql(node)}' cannot be compared", at)

    def equal(self, left: Expression, right: Expression, at: Token) -> Expression:
        """``createEqual``: no NULL literal; a boolean constant only against another."""
        for side in (left, right):
            if isinstance(side, Constant) and side.value is None:
                raise self.fail(f"'{to_sql(side)}' cannot be compared", at)
        left_boolean = isinstance(left, Constant) and left.boolean
        if left_boolean and isinstance(right, Constant) and not right.boolean:
            raise self.fail(f"'{to_sql(left)}' cannot be compared with '{to_sql(right)}'", at)
        return Comparison("=", left, right)

    def between(self, value: Expression, negated: bool, at: Token) -> Expression:
        """``createBetween`` / ``createNotBetween``."""
        low = self.unary_expression()
        self.expect_keyword("AND")
        high = self.unary_expression()
        if negated:
            return Or((self.ordering("<", value, low, at), self.ordering(">", value, high, at)))
        if isinstance(low, Constant) and isinstance(high, Constant):
            self.check_between_bounds(low, high, at)
        return And((self.ordering(">=", value, low, at), self.ordering("<=", value, high, at)))

    def check_between_bounds(self, low: Constant, high: Constant, at: Token) -> None:
        """BETWEEN's constant bounds: not NULL, low <= high (RocketMQ's own check)."""
        if low.value is None or high.value is None:
            raise self.fail("Illegal values of between, values can not be null!", at)
        try:
            ordered = java_compare(high.value, low.value) >= 0
        except JavaCompareError as exc:
            raise self.fail(f"Illegal values of between: {exc}", at) from None
        if not ordered:
            raise self.fail(
                f"Illegal values of between, left value({to_sql(low)}) must less than or equal"
                f" to right value({to_sql(high)})",
                at,
            )

    def in_list(self, left: Expression, negated: bool, at: Token) -> Expression:
        """``createInFilter`` / ``createNotInFilter``: a property IN string literals."""
        if not isinstance(left, Property):
            raise self.fail(f"Expected a property for In expression, got: {to_sql(left)}", at)
        self.expect_punct("(")
        values = [self.string_literal()]
        while self.current.is_punct(","):
            self.advance()
            values.append(self.string_literal())
        self.expect_punct(")")
        return InList(left, tuple(values), negated)
