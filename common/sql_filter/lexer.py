"""The tokenizer of RocketMQ's SQL92 selector grammar (``filter/.../SelectorParser.jj``), pure.

Tokens, as the JavaCC grammar declares them (keywords and identifiers ignore case):

- keywords ``NOT AND OR BETWEEN IN TRUE FALSE NULL IS CONTAINS STARTSWITH ENDSWITH``;
- ``DECIMAL``: ``0`` or ``[1-9][0-9]*`` with an optional ``l``/``L`` suffix;
- ``FLOAT``: ``5.5``, ``5.``, ``.5``, each with an optional exponent (``E`` ``[+-]`` digits),
  or ``5E10``;
- ``STRING``: ``'...'`` where ``''`` stands for one quote;
- ``ID``: ``[a-zA-Z_$][a-zA-Z0-9_$]*`` (a keyword is never an identifier: ``NOTE`` is, ``NOT``
  is not);
- punctuation ``= <> > >= < <= ( ) , + -``.

Between tokens: the blanks `` \\t \\n \\r \\f``, line comments (``--`` up to and including a
line break: without one ``--`` is two minus signs, as in RocketMQ) and block comments
``/* ... */``. The longest token wins (``NOTE`` is an identifier, ``>=`` one operator). Any other
character, or a string or comment left open, is a :class:`SelectorParseError` at its position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final


class TokenKind(Enum):
    """What a token is."""

    KEYWORD = "keyword"
    DECIMAL = "decimal"
    FLOAT = "float"
    STRING = "string"
    ID = "identifier"
    PUNCT = "punctuation"
    EOF = "end of input"


KEYWORDS: Final = frozenset(
    {
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "TRUE",
        "FALSE",
        "NULL",
        "IS",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    }
)
"""The grammar's reserved words (upper case; the input may use any case)."""


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its kind, its text (a keyword upper-cased) and its offset in the input."""

    kind: TokenKind
    text: str
    position: int

    def is_keyword(self, *words: str) -> bool:
        """True if this token is one of the keywords ``words``."""
        return self.kind is TokenKind.KEYWORD and self.text in words

    def is_punct(self, *symbols: str) -> bool:
        """True if this token is one of the punctuation ``symbols``."""
        return self.kind is TokenKind.PUNCT and self.text in symbols


class SelectorParseError(ValueError):
    """An expression that is not a valid RocketMQ SQL92 selector.

    ``position`` is the 0-based offset of the offending text in ``expression``; ``line`` and
    ``column`` (1-based) say the same as JavaCC does. The message starts with RocketMQ's
    ``"Invalid MessageSelector."``.
    """

    def __init__(self, expression: str, position: int, reason: str) -> None:
        self.expression = expression
        self.position = position
        self.reason = reason
        self.line, self.column = line_and_column(expression, position)
        super().__init__(
            f"Invalid MessageSelector. {reason} at line {self.line}, column {self.column}"
            f" of {expression!r}"
        )


def line_and_column(text: str, position: int) -> tuple[int, int]:
    """The 1-based line and column of ``position`` in ``text`` (``\\r\\n``, ``\\r``, ``\\n``
    end lines)."""
    head = text[:position].replace("\r\n", "\n").replace("\r", "\n")
    line = head.count("\n") + 1
    return line, len(head) - (head.rfind("\n") + 1) + 1


_SKIP: Final = re.compile(r"[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/")
_FLOAT: Final = re.compile(
    r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
)
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*[lL]?")
_STRING: Final = re.compile(r"'(?:''|[^'])*'")
_WORD: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_PUNCT: Final = re.compile(r"<>|<=|>=|[=<>(),+\-]")


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with one EOF token; raises :class:`SelectorParseError`."""
    tokens: list[Token] = []
    pos, end = 0, len(text)
    while True:
        skipped = _SKIP.match(text, pos)
        while skipped is not None and skipped.end() > pos:
            pos = skipped.end()
            skipped = _SKIP.match(text, pos)
        if pos >= end:
            tokens.append(Token(TokenKind.EOF, "", end))
            return tokens
        token = _next_token(text, pos)
        tokens.append(token)
        pos += len(token.text)  # an upper-cased keyword keeps its length: words are ASCII


def _next_token(text: str, pos: int) -> Token:
    """The longest token at ``pos`` (which is not a blank or a comment)."""
    for pattern, kind in ((_FLOAT, TokenKind.FLOAT), (_DECIMAL, TokenKind.DECIMAL)):
        number = pattern.match(text, pos)
        if number is not None:
            return Token(kind, number.group(), pos)
    if text.startswith("'", pos):
        string = _STRING.match(text, pos)
        if string is None:
            raise SelectorParseError(text, pos, "Unterminated string literal")
        return Token(TokenKind.STRING, string.group(), pos)
    word = _WORD.match(text, pos)
    if word is not None:
        upper = word.group().upper()
        if upper in KEYWORDS:
            return Token(TokenKind.KEYWORD, upper, pos)
        return Token(TokenKind.ID, word.group(), pos)
    punct = _PUNCT.match(text, pos)
    if punct is not None:
        return Token(TokenKind.PUNCT, punct.group(), pos)
    if text.startswith("/*", pos):
        raise SelectorParseError(text, pos, "Unterminated comment")
    raise SelectorParseError(text, pos, f"Lexical error: unexpected character {text[pos]!r}")
