"""The benchmark's CPU accounting: /proc parsers (pure) and snapshots of a real process."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from client.bench.cpu import (
    CpuMeter,
    CpuSnapshot,
    describe,
    machine_ticks,
    process_ticks,
    snapshot,
    us_per_message,
)

LINUX = sys.platform.startswith("linux") and Path("/proc/stat").exists()


def test_process_ticks_counts_fields_after_the_last_parenthesis() -> None:
    # a command name with spaces and a ')' of its own must not shift the fields
    text = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 75 0 0 20 0 1 0 0\n"
    assert process_ticks(text) == 325


def test_machine_ticks_sums_busy_and_idle_columns() -> None:
    text = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\nintr 1 2 3\n"
    assert machine_ticks(text) == (100 + 5 + 50 + 3 + 2 + 7, 1000 + 20)


def test_machine_ticks_without_a_cpu_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="cpu"):
        machine_ticks("intr 1 2 3\n")


def test_per_message_figures_and_unknowns() -> None:
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    before = CpuSnapshot(process=100, busy=1000, idle=500)
    after = CpuSnapshot(process=110, busy=1040, idle=510)
    got = us_per_message(before, after, messages=1000)
    assert got == {
        "broker": round(10 * tick_us / 1000, 1),
        "machine": round(40 * tick_us / 1000, 1),
        "idle": round(10 * tick_us / 1000, 1),
    }
    unknown = us_per_message(CpuSnapshot(None, None, None), after, messages=1000)
    assert unknown == {"broker": None, "machine": None, "idle": None}
    assert us_per_message(before, after, messages=0)["machine"] is None
    assert describe(unknown) == "CPU per message: unknown"
    assert describe(got).startswith("CPU per message: broker ")


def test_a_meter_never_stopped_reports_nothing() -> None:
    meter = CpuMeter(broker_pid=None)
    meter.start()
    assert meter.us_per_message(10) == {"broker": None, "machine": None, "idle": None}


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_snapshot_of_a_busy_process_grows() -> None:
    first = snapshot(os.getpid())
    assert first.process is not None
    assert first.busy is not None
    assert first.idle is not None
    deadline = time.monotonic() + 10
    later = first
    while later.process == first.process and time.monotonic() < deadline:
        sum(range(10_000))  # burn CPU until the tick counter moves
        later = snapshot(os.getpid())
    assert later.process is not None
    assert later.process > first.process
    assert later.busy is not None
    assert later.busy >= first.busy


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_snapshot_of_a_gone_process_has_no_process_figure() -> None:
    gone = snapshot(2**22 + 12345)  # above the default pid_max: no such process
    assert gone.process is None
    assert gone.busy is not None
