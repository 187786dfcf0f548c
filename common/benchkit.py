"""Benchmark building blocks shared by ``mqbench``'s store and client benchmarks.

Latency recording with percentiles, a progress hook (shown with rich on stderr, or not at
all), the machine and source commit a figure was measured on, and ``RssAnon`` readings.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import click
import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from common.compiled import PURE, build_description

REPO = Path(__file__).resolve().parents[1]


# -- progress --------------------------------------------------------------------------------
class ProgressHook(Protocol):
    """Told how far a workload has got; only ever called outside timed sections."""

    def phase(self, description: str, total: int) -> None:
        """Start a new phase of ``total`` units."""

    def advance(self, done: int) -> None:
        """Set the number of units done in the current phase."""


class NullProgress:
    """A :class:`ProgressHook` that shows nothing (for ``--json``)."""

    def phase(self, description: str, total: int) -> None:
        """Ignore the phase."""

    def advance(self, done: int) -> None:
        """Ignore the progress."""


class RichProgress:
    """A :class:`ProgressHook` drawing a rich progress bar on stderr.

    It never refreshes on its own (no background thread): it redraws only when told, which the
    workloads do between timed sections.
    """

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            auto_refresh=False,
            transient=False,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def phase(self, description: str, total: int) -> None:
        """Start a new bar."""
        self._task = self._progress.add_task(description, total=total)
        self._progress.refresh()

    def advance(self, done: int) -> None:
        """Move the current bar to ``done``."""
        if self._task is not None:
            self._progress.update(self._task, completed=done, refresh=True)


# -- measurements ----------------------------------------------------------------------------
class LatencyRecorder:
    """Per-call latencies in nanoseconds, kept compactly."""

    def __init__(self) -> None:
        self.samples = array("q")

    def add(self, ns: int) -> None:
        """Record one call."""
        self.samples.append(ns)

    def to_bytes(self) -> bytes:
        """The samples as raw bytes (to send to another process)."""
        return self.samples.tobytes()

    @classmethod
    def merged(cls, parts: Iterable[bytes]) -> LatencyRecorder:
        """One recorder holding the samples of every :meth:`to_bytes` in ``parts``."""
        rec = cls()
        for part in parts:
            rec.samples.frombytes(part)
        return rec

    def percentiles_us(self) -> dict[str, float]:
        """p50, p99, p999, mean and max, in microseconds."""
        if not self.samples:
            return {"p50": 0.0, "p99": 0.0, "p999": 0.0, "mean": 0.0, "max": 0.0}
        a = np.frombuffer(self.samples, dtype=np.int64) / 1000.0
        p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
        return {
            "p50": round(float(p50), 2),
            "p99": round(float(p99), 2),
            "p999": round(float(p999), 2),
            "mean": round(float(a.mean()), 2),
            "max": round(float(a.max()), 2),
        }


def rss_anon_bytes(pid: int | None = None) -> int:
    """Anonymous resident memory (``RssAnon`` in /proc/<pid>/status) of ``pid`` (default this
    process), in bytes.

    Mapped store files count as ``RssFile``/``RssShmem``, not here.
    """
    path = f"/proc/{'self' if pid is None else pid}/status"
    with open(path, encoding="ascii") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"RssAnon not found in {path}")


# -- the machine -----------------------------------------------------------------------------
@dataclass(slots=True)
class MachineInfo:
    """What a figure was measured on."""

    date: str
    nproc: int
    cpu_model: str
    python: str
    platform: str
    commit: str
    build: str = PURE
    """``pure Python``, or how many of minimq's modules run compiled (:mod:`common.compiled`)."""

    @classmethod
    def current(cls, sources: Sequence[str], exclude: Sequence[str] = ()) -> MachineInfo:
        """Describe this machine; the commit is :func:`source_commit` of ``sources``."""
        model = "unknown"
        with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        return cls(
            date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            nproc=len(os.sched_getaffinity(0)),
            cpu_model=model,
            python=f"{platform.python_implementation()} {platform.python_version()}",
            platform=platform.platform(),
            commit=source_commit(sources, exclude),
            build=build_description(),
        )


def source_commit(sources: Sequence[str], exclude: Sequence[str] = ()) -> str:
    """The git commit of the code measured; ``-dirty`` when a path of ``sources`` (relative to
    the repository root) has local changes outside ``exclude`` (the benchmark's own code)."""
    pathspec = [*sources, *(f":(exclude){p}" for p in exclude)]
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", *pathspec],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


@contextlib.contextmanager
def one_line_errors(*kinds: type[Exception]) -> Iterator[None]:
    """Turn a benchmark's expected failures (``kinds``) into one ``Error: ...`` line and Ctrl+C
    into ``Aborted!``, also when they come out of a trio nursery in an exception group."""
    try:
        yield
    except kinds as exc:
        raise click.ClickException(str(exc)) from exc
    except BaseExceptionGroup as group:
        if group.subgroup(KeyboardInterrupt) is not None:
            raise click.Abort from group
        known = group.subgroup(kinds)
        if known is None:
            raise
        first: BaseException = known
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise click.ClickException(str(first)) from group
