"""The Makefile's venv follows ``PYTHON``: ``make test PYTHON=python3.13`` after a run on
another Python must rebuild ``.venv`` on python3.13 (pyproject.toml claims 3.11 to 3.13), not
test the old interpreter again because the install stamp is still newer than pyproject.toml.

Only make's dry run (``-n``) and touch mode (``-t``) are used: nothing is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import REPO

_INTERPRETER_NAME = re.compile(r"python3(\.\d+)?")


def _version_of(python: str) -> tuple[int, ...] | None:
    """``python``'s version, or None if it does not run (a pyenv shim of another version)."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    return tuple(int(part) for part in done.stdout.split())


def _another_python() -> str | None:
    """A Python 3 on PATH whose version differs from this test's, or None."""
    mine = tuple(sys.version_info[:3])
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if not _INTERPRETER_NAME.fullmatch(name) or not os.access(path, os.X_OK):
                continue
            version = _version_of(path)
            if version is not None and version != mine:
                return path
    return None


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_rebuilds_the_venv_for_another_python(tmp_path: Path) -> None:
    other = _another_python()
    if other is None:
        pytest.skip("needs a second Python version on PATH")
    venv = tmp_path / "venv"
    made = subprocess.run(
        [other, "-m", "venv", "--without-pip", str(venv)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"{other} cannot make a venv: {made.stderr.strip()}")
    touched = _make("-t", "install", f"VENV={venv}", f"PYTHON={other}")  # "installed" on other
    assert touched.returncode == 0, touched.stdout + touched.stderr

    same = _make("-n", "install", f"VENV={venv}", f"PYTHON={other}")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "Nothing to be done" in same.stdout, same.stdout

    switched = _make("-n", "install", f"VENV={venv}", f"PYTHON={sys.executable}")
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert f"{sys.executable} -m venv" in switched.stdout, switched.stdout
