"""mqadmin's output builders against their oracles: the plain table against rich's rendering
of the same table in a pipe, the streamed JSON array against one ``json.dumps``."""

from __future__ import annotations

import contextlib
import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table
from rich.text import Text

from client.admin.base import (
    CONSOLE_SETTINGS,
    TABLE_PIPE_WIDTH,
    JsonArrayWriter,
    emit_json,
    plain_table,
    table,
)

ascii_cell = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)


def rich_pipe_text(headers: list[str], rows: list[list[str]]) -> str:
    """What rich prints for this table into a file (the oracle for :func:`plain_table`)."""
    buf = io.StringIO()
    out = Console(file=buf, width=TABLE_PIPE_WIDTH, **CONSOLE_SETTINGS)
    t = Table(box=None, header_style="bold", pad_edge=False)
    for header in headers:
        t.add_column(header, overflow="fold")
    for row in rows:
        t.add_row(*(Text(v) for v in row))
    out.print(t)
    return buf.getvalue()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.lists(ascii_cell.map(lambda s: "#" + s), min_size=n, max_size=n),
            st.lists(st.lists(ascii_cell, min_size=n, max_size=n), max_size=6),
        )
    )
)
def test_plain_table_is_what_rich_prints(case: tuple[list[str], list[list[str]]]) -> None:
    headers, rows = case
    assert plain_table(headers, rows) == rich_pipe_text(headers, rows)


def test_table_leaves_what_only_rich_can_measure_to_rich() -> None:
    assert plain_table(["#A"], [["wide 中文"]]) is None
    assert plain_table(["#A"], [["two\nlines"]]) is None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        table(["#A", "#B"], [["中文", None], ["x", 1]])
    assert buf.getvalue() == rich_pipe_text(["#A", "#B"], [["中文", ""], ["x", "1"]])


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.lists(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner),
            max_leaves=8,
        ),
        max_size=6,
    ),
    st.integers(0, 6),
)
def test_streamed_json_array_is_emit_json(items: list[Any], split: int) -> None:
    whole, streamed = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(whole):
        emit_json(items)
    with contextlib.redirect_stdout(streamed), JsonArrayWriter() as out:
        out.extend(items[:split])
        out.extend(items[split:])
    assert streamed.getvalue() == whole.getvalue()
