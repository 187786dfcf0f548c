"""``make demo`` end to end: servers up, topic, produce, push-consume, (Spark), clean stop.

The ``make demo`` run skips the Spark step (``--no-spark``) to keep CI fast, and uses this
test's environment (``BIN``, no ``DEMO_DEPS`` install step); the Spark step runs in its own test
when pyspark and Java are present.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import REPO

MESSAGES = 20


def run_demo(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=110, check=False, env=os.environ
    )


def check_common(done: subprocess.CompletedProcess[str], data: Path) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "[demo] namesrv started" in out
    assert "[demo] broker started" in out
    assert "[demo] topic DemoOrders created" in out
    assert f"[demo] produced {MESSAGES} messages" in out
    assert f"[demo] push consumer received {MESSAGES} messages" in out
    assert "[demo] broker stopped (exit code 0)" in out
    assert "[demo] namesrv stopped (exit code 0)" in out
    assert out.rstrip().endswith("[demo] done")
    assert (data / "store" / "commitlog").is_dir()
    assert "broker broker-a stopped" in (data / "logs" / "broker.log").read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = run_demo(
        [
            "make",
            "--no-print-directory",
            "demo",
            "DEMO_DEPS=",
            f"BIN={Path(sys.executable).parent}",
            f"DEMO_ARGS=--data-dir {data} --no-spark --messages {MESSAGES}",
        ]
    )
    check_common(done, data)
    assert "[demo] Spark step skipped: --no-spark" in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("pyspark") is None or shutil.which("java") is None,
    reason="the Spark step needs pyspark and Java",
)
def test_demo_with_spark(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = run_demo(
        [sys.executable, "examples/demo.py", "--data-dir", str(data), "--messages", str(MESSAGES)]
    )
    check_common(done, data)
    assert f"[demo] spark: {MESSAGES} rows in DemoOrders" in done.stdout
