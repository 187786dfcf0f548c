"""Summarise py-spy's collapsed stacks (``py-spy record --format raw``) per function.

A profile of a whole benchmark also samples set-up work (making messages, filling a store) and
idle worker threads. :func:`summarise` keeps only the stacks that pass through an ``include``
frame and through none of the ``exclude`` frames, then counts, per function, its *self* samples
(the function is on top of the stack) and its *inclusive* samples (it is anywhere on the stack,
counted once per stack). Scaled by the measured cost per message, that gives microseconds per
message per function.

Usage::

    py-spy record -r 2000 --format raw -o put.raw -- .venv/bin/mqbench store put --json
    mqbench stacks put.raw --include unrolled_run --exclude MessageFactory.batches --us-per-msg 8.8
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frame_key(frame: str) -> str:
    """``func (file)`` without the line number, and with the file path shortened."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    path = m.group("file")
    for marker in ("site-packages/", "lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker.startswith("lib/"):
                path = path.split("/", 1)[-1]
    return f"{m.group('func')} ({path})"


def load_raw(path: Path) -> list[tuple[list[str], int]]:
    """Read a py-spy raw file: one ``frame;frame;...;frame count`` line per distinct stack."""
    out: list[tuple[list[str], int]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        out.append((stack.split(";"), int(count)))
    return out


@dataclass(slots=True)
class StackSummary:
    """Per-function sample counts over the kept stacks."""

    total: int = 0
    self_samples: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)


def summarise(
    stacks: Iterable[tuple[list[str], int]],
    *,
    include: str | None = None,
    exclude: Sequence[str] = (),
) -> StackSummary:
    """Count self and inclusive samples per function over the stacks that pass the filters.

    ``include``/``exclude`` match a substring of a frame's function name.
    """
    summary = StackSummary()
    for frames, count in stacks:
        funcs = [frame_key(f) for f in frames]
        names = [f.split(" (", 1)[0] for f in funcs]
        if include is not None and not any(include in n for n in names):
            continue
        if any(x in n for x in exclude for n in names):
            continue
        if include is not None:  # drop what lies below the include frame (the caller side)
            first = next(i for i, n in enumerate(names) if include in n)
            funcs = funcs[first:]
        summary.total += count
        summary.self_samples[funcs[-1]] += count
        for f in set(funcs):
            summary.inclusive[f] += count
    return summary


def summary_table(
    summary: StackSummary, *, top: int = 25, us_per_msg: float | None = None, by: str = "self"
) -> Table:
    """The ``top`` functions by self (or inclusive) samples, as % and optionally µs/msg."""
    counter = summary.self_samples if by == "self" else summary.inclusive
    t = Table(title=f"{by} time, {summary.total:,} samples")
    t.add_column("function")
    t.add_column(f"{by} %", justify="right")
    other = "inclusive" if by == "self" else "self"
    t.add_column(f"{other} %", justify="right")
    if us_per_msg is not None:
        t.add_column(f"{by} µs/msg", justify="right")
    others = summary.inclusive if by == "self" else summary.self_samples
    total = summary.total or 1
    for func, n in counter.most_common(top):
        row = [func, f"{100 * n / total:.1f}", f"{100 * others[func] / total:.1f}"]
        if us_per_msg is not None:
            row.append(f"{us_per_msg * n / total:.3f}")
        t.add_row(*row)
    return t
