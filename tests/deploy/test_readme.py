"""The README's Python examples run as written against a real name server and broker.

Each ```python block that does not need a SparkSession runs in a fresh interpreter with the
quick start's name-server address replaced by the test cluster's (ports are ephemeral) and the
push example's ``input()`` replaced by a short wait. A block that fails fails the test with
its output, so the README cannot drift from the API.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import trio

from tests.e2e.cluster import in_thread, running_cluster

README = Path(__file__).resolve().parents[2] / "README.md"
QUICK_START_NAMESRV = "127.0.0.1:9876"


def python_blocks() -> list[str]:
    """The README's runnable ```python blocks (those without a ``spark`` session)."""
    blocks = re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.M | re.S)
    return [b for b in blocks if "spark" not in b]


def run_block(code: str, namesrv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = code.replace(QUICK_START_NAMESRV, namesrv)
    code = re.sub(r"input\(.*\)", "__import__('time').sleep(2)", code)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_readme_has_the_examples_this_test_runs() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 4
    assert all(QUICK_START_NAMESRV in b for b in blocks)


async def test_readme_python_examples_run(tmp_path: Path) -> None:
    with trio.fail_after(240):
        async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
            for block in python_blocks():
                done = await in_thread(run_block, block, cluster.namesrv_addr, tmp_path)
                assert done.returncode == 0, f"{block}\n--- stdout\n{done.stdout}\n{done.stderr}"
                assert done.stdout.strip(), f"the example printed nothing:\n{block}"
