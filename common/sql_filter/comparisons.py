"""Java's comparison of two selector values, as RocketMQ's ``ComparisonExpression.__compare``
does it (with ``convertStringExpressions`` on, as every parsed selector has it), pure.

Property values are strings on the wire; a literal is an Integer, a Long, a Double, a String or
a Boolean. Two values of different types are brought to one type first:

- Integer vs Long: both Long; Integer or Long vs Double: both Double;
- a String vs a number: the string is parsed as the number's type with Java's
  ``Integer.valueOf`` / ``Long.valueOf`` / ``Double.valueOf`` (``"5.5"`` against the Integer
  ``5`` does not parse: an error, so the message does not match);
- a String vs a Boolean: ``Boolean.valueOf`` of the string (``"TRUE"`` in any case is true);
  a Boolean vs a String is an error (RocketMQ's cast fails), so ``TRUE = a`` never matches
  where ``a = TRUE`` may;
- any other mix (a Boolean against a number, a number against a Boolean) compares as "less"
  (-1): never equal.

:class:`JavaCompareError` is what RocketMQ throws as a ``RuntimeException``; the evaluator turns
it into "no match".
"""

from __future__ import annotations

import math
import re
from typing import Final

from common.sql_filter.expressions import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    JavaInt,
    JavaLong,
    Value,
)


class JavaCompareError(ValueError):
    """A comparison RocketMQ fails with an exception (a string that is not a number, a Boolean
    compared with a String)."""


_JAVA_INTEGER: Final = re.compile(r"[+-]?\d+")  # Character.digit accepts any Unicode digit
_JAVA_DOUBLE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
)
_JAVA_HEX_DOUBLE: Final = re.compile(
    r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
)


def java_parse_int(text: str) -> JavaInt:
    """``Integer.valueOf(text)``; :class:`JavaCompareError` if it is not a 32-bit integer."""
    return JavaInt(_parse_integer(text, INT_MIN, INT_MAX, "int"))


def java_parse_long(text: str) -> JavaLong:
    """``Long.valueOf(text)``; :class:`JavaCompareError` if it is not a 64-bit integer."""
    return JavaLong(_parse_integer(text, LONG_MIN, LONG_MAX, "long"))


def _parse_integer(text: str, low: int, high: int, what: str) -> int:
    if _JAVA_INTEGER.fullmatch(text) is None:
        raise JavaCompareError(f"For input string: {text!r} (not an {what})")
    value = int(text)
    if not low <= value <= high:
        raise JavaCompareError(f"For input string: {text!r} (out of {what} range)")
    return value


def java_parse_double(text: str) -> float:
    """``Double.valueOf(text)`` (blanks around it ignored, ``NaN``, ``Infinity``, hex floats and
    an ``f``/``d`` suffix accepted); :class:`JavaCompareError` if it is not a number."""
    trimmed = _java_trim(text)
    if _JAVA_DOUBLE.fullmatch(trimmed) is not None:
        number = trimmed.rstrip("fFdD")
        if number.lstrip("+-") == "NaN":
            return math.nan
        return float(number.replace("Infinity", "inf"))
    hexadecimal = _JAVA_HEX_DOUBLE.fullmatch(trimmed)
    if hexadecimal is not None:
        sign, digits = hexadecimal.groups()
        return float.fromhex(sign + "0x" + digits)
    raise JavaCompareError(f"For input string: {text!r} (not a double)")


def _java_trim(text: str) -> str:
    """``String.trim()``: drop leading and trailing characters up to U+0020."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def java_boolean(text: str) -> bool:
    """``Boolean.valueOf(text)``: true only for ``"true"`` in any case."""
    return len(text) == 4 and text.lower() == "true"


def compare_doubles(left: float, right: float) -> int:
    """``Double.compare``: NaN above everything and equal to itself, -0.0 below 0.0."""
    if left < right:
        return -1
    if left > right:
        return 1
    if math.isnan(left) or math.isnan(right):
        return int(math.isnan(left)) - int(math.isnan(right))
    left_sign, right_sign = math.copysign(1.0, left), math.copysign(1.0, right)
    return (left_sign > right_sign) - (left_sign < right_sign)


def java_compare(left: Value, right: Value) -> int:
    """``ComparisonExpression.__compare(left, right, true)``: <0, 0 or >0 (see the module
    rules); raises :class:`JavaCompareError` where RocketMQ throws. Neither may be None."""
    if type(left) is not type(right):
        converted = _convert(left, right)
        if converted is None:
            return -1
        left, right = converted
    return _compare_same(left, right)


def _compare_same(left: Value, right: Value) -> int:
    """``compareTo`` of two values of one type."""
    if isinstance(left, float) and isinstance(right, float):
        return compare_doubles(left, right)
    if isinstance(left, str) and isinstance(right, str):
        return (left > right) - (left < right)
    return (left > right) - (left < right)  # type: ignore[operator]  # bool, Integer, Long


def _convert(left: Value, right: Value) -> tuple[Value, Value] | None:
    """The two values brought to one type, or None where RocketMQ answers -1."""
    if isinstance(left, bool):
        if isinstance(right, str):
            raise JavaCompareError(
                "class java.lang.Boolean cannot be cast to class java.lang.String"
            )
        return None
    if isinstance(left, str):
        return _convert_string(left, right), right
    if isinstance(right, bool):
        return None
    if isinstance(right, str):
        return left, _parse_like(left, right)
    if isinstance(left, float) or isinstance(right, float):
        return float(left), float(right)  # type: ignore[arg-type]
    return JavaLong(left), JavaLong(right)  # type: ignore[arg-type]


def _convert_string(left: str, right: Value) -> Value:
    """A String on the left parsed as the right value's type (``Boolean.valueOf`` for a
    Boolean)."""
    if isinstance(right, bool):
        return java_boolean(left)
    return _parse_like(right, left)


def _parse_like(number: Value, text: str) -> Value:
    """``text`` parsed as ``number``'s Java type."""
    if isinstance(number, JavaInt):
        return java_parse_int(text)
    if isinstance(number, JavaLong):
        return java_parse_long(text)
    return java_parse_double(text)
