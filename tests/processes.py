"""Real minimq processes for tests: start by module or console script, read the boot line, stop
by pid."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[1]
BOOT_LIMIT_S = 20.0

NAMESRV_BOOT = re.compile(r"The Name Server boot success\. listening on 127\.0\.0\.1:(\d+)")
BROKER_BOOT = re.compile(
    r"The broker\[broker-a, 127\.0\.0\.1:(\d+)\] boot success\. "
    r"serializeType=MSGPACK and name server is (.+)"
)
BROKER_BOOT_ANY = re.compile(
    r"The broker\[([^,\]]+), 127\.0\.0\.1:(\d+)\] boot success\. "
    r"serializeType=MSGPACK and name server is (.+)"
)
"""A broker boot line of any broker name: groups are name, port, name-server list."""


def console_script(name: str) -> str:
    """The path of the venv's console script ``name`` (``mqbroker``, ``mqnamesrv``)."""
    path = Path(sys.executable).parent / name
    assert path.exists(), f"console script {name} is not installed in {path.parent}"
    return str(path)


def read_log(path: Path) -> str:
    """The text of a captured stderr log."""
    return path.read_text(errors="replace")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <args>`` to completion (30 s at most) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def start_process(
    args: list[str], stderr_path: Path, boot: re.Pattern[str]
) -> tuple[trio.Process, re.Match[str]]:
    """Start ``python -m <args>``; return it and the match of its boot line on stdout."""
    return await start_command([sys.executable, "-m", *args], stderr_path, boot)


async def start_namesrv(stderr_path: Path) -> tuple[trio.Process, str]:
    """Start ``mqnamesrv`` on 127.0.0.1 and a free port; return it and its ``host:port``."""
    proc, boot = await start_process(
        ["namesrv", "--listenPort", "0", "--bindAddress", "127.0.0.1"], stderr_path, NAMESRV_BOOT
    )
    return proc, f"127.0.0.1:{boot[1]}"


async def start_command(
    argv: list[str], stderr_path: Path, boot: re.Pattern[str]
) -> tuple[trio.Process, re.Match[str]]:
    """Start ``argv`` (stderr appended to ``stderr_path``); return the process and the match
    of its first stdout line against ``boot`` (read within ``BOOT_LIMIT_S``)."""
    with stderr_path.open("ab") as stderr:
        proc = await trio.lowlevel.open_process(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        assert proc.stdout is not None
        buf = b""
        with trio.fail_after(BOOT_LIMIT_S):
            while b"\n" not in buf:
                chunk = await proc.stdout.receive_some()
                assert chunk, f"{argv} exited early: {read_log(stderr_path)}"
                buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        match = boot.fullmatch(line)
        assert match is not None, line
    except BaseException:
        await stop_process(proc)
        raise
    return proc, match


async def stop_process(proc: trio.Process) -> None:
    """SIGKILL by pid if still running, then reap and close stdout."""
    if proc.returncode is None:
        os.kill(proc.pid, signal.SIGKILL)
    with trio.move_on_after(5, shield=True):
        await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.aclose()


LOWERED_SOFT_NOFILE = 256
"""A soft ``RLIMIT_NOFILE`` to start a server under (``ulimit -Sn`` in its own shell)."""


def open_files_limits(pid: int) -> tuple[int, int]:
    """The soft and hard "Max open files" of process ``pid``, from ``/proc/<pid>/limits``."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"no open files limit for {pid}")


def with_lowered_soft_nofile(argv: list[str]) -> list[str]:
    """``argv`` run through a shell that first lowers its soft ``RLIMIT_NOFILE`` to
    :data:`LOWERED_SOFT_NOFILE`."""
    return ["/bin/sh", "-c", f'ulimit -Sn {LOWERED_SOFT_NOFILE} && exec "$0" "$@"', *argv]
