"""mqadmin's tables never cut a value (RocketMQ's tools print them whole): piped, each row is one
line with every value in full; in a narrow terminal a value folds inside its column; a value
is printed as it is (no rich markup or emoji codes)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.admin.harness import as_json, mqadmin, ok
from tests.client.inproc_cluster import TOPIC, cluster

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TERMINAL_80: dict[str, str | None] = {"TTY_COMPATIBLE": "1", "COLUMNS": "80"}
"""What rich takes for an 80-column terminal (CliRunner's stdout is no terminal)."""


def folded_columns(screen: str) -> list[str]:
    """Each column of a table as printed in a terminal, its lines joined: a column is a run of
    character positions that are not blank on every line (cells are padded with a space on
    each side, so columns are apart by two blank positions at least)."""
    rows = screen.splitlines()
    width = max(map(len, rows))
    grid = [row.ljust(width) for row in rows]
    used = [any(row[i] != " " for row in grid) for i in range(width)] + [False]
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for i, busy in enumerate(used):
        if busy and start is None:
            start = i
        elif not busy and start is not None:
            spans.append((start, i))
            start = None
    return ["".join(row[a:b].strip() for row in grid) for a, b in spans]


async def in_terminal(*args: str) -> str:
    result = await mqadmin(*args, env=TERMINAL_80)
    assert result.exit_code == 0, result.output
    return ANSI.sub("", result.stdout)


async def test_tables_print_every_value_in_full(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        key = "k" * 120
        body = "x" * 300 + " [/x] [bold]b[/bold] :smile: end"
        sent = await as_json("sendMessage", *n, "-t", TOPIC, "-p", body, "-k", key, "-c", "Tag")

        # piped: one line per row, every value whole (the body, spaces and brackets included)
        text = await ok("printMsg", *n, "-t", TOPIC)
        assert "…" not in text
        [row] = [line for line in text.splitlines() if sent["msgId"] in line]
        assert key in row.split()
        assert row.rstrip().endswith(body)
        detail = await ok("queryMsgById", *n, "-i", sent["offsetMsgId"])
        assert f"Message Body:        {body}" in detail.splitlines()
        assert f"Keys:                [{key}]" in detail.splitlines()

        # an 80-column terminal: nothing is cut, a long value folds inside its column
        screen = await in_terminal("clusterList", *n)
        assert "…" not in screen
        assert max(len(line) for line in screen.splitlines()) <= 80
        columns = folded_columns(screen)
        for name, addr in c.brokers.items():
            assert any(addr in column for column in columns), (addr, screen)
            assert any(name in column for column in columns), (name, screen)
        screen = await in_terminal("printMsg", *n, "-t", TOPIC)
        assert "…" not in screen
        assert max(len(line) for line in screen.splitlines()) <= 80
        columns = folded_columns(screen)
        assert any(sent["msgId"] in column for column in columns), screen
        assert any(key in column for column in columns), screen
