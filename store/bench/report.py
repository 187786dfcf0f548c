"""Presenting benchmark results: a rich progress display, rich tables and JSON summaries.

Each workload's runs are summarised into one JSON object: the machine, every run, the best
figure, the spread between runs and the issue's target for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.table import Table

from common.benchkit import RichProgress
from store.bench.group_commit import GroupCommitResult
from store.bench.store_bench import (
    BacklogResult,
    PutRunResult,
    ReadResult,
    RecoverResult,
)
from store.bench.workload import MachineInfo

MIB = 1 << 20

# The targets (2-core machine, 128-byte bodies, one key per message).
TARGET_PUT_BATCH_MSGS_S = 250_000
TARGET_PUT_SINGLE_MSGS_S = 80_000
TARGET_READ_MSGS_S = 500_000
TARGET_RECOVER_S = 5.0
TARGET_BACKLOG_RSS_ANON = 150_000_000  # bytes (150 MB)

__all__ = ["RichProgress", "Summary"]


@dataclass(slots=True)
class Summary:
    """The headline figure of a workload over its runs."""

    workload: str
    metric: str
    unit: str
    best: float
    worst: float
    spread_pct: float
    target: float | None
    higher_is_better: bool

    @property
    def meets_target(self) -> bool | None:
        """Whether the best run meets the target (None without a target)."""
        if self.target is None:
            return None
        return self.best >= self.target if self.higher_is_better else self.best <= self.target

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        d = asdict(self)
        d["meets_target"] = self.meets_target
        return d


def _summary(
    workload: str,
    metric: str,
    unit: str,
    values: Sequence[float],
    target: float | None,
    *,
    higher_is_better: bool,
) -> Summary:
    best = max(values) if higher_is_better else min(values)
    worst = min(values) if higher_is_better else max(values)
    spread = abs(best - worst) / best * 100 if best else 0.0
    return Summary(workload, metric, unit, best, worst, round(spread, 1), target, higher_is_better)


# -- per workload ----------------------------------------------------------------------------
def put_label(run: PutRunResult) -> str:
    """``put`` plus what distinguishes the run (batch, mode, yield cadence)."""
    p = run.params
    label = f"put batch={p.batch} {p.mode}"
    if p.mode == "trio" and p.yield_every != 1:
        label += f" yield-every={p.yield_every}"
    return label


def summarise_put(runs: Sequence[PutRunResult]) -> Summary:
    """Best msgs/s of the runs, against the batched or the single-put target."""
    p = runs[0].params
    target: float | None = None
    if p.batch >= 32:
        target = TARGET_PUT_BATCH_MSGS_S
    elif p.batch == 1:
        target = TARGET_PUT_SINGLE_MSGS_S
    return _summary(
        put_label(runs[0]),
        "msgs_per_s",
        "msgs/s",
        [r.msgs_per_s for r in runs],
        target,
        higher_is_better=True,
    )


def summarise_read(runs: Sequence[ReadResult]) -> Summary:
    """Best msgs/s of the runs."""
    return _summary(
        f"read max={runs[0].max_msgs}",
        "msgs_per_s",
        "msgs/s",
        [r.msgs_per_s for r in runs],
        TARGET_READ_MSGS_S,
        higher_is_better=True,
    )


def summarise_recover(runs: Sequence[RecoverResult]) -> Summary:
    """Fastest of the runs' crash recovery (the slower of ``crash`` and ``crash-rescan``)."""
    return _summary(
        "recover (crash, full rescan)",
        "seconds",
        "s",
        [r.crash_seconds for r in runs],
        TARGET_RECOVER_S,
        higher_is_better=False,
    )


def summarise_backlog(runs: Sequence[BacklogResult]) -> Summary:
    """Lowest peak RssAnon of the runs (in bytes)."""
    return _summary(
        f"backlog {runs[0].put.messages:,} msgs",
        "rss_anon_peak",
        "bytes",
        [float(r.rss_anon_peak) for r in runs],
        TARGET_BACKLOG_RSS_ANON,
        higher_is_better=False,
    )


def summarise_group_commit(runs: Sequence[GroupCommitResult]) -> Summary:
    """Best acknowledged puts/s over the repeats with the most writers (best and spread
    compare runs of one configuration, not one writer count against another; no target:
    issue #3's is the broker's)."""
    most = max(r.writers for r in runs)
    return _summary(
        f"group-commit (SYNC_FLUSH, {most} writers)",
        "puts_per_s",
        "puts/s",
        [r.puts_per_s for r in runs if r.writers == most],
        None,
        higher_is_better=True,
    )


def json_report(workload: str, machine: MachineInfo, runs: Sequence[Any], summary: Summary) -> str:
    """One JSON object for a workload: machine, runs, summary."""
    return json.dumps(
        {
            "workload": workload,
            "machine": asdict(machine),
            "summary": summary.to_dict(),
            "runs": [r.to_dict() for r in runs],
        }
    )


# -- tables ----------------------------------------------------------------------------------
def _fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def _target_text(s: Summary) -> str:
    if s.target is None:
        return "-"
    if s.unit == "bytes":
        best, target = f"{s.best / 1e6:,.1f} MB", f"≤ {s.target / 1e6:,.0f} MB"
    elif s.unit == "s":
        best, target = f"{s.best:.2f} s", f"≤ {s.target:g} s"
    else:
        best, target = f"{s.best:,.0f} {s.unit}", f"≥ {s.target:,.0f} {s.unit}"
    mark = "[green]met[/]" if s.meets_target else "[red]missed[/]"
    return f"best {best} (spread {s.spread_pct:.1f}%), target {target}: {mark}"


def put_table(runs: Sequence[PutRunResult], summary: Summary) -> Table:
    """One row per put run; the caption holds the summary against the target.

    Latencies are per put call; the breakdown (put call, dispatch, trio scheduling) is in
    microseconds per message.
    """
    t = Table(title=f"{put_label(runs[0])} ({runs[0].messages:,} msgs)")
    t.caption = _target_text(summary)
    cols: tuple[str, ...] = ("run", "msgs/s", "MB/s", "p50 µs", "p99 µs", "p999 µs")
    cols += ("put µs/msg", "dispatch µs/msg", "sched µs/msg", "msgs/dispatch", "idle ckpt µs")
    for col in cols:
        t.add_column(col, justify="right")
    for i, r in enumerate(runs, 1):
        d = r.to_dict()
        b = d["breakdown_us_per_msg"]
        trio_mode = r.params.mode == "trio"
        t.add_row(
            str(i),
            _fmt_rate(r.msgs_per_s),
            f"{r.mb_per_s:,.1f}",
            f"{r.latency_us['p50']:.1f}",
            f"{r.latency_us['p99']:.1f}",
            f"{r.latency_us['p999']:.1f}",
            f"{b['put_call']:.2f}",
            f"{b['dispatch']:.2f}",
            f"{b['scheduler']:.2f}" if trio_mode else "-",
            f"{d['msgs_per_dispatch']:,}",
            f"{r.checkpoint_ns / 1000:.2f}" if trio_mode else "-",
        )
    return t


def read_table(runs: Sequence[ReadResult], summary: Summary) -> Table:
    """One row per read run."""
    t = Table(title=f"read ({runs[0].count:,} msgs, max {runs[0].max_msgs} per call)")
    t.caption = _target_text(summary)
    for col in ("run", "msgs/s", "MB/s", "p50 µs/call", "p99 µs/call", "p999 µs/call"):
        t.add_column(col, justify="right")
    for i, r in enumerate(runs, 1):
        t.add_row(
            str(i),
            _fmt_rate(r.msgs_per_s),
            f"{r.mb_per_s:,.1f}",
            f"{r.latency_us['p50']:.1f}",
            f"{r.latency_us['p99']:.1f}",
            f"{r.latency_us['p999']:.1f}",
        )
    return t


def recover_table(runs: Sequence[RecoverResult], summary: Summary) -> Table:
    """One row per (run, variant)."""
    first = runs[0]
    t = Table(
        title=f"recover ({first.bytes / (1 << 30):.2f} GiB commitlog, {first.messages:,} msgs)",
        caption=_target_text(summary),
    )
    for col in ("run", "variant", "open() s", "scanned MB", "scan MB/s", "cache"):
        t.add_column(col, justify="right")
    for i, r in enumerate(runs, 1):
        for v in r.timings:
            d = v.to_dict()
            t.add_row(
                str(i),
                v.variant,
                f"{v.seconds:.3f}",
                f"{v.scanned_bytes / 1e6:,.0f}",
                f"{d['scan_mb_per_s']:,.0f}",
                "cold" if v.cold else "warm",
            )
    return t


def backlog_table(runs: Sequence[BacklogResult], summary: Summary) -> Table:
    """One row per backlog run (memory in MiB)."""
    t = Table(title=f"backlog ({runs[0].put.messages:,} msgs)", caption=_target_text(summary))
    cols = (
        "run",
        "msgs/s",
        "RssAnon start MiB",
        "peak MiB",
        "after MiB",
        "after gc MiB",
        "growth MiB",
        "max pending",
    )
    for col in cols:
        t.add_column(col, justify="right")
    for i, r in enumerate(runs, 1):
        t.add_row(
            str(i),
            _fmt_rate(r.put.msgs_per_s),
            f"{r.rss_anon_start / MIB:.1f}",
            f"{r.rss_anon_peak / MIB:.1f}",
            f"{r.rss_anon_after / MIB:.1f}",
            f"{r.rss_anon_after_gc / MIB:.1f}",
            f"{(r.rss_anon_peak - r.rss_anon_start) / MIB:.1f}",
            f"{r.max_pending_dispatch:,}",
        )
    return t


def group_commit_table(runs: Sequence[GroupCommitResult], summary: Summary) -> Table:
    """One row per run: puts and flushes per second against the disk's fsync-per-write rate."""
    t = Table(title="group commit (SYNC_FLUSH, one message per put)", caption=_target_text(summary))
    cols = ("writers", "puts/s", "flushes/s", "puts/flush", "flush round µs", "fsync/s", "× fsync")
    for col in cols:
        t.add_column(col, justify="right")
    for r in runs:
        d = r.to_dict()
        t.add_row(
            str(r.writers),
            _fmt_rate(r.puts_per_s),
            _fmt_rate(d["flushes_per_s"]),
            f"{r.puts_per_flush:.1f}",
            f"{r.flush_round_us:,.0f}",
            _fmt_rate(r.fsync_per_write_s),
            f"{r.times_fsync_rate:.2f}",
        )
    return t


def machine_line(m: MachineInfo) -> str:
    """One line describing the machine."""
    return (
        f"{m.date} · commit {m.commit} · {m.build} · {m.nproc} CPUs · {m.cpu_model} · {m.python} · "
        f"{m.platform}"
    )
