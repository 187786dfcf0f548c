"""CPU spent during a timed span, by the broker process and by the whole machine.

Read from Linux's ``/proc`` (clock ticks, usually 10 ms): ``/proc/<pid>/stat`` for a process's
user + system time and the ``cpu`` line of ``/proc/stat`` for the machine's busy and idle time.
Where ``/proc`` is missing (not Linux) or the process is gone, the figures are None.
The parsers are pure functions of the files' text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


def process_ticks(stat_text: str) -> int:
    """User + system clock ticks from the text of ``/proc/<pid>/stat``.

    The command name (field 2) may hold spaces and parentheses, so fields are counted after
    its last ``)``: there the state is the first field and utime, stime the 12th and 13th.
    """
    fields = stat_text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def machine_ticks(stat_text: str) -> tuple[int, int]:
    """``(busy, idle)`` clock ticks summed over all CPUs from the text of ``/proc/stat``.

    Busy is user + nice + system + irq + softirq + steal; idle is idle + iowait.
    """
    for line in stat_text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            values += [0] * (8 - len(values))
            user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
            return user + nice + system + irq + softirq + steal, idle + iowait
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    """Tick counters at one moment (None where they could not be read)."""

    process: int | None
    busy: int | None
    idle: int | None


def snapshot(pid: int | None) -> CpuSnapshot:
    """The counters now, for process ``pid`` (None: no process) and for the machine."""
    process = None
    if pid is not None:
        try:
            process = process_ticks((_PROC / str(pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            process = None
    try:
        busy, idle = machine_ticks((_PROC / "stat").read_text())
    except (OSError, ValueError):
        return CpuSnapshot(process, None, None)
    return CpuSnapshot(process, busy, idle)


def us_per_message(
    before: CpuSnapshot, after: CpuSnapshot, messages: int
) -> dict[str, float | None]:
    """CPU microseconds per message between two snapshots: ``broker`` (the process),
    ``machine`` (busy, all CPUs together) and ``idle`` (all CPUs together)."""
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")

    def per(a: int | None, b: int | None) -> float | None:
        if a is None or b is None or messages <= 0:
            return None
        return round((b - a) * tick_us / messages, 1)

    return {
        "broker": per(before.process, after.process),
        "machine": per(before.busy, after.busy),
        "idle": per(before.idle, after.idle),
    }


class CpuMeter:
    """Snapshots around a timed span: :meth:`start`, :meth:`stop`, :meth:`us_per_message`."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid
        self._before: CpuSnapshot | None = None
        self._after: CpuSnapshot | None = None

    def start(self) -> None:
        """Take the first snapshot (just before the timed work starts)."""
        self._before = snapshot(self.broker_pid)

    def stop(self) -> None:
        """Take the second snapshot (just after the timed work ended)."""
        self._after = snapshot(self.broker_pid)

    def us_per_message(self, messages: int) -> dict[str, float | None]:
        """:func:`us_per_message` of the span; all None before :meth:`stop`."""
        if self._before is None or self._after is None:
            return {"broker": None, "machine": None, "idle": None}
        return us_per_message(self._before, self._after, messages)


def describe(cpu: dict[str, float | None]) -> str:
    """One line for a human: the CPU figures that are known."""
    names = {"broker": "broker", "machine": "all CPUs busy", "idle": "all CPUs idle"}
    parts = [f"{names[k]} {v:,.1f} µs" for k, v in cpu.items() if v is not None]
    return "CPU per message: " + (", ".join(parts) if parts else "unknown")
