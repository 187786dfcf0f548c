"""Aggregating the workers' results and presenting them (rich tables, JSON).

The rate of a run is the total of the workers' messages over the span from the earliest
worker's start to the latest worker's end (wall clock, comparable between processes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.table import Table

from common.benchkit import LatencyRecorder, MachineInfo

MB = 1_000_000


def aggregate(results: Sequence[dict[str, Any]], *, body_size: int) -> dict[str, Any]:
    """The run's figures: messages, seconds, msgs/s, MB/s (bodies) and latency percentiles."""
    msgs = sum(int(r["msgs"]) for r in results)
    span_ns = max(r["end_ns"] for r in results) - min(r["start_ns"] for r in results)
    seconds = max(span_ns, 1) / 1e9
    nbytes = sum(int(r.get("bytes", r["msgs"] * body_size)) for r in results)
    latency = LatencyRecorder.merged(r["latency"] for r in results)
    return {
        "msgs": msgs,
        "seconds": round(seconds, 4),
        "msgs_per_s": round(msgs / seconds, 1),
        "mb_per_s": round(nbytes / MB / seconds, 2),
        "requests": len(latency.samples),
        "latency_us": latency.percentiles_us(),
    }


def per_client(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each worker's own figures (raw samples left out)."""
    out = []
    for r in results:
        seconds = max(r["end_ns"] - r["start_ns"], 1) / 1e9
        d = {k: v for k, v in r.items() if not isinstance(v, bytes)}
        d["seconds"] = round(seconds, 4)
        d["msgs_per_s"] = round(r["msgs"] / seconds, 1)
        out.append(d)
    return out


def report(
    workload: str,
    config: dict[str, Any],
    machine: MachineInfo,
    result: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """One JSON-ready object for a run."""
    return {"workload": workload, "config": config, "machine": asdict(machine), **result, **extra}


def to_json(obj: dict[str, Any]) -> str:
    """``obj`` as one line of JSON."""
    return json.dumps(obj)


def _lat_cells(lat: dict[str, float]) -> list[str]:
    return [f"{lat['p50']:,.0f}", f"{lat['p99']:,.0f}", f"{lat['p999']:,.0f}", f"{lat['max']:,.0f}"]


def rate_table(
    title: str, rows: Sequence[tuple[str, dict[str, Any]]], caption: str, *, latency: bool = True
) -> Table:
    """One row per (label, :func:`aggregate` result): msgs/s, MB/s and (if ``latency``)
    latency in µs."""
    t = Table(title=title, caption=caption)
    cols = ["", "msgs", "seconds", "msgs/s", "MB/s"]
    if latency:
        cols += ["p50 µs", "p99 µs", "p999 µs", "max µs"]
    for col in cols:
        t.add_column(col, justify="right")
    for label, r in rows:
        t.add_row(
            label,
            f"{r['msgs']:,}",
            f"{r['seconds']:.2f}",
            f"{r['msgs_per_s']:,.0f}",
            f"{r['mb_per_s']:,.1f}",
            *(_lat_cells(r["latency_us"]) if latency else []),
        )
    return t


def rebalance_table(rounds: Sequence[dict[str, float]], target_s: float) -> Table:
    """One row per rebalance round: seconds until every queue had one owner, per change."""
    changes = list(dict.fromkeys(k for r in rounds for k in r))
    t = Table(title=f"seconds to one owner per queue (target {target_s:g} s)")
    for col in ("round", *changes):
        t.add_column(col, justify="right")
    for i, r in enumerate(rounds, 1):
        t.add_row(str(i), *(f"{r[c]:.3f}" if c in r else "" for c in changes))
    return t


def config_caption(config: dict[str, Any]) -> str:
    """The run's configuration on one line."""
    return " · ".join(f"{k}={v}" for k, v in config.items() if v is not None)


def machine_line(m: MachineInfo) -> str:
    """One line describing the machine."""
    return (
        f"{m.date} · commit {m.commit} · {m.build} · {m.nproc} CPUs · {m.cpu_model} · {m.python} · "
        f"{m.platform}"
    )
