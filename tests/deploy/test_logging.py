"""Servers log to stderr at --logLevel and, with --logFile, to a file too; the client library
never configures logging."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from tests.processes import NAMESRV_BOOT, REPO, read_log, run_cli, start_process, stop_process

CONFIGURING_CALLS = {"basicConfig", "dictConfig", "fileConfig", "addHandler", "setLevel"}
PROGRAMS = {"client/admin/base.py"}
"""Where a command-line program's ``main`` lives (``mqadmin``): a program owns its process's
logging, and mqadmin keeps library records off the one line a failure prints."""


async def test_namesrv_logs_to_stderr_and_file(tmp_path: Path) -> None:
    log_file = tmp_path / "namesrv.log"
    stderr = tmp_path / "stderr.log"
    args = ["namesrv", "--listenPort", "0", "--bindAddress", "127.0.0.1"]
    proc, _ = await start_process(
        [*args, "--logLevel", "DEBUG", "--logFile", str(log_file)], stderr, NAMESRV_BOOT
    )
    try:
        os.kill(proc.pid, signal.SIGTERM)
        with trio.fail_after(20):
            await proc.wait()
    finally:
        await stop_process(proc)
    assert proc.returncode == 0
    for text in (read_log(stderr), log_file.read_text()):
        assert "INFO namesrv: received SIGTERM; shutting down" in text
        assert "name server stopped" in text


def test_unwritable_log_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    bad = str(tmp_path / "missing-dir" / "server.log")
    for args in (
        ["namesrv", "--listenPort", "0", "--logFile", bad],
        ["broker", "--listenPort", "0", "--storePathRootDir", str(tmp_path), "--logFile", bad],
    ):
        done = run_cli(*args)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1
        assert "cannot open log file" in lines[0]


def _logging_calls(path: Path) -> list[str]:
    """Calls in ``path`` that configure logging, or get a logger not named ``__name__``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        by_module_name = (
            len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "__name__"
        )
        if name in CONFIGURING_CALLS or (name == "getLogger" and not by_module_name):
            found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    return found


def test_client_library_never_configures_logging() -> None:
    """No logging configuration in client/ (checked in the source), and importing the client in
    a fresh interpreter leaves every logger without handlers."""
    offenders = [
        hit
        for path in sorted((REPO / "client").rglob("*.py"))
        if str(path.relative_to(REPO)) not in PROGRAMS
        for hit in _logging_calls(path)
    ]
    assert offenders == []
    code = (
        "import logging, client, client.aio\n"
        "loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]\n"
        "print(sum(len(getattr(lg, 'handlers', ())) for lg in loggers))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
