"""The SQL92 selector core (common.sql_filter): RocketMQ's own filter tests as tables
(``filter/src/test/.../ExpressionTest.java`` and ``ParserTest.java``), the Java comparison
rules of ``ComparisonExpression``, and hypothesis properties of the parser."""

from __future__ import annotations

import contextlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.sql_filter import (
    JavaCompareError,
    SelectorParseError,
    compile_sql,
    compile_sql_cached,
    parse,
    to_sql,
)
from common.sql_filter.comparisons import (
    compare_doubles,
    java_compare,
    java_parse_double,
    java_parse_int,
    java_parse_long,
)
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
)
from common.sql_filter.lexer import TokenKind, line_and_column, tokenize
from common.sql_filter.parser import MAX_DEPTH, MAX_NESTING

# --------------------------------------------------------------------------- ExpressionTest

AND_EXPR = "a=3 and b<>4 And c>5 AND d<=4"
OR_EXPR = "a=3 or b<>4 Or c>5 OR d<=4"
IN_EXPR = "a in ('3', '4', '5')"
NOT_IN_EXPR = "a not in ('3', '4', '5')"
BETWEEN_EXPR = "a between 2 and 10"
NOT_BETWEEN_EXPR = "a not between 2 and 10"

# (expression, properties, expected matches()) — RocketMQ's ExpressionTest cases with string
# properties (what a message carries); a null/False/error result is "no match" there too.
EXPRESSION_CASES: list[tuple[str, dict[str, str], bool]] = [
    ("value contains 'x'", {"value": "axb"}, True),
    ("value startswith 'ax'", {"value": "axb"}, True),
    ("value endswith 'xb'", {"value": "axb"}, True),
    ("value not contains 'x'", {"value": "axb"}, False),
    ("value not startswith 'ax'", {"value": "axb"}, False),
    ("value not endswith 'xb'", {"value": "axb"}, False),
    ("value contains 'x'", {"value": "abb"}, False),
    ("value startswith 'x'", {"value": "abb"}, False),
    ("value endswith 'x'", {"value": "abb"}, False),
    ("value not contains 'x'", {"value": "abb"}, True),
    ("value not startswith 'x'", {"value": "abb"}, True),
    ("value not endswith 'x'", {"value": "abb"}, True),
    ("value contains ''", {"value": "axb"}, False),
    ("value startswith ''", {"value": "axb"}, False),
    ("value endswith ''", {"value": "axb"}, False),
    ("value not contains ''", {"value": "axb"}, False),
    ("value not startswith ''", {"value": "axb"}, False),
    ("value not endswith ''", {"value": "axb"}, False),
    ("value contains 'x'", {}, False),
    ("value startswith 'x'", {}, False),
    ("value endswith 'x'", {}, False),
    ("value not contains 'x'", {}, False),
    ("value not startswith 'x'", {}, False),
    ("value not endswith 'x'", {}, False),
    ("'axb' contains 'x'", {}, True),
    ("'axb' startswith 'ax'", {}, True),
    ("'axb' endswith 'xb'", {}, True),
    ("'axb' not contains 'x'", {}, False),
    ("'axb' not startswith 'ax'", {}, False),
    ("'axb' not endswith 'xb'", {}, False),
    ("'axb' contains 'u'", {}, False),
    ("'axb' not contains 'u'", {}, True),
    ("'axb' not startswith 'u'", {}, True),
    ("'axb' not endswith 'u'", {}, True),
    ("'axb' contains ''", {}, False),
    ("'axb' not endswith ''", {}, False),
    ("' ' contains ' '", {}, True),
    ("' ' startswith ' '", {}, True),
    ("' ' not endswith ' '", {}, False),
    ("'axb' contains '.'", {}, False),
    ("'axb' not startswith '.'", {}, True),
    ("'s' contains '\\'", {}, False),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
    ),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not startswith 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
    ),
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    ("a between up and low", {"a": "3.14"}, False),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, False),
    ("key is not null and key between 0 and 100", {"key": "con"}, False),
    ("a between 0 and 100", {"a": "abc"}, False),
    ("a=b", {"a": "3.14", "b": "3.14"}, True),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    ("a > 3.1E10", {"a": str(3.1415 * 10**10)}, True),
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    (AND_EXPR, {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
    (AND_EXPR, {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    (OR_EXPR, {"a": "3"}, True),
    (OR_EXPR, {"a": "4", "b": "5"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "6"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    (IN_EXPR, {"a": "3"}, True),
    (IN_EXPR, {"a": "4"}, True),
    (IN_EXPR, {"a": "5"}, True),
    (IN_EXPR, {"a": "8"}, False),
    (NOT_IN_EXPR, {"a": "8"}, True),
    (NOT_IN_EXPR, {"a": "3"}, False),
    (NOT_IN_EXPR, {"a": "5"}, False),
    (BETWEEN_EXPR, {"a": "2"}, True),
    (BETWEEN_EXPR, {"a": "10"}, True),
    (BETWEEN_EXPR, {"a": "3"}, True),
    (BETWEEN_EXPR, {"a": "1"}, False),
    (BETWEEN_EXPR, {"a": "11"}, False),
    (NOT_BETWEEN_EXPR, {"a": "1"}, True),
    (NOT_BETWEEN_EXPR, {"a": "11"}, True),
    (NOT_BETWEEN_EXPR, {"a": "2"}, False),
    (NOT_BETWEEN_EXPR, {"a": "10"}, False),
    (NOT_BETWEEN_EXPR, {"a": "3"}, False),
    ("a is null", {"abc": "2"}, True),
    ("a is null", {"a": "2"}, False),
    ("a is not null", {"a": "2"}, True),
    ("a is not null", {"abc": "2"}, False),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), EXPRESSION_CASES)
def test_rocketmq_expression_cases(
    expression: str, properties: dict[str, str], expected: bool
) -> None:
    assert compile_sql(expression).matches(properties) is expected


# (expression, properties, evaluate() result) — RocketMQ's semantics beyond its own tests
# (ComparisonExpression / UnaryExpression / LogicExpression read line by line); "error" is a
# RuntimeException in RocketMQ (never a match).
SEMANTIC_CASES: list[tuple[str, dict[str, str], bool | str | None]] = [
    # a missing property: comparisons are null, only IS NULL is true
    ("a = 'x'", {}, None),
    ("a > 1", {}, None),
    ("a in ('x')", {}, None),
    ("a not in ('x')", {}, None),
    ("NOT (a = 'x')", {}, None),
    ("a IS NULL", {}, True),
    # doCreateEqual: a constant on the left and null on the right is FALSE, not null
    ("'x' = a", {}, False),
    ("NOT ('x' = a)", {}, True),
    # three-valued AND / OR
    ("a = 'x' AND b = 'y'", {"b": "z"}, False),
    ("a = 'x' AND b = 'y'", {"b": "y"}, None),
    ("a = 'x' OR b = 'y'", {"b": "y"}, True),
    ("a = 'x' OR b = 'y'", {"b": "z"}, None),
    # numbers: a string property is parsed as the constant's Java type
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "+5"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a = 5", {"a": " 5"}, "error"),
    ("a = 5", {"a": "5.0"}, "error"),
    ("a > 5", {"a": "5.5"}, "error"),
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5.0", {"a": " 5.5 "}, True),
    ("a > 5.0", {"a": "6f"}, True),
    ("a > 5.0", {"a": "Infinity"}, True),
    ("a > 5.0", {"a": "NaN"}, True),
    ("a > 5.0", {"a": "0x1.8p3"}, True),
    ("a > 5.0", {"a": "inf"}, "error"),
    ("a > 5", {"a": "3000000000"}, "error"),
    ("a > 3000000000", {"a": "3000000001"}, True),
    ("a > 5L", {"a": "6"}, True),
    ("a < -5", {"a": "-6"}, True),
    ("a = -(-5)", {"a": "5"}, True),
    ("a > 5", {"a": "abc"}, "error"),
    ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, "error"),
    ("a > b", {"a": "x", "b": "1"}, "error"),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a = 'x'", {"a": "x"}, True),
    ("a <> 'x'", {"a": "y"}, True),
    # booleans: String vs Boolean uses Boolean.valueOf, Boolean vs String fails
    ("a = TRUE", {"a": "TrUe"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("TRUE = a", {"a": "true"}, "error"),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, None),
    ("TRUE = TRUE", {}, True),
    ("1 = TRUE", {}, False),
    ("(a = 'x') = TRUE", {"a": "x"}, True),
    # a bare property is a boolean cast: null when missing, else FALSE
    ("a", {"a": "true"}, False),
    ("a", {}, None),
    ("NOT a", {"a": "true"}, True),
    ("NOT a = 1", {"a": "x"}, False),
    # negation of a non-number is null
    ("-a = 1", {"a": "1"}, None),
    # CONTAINS on a number constant is FALSE
    ("5 contains 'x'", {}, False),
    # comments, case, blanks
    ("A = 'x' /* block */ aNd\tb iS nOt NuLl -- line\n", {"A": "x", "b": "1"}, True),
    ("a = 1 -- the end\r\n", {"a": "1"}, True),
    ("a IN ('x', 'it''s')", {"a": "it's"}, True),
    ("a = 'x' AND b = 1 AND c = 2 OR d = 3", {"d": "3"}, True),
    ("a = 1 OR b = 1 AND c = 1", {"a": "1"}, True),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1"}, None),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), SEMANTIC_CASES)
def test_rocketmq_semantics(
    expression: str, properties: dict[str, str], expected: bool | str | None
) -> None:
    selector = compile_sql(expression)
    if expected == "error":
        with pytest.raises(JavaCompareError):
            selector.evaluate(properties)
        assert selector.matches(properties) is False
    else:
        assert selector.evaluate(properties) is expected
        assert selector.matches(properties) is (expected is True)


# --------------------------------------------------------------------------- ParserTest

VALID = [
    AND_EXPR,
    OR_EXPR,
    IN_EXPR,
    "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "(a between 2 and 10) AND (b not between 6 and 9)",
    "a is null",
    "a is not null",
    "a <= now",
    "a=3 and b contains 'xxx' and c not contains 'xxx'",
    "a between 5 and 5",
    "a between -5 and 5",
    "a between 1 and b",
    "+a > +1",
    "a > .5e3",
    "a > 5.",
    "a > 5E2",
    "a > 9223372036854775807",
    "$x_1 = 'y'",
    "a = 'multi\nline'",
]


@pytest.mark.parametrize("expression", VALID)
def test_valid_expressions_parse(expression: str) -> None:
    assert parse(expression) is not None


# (expression, where the error points: 0-based offset, a fragment of its reason)
INVALID: list[tuple[str, int, str]] = [
    ("a and between 2 and 10", 6, "Encountered 'BETWEEN'"),
    (" a between 10 and 0", 3, "Illegal values of between"),
    ("a between NULL and 1", 2, "can not be null"),
    ("a between 'x' and 1", 2, "Illegal values of between"),
    ("a > 100000000000000000000000", 4, "does not fit in a long"),
    ("a > 9223372036854775808", 4, "does not fit in a long"),
    ("a > 1" + "1" * 400 + ".5", 4, "greater than"),
    ("a > 0.0", 4, "less than"),
    ("a > 1e-400", 4, "less than"),
    ("", 0, "Encountered end of input"),
    ("   ", 3, "Encountered end of input"),
    ("a =", 3, "Encountered end of input"),
    ("a = 1 b", 6, "expected AND, OR or the end"),
    ("a = 1)", 5, "expected AND, OR or the end"),
    ("(a = 1", 6, "expected ')'"),
    ("a = 'x", 4, "Unterminated string"),
    ("a = 1 /* x", 6, "Unterminated comment"),
    ("a = #", 4, "unexpected character '#'"),
    ("a == 1", 3, "Encountered '='"),
    ("a != 1", 2, "unexpected character '!'"),
    ("a > 'x'", 2, "cannot be compared"),
    ("a > TRUE", 2, "cannot be compared"),
    ("a > NULL", 2, "cannot be compared"),
    ("a > (b = 1)", 2, "cannot be compared"),
    ("NOT a > 1", 6, "cannot be compared"),
    ("a = NULL", 2, "'NULL' cannot be compared"),
    ("NULL = a", 5, "'NULL' cannot be compared"),
    ("TRUE = 1", 5, "'TRUE' cannot be compared with '1'"),
    ("5", 0, "will not result in a boolean value"),
    ("'x'", 0, "will not result in a boolean value"),
    ("a = 1 AND 5", 10, "will not result in a boolean value"),
    ("NOT 5", 0, "will not result in a boolean value"),
    ("'x' IN ('x')", 4, "Expected a property"),
    ("a IN ()", 6, "expected a string literal"),
    ("a IN (1)", 6, "expected a string literal"),
    ("a CONTAINS x", 11, "expected a string literal"),
    ("a contains 123", 11, "expected a string literal"),
    ("a IS 1", 5, "expected NULL or NOT NULL"),
    ("a IS NOT 1", 9, "expected NULL"),
    ("a NOT", 2, "expected AND, OR or the end"),
    ("1a = 1", 1, "expected AND, OR or the end"),
    ("a = 007", 5, "expected AND, OR or the end"),
    ("a = 1 --no line break", 6, "expected AND, OR or the end"),
    ("(" * (MAX_NESTING + 1) + "a" + ")" * (MAX_NESTING + 1), MAX_NESTING, "nested deeper"),
    ("a = 1" + " = TRUE" * MAX_DEPTH, 0, "nested deeper"),
]


@pytest.mark.parametrize(("expression", "position", "reason"), INVALID)
def test_invalid_expressions_name_where(expression: str, position: int, reason: str) -> None:
    with pytest.raises(SelectorParseError) as caught:
        parse(expression)
    error = caught.value
    assert str(error).startswith("Invalid MessageSelector. ")
    assert reason in error.reason
    if "nested deeper" not in reason or position:
        assert error.position == position
    line, column = line_and_column(expression, error.position)
    assert (error.line, error.column) == (line, column)
    assert f"line {line}, column {column}" in str(error)


def test_error_position_counts_lines_and_columns() -> None:
    with pytest.raises(SelectorParseError) as caught:
        parse("a = 1\r\nAND\n  b > 'x'")
    assert (caught.value.line, caught.value.column) == (3, 5)


def test_equal_expressions_parse_to_equal_trees() -> None:
    """ParserTest.testEquals: blanks do not matter, operators do."""
    assert parse(AND_EXPR) == parse("a=3  and    b<>4 And c>5 AND d<=4")
    assert parse(AND_EXPR) != parse(OR_EXPR)


def test_trees_are_rocketmq_s() -> None:
    """The tree mirrors RocketMQ's factories: <> is NOT =, BETWEEN is >= AND <=, and so on."""
    a = Property("a")
    assert parse("a <> 1") == Not(Comparison("=", a, Constant(JavaInt(1))))
    assert parse("a IS NOT NULL") == Not(IsNull(a))
    assert parse("a BETWEEN 1 AND 2") == And(
        (Comparison(">=", a, Constant(JavaInt(1))), Comparison("<=", a, Constant(JavaInt(2))))
    )
    assert parse("a NOT BETWEEN 1 AND 2.5") == Or(
        (Comparison("<", a, Constant(JavaInt(1))), Comparison(">", a, Constant(2.5)))
    )
    assert parse("a AND (b OR c) AND d") == And(
        (BooleanCast(a), Or((BooleanCast(Property("b")), BooleanCast(Property("c")))),
         BooleanCast(Property("d")))
    )  # fmt: skip
    assert parse("a > 2147483648") == Comparison(">", a, Constant(JavaLong(2**31)))
    assert parse("a > 5l") == Comparison(">", a, Constant(JavaInt(5)))
    assert parse("a > -5") == Comparison(">", a, Negate(Constant(JavaInt(5))))
    assert parse("a NOT ENDSWITH 'x'") == StringMatch("ENDSWITH", a, "x", negated=True)
    assert parse("a IN ('x','y')") == InList(a, ("x", "y"))
    assert parse("TRUE OR NULL") == Or((TRUE, NULL))
    assert parse("FALSE") == FALSE


def test_tokens_take_the_longest_match() -> None:
    kinds = [(t.kind, t.text) for t in tokenize("NOTE not >= 5.e3 0L .5 12l")]
    assert kinds == [
        (TokenKind.ID, "NOTE"),
        (TokenKind.KEYWORD, "NOT"),
        (TokenKind.PUNCT, ">="),
        (TokenKind.FLOAT, "5.e3"),
        (TokenKind.DECIMAL, "0"),
        (TokenKind.ID, "L"),
        (TokenKind.FLOAT, ".5"),
        (TokenKind.DECIMAL, "12l"),
        (TokenKind.EOF, ""),
    ]


def test_the_parse_cache_answers_the_same_selector_and_the_same_error() -> None:
    assert compile_sql_cached("a = 'cache'") is compile_sql_cached("a = 'cache'")
    for _ in range(2):
        with pytest.raises(SelectorParseError, match="Encountered end of input"):
            compile_sql_cached("a = ")


# --------------------------------------------------------------------------- Java conversions

COMPARE_CASES: list[tuple[object, object, int | str]] = [
    (JavaInt(1), JavaLong(2), -1),
    (JavaLong(3), JavaInt(2), 1),
    (JavaInt(2), 2.0, 0),
    (2.5, JavaLong(2), 1),
    ("7", JavaInt(7), 0),
    (JavaInt(7), "8", -1),
    ("7.5", 7.5, 0),
    ("x", JavaInt(1), "error"),
    (JavaLong(1), "1.5", "error"),
    ("true", True, 0),
    ("no", True, -1),
    (True, "true", "error"),
    (True, JavaInt(1), -1),
    (JavaInt(1), True, -1),
    (False, True, -1),
    ("a", "b", -1),
    (math.nan, math.nan, 0),
    (math.nan, math.inf, 1),
    (-0.0, 0.0, -1),
]


@pytest.mark.parametrize(("left", "right", "expected"), COMPARE_CASES)
def test_java_compare(left: object, right: object, expected: int | str) -> None:
    if expected == "error":
        with pytest.raises(JavaCompareError):
            java_compare(left, right)  # type: ignore[arg-type]
    else:
        assert java_compare(left, right) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value"),
    [("12", 12), ("-12", -12), ("+12", 12), ("٣", 3), ("2147483647", 2**31 - 1)],
)
def test_java_parse_int(text: str, value: int) -> None:
    assert java_parse_int(text) == value


@pytest.mark.parametrize("text", ["", " 1", "1_000", "2147483648", "1.0", "0x10", "+", "1L"])
def test_java_parse_int_refuses(text: str) -> None:
    with pytest.raises(JavaCompareError):
        java_parse_int(text)


def test_java_parse_long_range() -> None:
    assert java_parse_long("-9223372036854775808") == -(2**63)
    with pytest.raises(JavaCompareError):
        java_parse_long("9223372036854775808")


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1.0), (" 1.5\t", 1.5), ("1e3", 1000.0), (".5", 0.5), ("5.", 5.0), ("2d", 2.0),
     ("-Infinity", -math.inf), ("0x1p4", 16.0), ("0X.8P1", 1.0)],
)  # fmt: skip
def test_java_parse_double(text: str, value: float) -> None:
    assert java_parse_double(text) == value


@pytest.mark.parametrize("text", ["", "inf", "nan", "1_0", "1e", "e3", "0x1", "1,5", "--1"])
def test_java_parse_double_refuses(text: str) -> None:
    with pytest.raises(JavaCompareError):
        java_parse_double(text)


def test_compare_doubles_orders_nan_and_zeros_as_java() -> None:
    ordered = [-math.inf, -1.0, -0.0, 0.0, 1.0, math.inf, math.nan]
    for i, low in enumerate(ordered):
        assert compare_doubles(low, low) == 0
        for high in ordered[i + 1 :]:
            assert compare_doubles(low, high) == -1, (low, high)
            assert compare_doubles(high, low) == 1, (high, low)


# --------------------------------------------------------------------------- hypothesis

ALPHABET = st.sampled_from(
    [*"ab ()'=<>!+-.,*/\n\t0159eEL$_xX", "AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE",
     "BETWEEN", "CONTAINS", "--", "/*", "*/", "''", "é"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(ALPHABET, max_size=30).map("".join))
def test_parser_fails_only_with_its_documented_error(text: str) -> None:
    """Whatever the text, the parser answers a selector or a SelectorParseError, and a parsed
    selector evaluates to a Java value or raises JavaCompareError only."""
    try:
        selector = compile_sql(text)
    except SelectorParseError as exc:
        position = exc.position
        assert 0 <= position <= len(text)
        return
    for props in ({}, {"a": "1", "b": "x", "ab": "true"}):
        try:
            value = selector.evaluate(props)
        except JavaCompareError:
            continue
        assert value is None or isinstance(value, bool)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_parser_fails_only_with_its_documented_error_on_any_text(text: str) -> None:
    with contextlib.suppress(SelectorParseError):
        compile_sql(text)


NAMES = st.sampled_from(["a", "b", "TAGS", "x_1", "$v", "NOTE"])
STRINGS = st.text(alphabet="ab' x%é", max_size=6)
NUMBERS = st.one_of(
    st.integers(0, 2**63 - 1).map(lambda v: Constant(JavaInt(v) if v < 2**31 else JavaLong(v))),
    st.floats(min_value=5e-324, max_value=1.7976931348623157e308).map(Constant),
)


def _operand(leaf: st.SearchStrategy[Expression]) -> st.SearchStrategy[Expression]:
    return st.one_of(leaf, leaf.map(Negate))


def _boolean(children: st.SearchStrategy[Expression]) -> st.SearchStrategy[Expression]:
    properties = NAMES.map(Property)
    numeric = _operand(st.one_of(properties, NUMBERS))
    return st.one_of(
        st.builds(Comparison, st.sampled_from([">", ">=", "<", "<="]), numeric, numeric),
        st.builds(Comparison, st.just("="), properties, st.one_of(NUMBERS, STRINGS.map(Constant))),
        st.builds(InList, properties, st.lists(STRINGS, min_size=1, max_size=3).map(tuple),
                  st.booleans()),
        st.builds(StringMatch, st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]),
                  properties, STRINGS, st.booleans()),
        properties.map(IsNull),
        properties.map(BooleanCast),
        st.sampled_from([TRUE, FALSE, NULL]),
        children.map(Not),
        st.lists(children, min_size=2, max_size=3).map(lambda c: And(_flat(And, c))),
        st.lists(children, min_size=2, max_size=3).map(lambda c: Or(_flat(Or, c))),
    )  # fmt: skip


def _flat(kind: type[And] | type[Or], items: list[Expression]) -> tuple[Expression, ...]:
    flat: list[Expression] = []
    for item in items:
        flat.extend(item.operands if isinstance(item, kind) else (item,))
    return tuple(flat)


TREES = st.recursive(_boolean(st.nothing()), _boolean, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(TREES)
def test_to_sql_round_trips(tree: Expression) -> None:
    text = to_sql(tree)
    assert parse(text) == tree
    assert to_sql(parse(text)) == text


@settings(max_examples=200, deadline=None)
@given(TREES, st.dictionaries(NAMES, st.sampled_from(["1", "-2.5", "x", "true", "", "a'b"])))
def test_not_is_the_three_valued_complement(tree: Expression, props: dict[str, str]) -> None:
    """NOT flips TRUE and FALSE and keeps null (or the same error) for any expression."""
    text = to_sql(tree)
    plain, negated = compile_sql(text), compile_sql(f"NOT {text}")
    try:
        value = plain.evaluate(props)
    except JavaCompareError:
        with pytest.raises(JavaCompareError):
            negated.evaluate(props)
        return
    assert negated.evaluate(props) == (None if value is None else not value)
