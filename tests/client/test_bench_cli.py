"""``mqbench`` client commands as real processes: each starts its own name server and broker,
runs tiny workloads in worker processes and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

MQBENCH = str(Path(sys.executable).parent / "mqbench")
SMALL = ["--commitlog-file-size", str(16 << 20), "--json"]
LIMIT_S = 60


def run_bench(tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run ``mqbench <args>`` with a small started cluster; its one JSON object."""
    proc = subprocess.run(
        [MQBENCH, *args, *SMALL, "--dir", str(tmp_path / "clusters")],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    out: dict[str, Any] = json.loads(lines[0])
    return out


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def assert_cleaned_up(out: dict[str, Any], tmp_path: Path) -> None:
    assert len(out["cluster_pids"]) == 2
    for pid in [*out["cluster_pids"], *out["worker_pids"]]:
        assert not alive(pid), pid
    assert list((tmp_path / "clusters").iterdir()) == []  # the store was removed


def assert_rates(out: dict[str, Any]) -> None:
    assert out["seconds"] > 0
    assert out["msgs_per_s"] > 0
    assert out["mb_per_s"] >= 0
    lat = out["latency_us"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert out["machine"]["nproc"] >= 1
    assert out["machine"]["commit"]


def assert_cpu(out: dict[str, Any]) -> None:
    """The started broker's and the machine's CPU per message (Linux: numbers; else None)."""
    cpu = out["cpu_us_per_msg"]
    assert set(cpu) == {"broker", "machine", "idle"}
    if sys.platform.startswith("linux"):
        # a tiny run may not move the 10 ms tick counters, hence >= 0
        assert all(isinstance(v, float) and v >= 0 for v in cpu.values())


def test_produce_batch_two_clients(tmp_path: Path) -> None:
    out = run_bench(
        tmp_path, "produce", "--clients", "2", "--mode", "batch", "--batch", "16",
        "--inflight", "2", "--count", "200", "--flush", "SYNC_FLUSH",
    )  # fmt: skip
    assert out["workload"] == "produce"
    cfg = out["config"]
    assert (cfg["clients"], cfg["mode"], cfg["batch"], cfg["inflight"]) == (2, "batch", 16, 2)
    assert (cfg["flush"], cfg["count"], cfg["api"], cfg["body_size"]) == (
        "SYNC_FLUSH", 200, "aio", 128
    )  # fmt: skip
    assert out["msgs"] == 200
    assert [c["msgs"] for c in out["clients_detail"]] == [100, 100]
    assert out["requests"] == 2 * 7  # 100 = 6 x 16 + 4 per client
    assert len({c["pid"] for c in out["clients_detail"]}) == 2
    assert_rates(out)
    assert_cpu(out)
    assert_cleaned_up(out, tmp_path)


def test_produce_blocking_sync(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "produce", "--api", "blocking", "--count", "200", "--inflight", "2")
    assert out["config"]["api"] == "blocking"
    assert out["msgs"] == out["requests"] == 200
    assert_rates(out)
    assert_cleaned_up(out, tmp_path)


def test_tx_against_plain_sync(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "tx", "--api", "blocking", "--count", "200", "--inflight", "2")
    assert out["workload"] == "tx"
    assert out["msgs"] == out["requests"] == 200
    assert out["plain_sync"]["msgs"] == 200
    assert out["ratio_to_sync"] == round(out["msgs_per_s"] / out["plain_sync"]["msgs_per_s"], 3)
    assert_rates(out)
    assert_cleaned_up(out, tmp_path)


def test_consume_two_clients(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "consume", "--count", "200", "--clients", "2", "--pull-batch", "8")
    assert out["workload"] == "consume"
    assert out["config"]["pull_batch"] == 8
    assert out["msgs"] == 200
    assert sum(c["msgs"] for c in out["clients_detail"]) == 200
    queues = [set(c["queues"]) for c in out["clients_detail"]]
    assert queues[0]
    assert queues[1]
    assert not queues[0] & queues[1]
    assert_rates(out)
    assert_cpu(out)
    assert_cleaned_up(out, tmp_path)


def test_latency(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "latency", "--rate", "200", "--duration", "1", "--body-size", "64")
    assert out["config"]["rate"] == 200
    assert out["sent"] == 200
    assert out["msgs"] == 200  # every stamped message received, warm-up ones excluded
    assert out["lateness_us"]["max"] >= 0
    assert out["send_latency_us"]["p50"] > 0
    assert_rates(out)
    assert_cleaned_up(out, tmp_path)


def test_backlog_reports_broker_memory(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "backlog", "--count", "500")
    assert out["msgs"] == 500
    assert out["fill"]["msgs"] == 500
    rss = out["broker_rss_anon"]
    assert set(rss) == {"start", "after_fill", "after_consume", "peak"}
    assert rss["peak"] >= max(rss["after_fill"], rss["after_consume"]) > 0
    assert_cleaned_up(out, tmp_path)


def assert_push(out: dict[str, Any], count: int) -> None:
    assert out["workload"] == "push"
    assert out["msgs"] == count
    assert sum(c["msgs"] for c in out["clients_detail"]) == count
    assert out["queues"] == list(range(8))  # an 8-queue topic, each queue owned once
    assert out["seconds"] > 0
    assert out["msgs_per_s"] > 0
    assert out["mb_per_s"] > 0
    assert "latency_us" not in out


def test_push_concurrent_aio(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "push", "--count", "500")
    cfg = out["config"]
    assert (cfg["count"], cfg["orderly"], cfg["clients"], cfg["api"]) == (500, False, 1, "aio")
    assert (cfg["batch_size"], cfg["threads"]) == (1, 20)
    assert_push(out, 500)
    assert_cleaned_up(out, tmp_path)


def test_push_orderly_blocking_two_clients(tmp_path: Path) -> None:
    out = run_bench(
        tmp_path, "push", "--count", "500", "--orderly", "--api", "blocking", "--clients", "2",
        "--batch-size", "4", "--threads", "2",
    )  # fmt: skip
    cfg = out["config"]
    assert (cfg["orderly"], cfg["api"], cfg["clients"]) == (True, "blocking", 2)
    assert (cfg["batch_size"], cfg["threads"]) == (4, 2)
    assert_push(out, 500)
    assert [len(c["queues"]) for c in out["clients_detail"]] == [4, 4]
    assert len({c["pid"] for c in out["clients_detail"]}) == 2
    assert_cleaned_up(out, tmp_path)


def test_rebalance_one_round(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "rebalance", "--members", "2", "--rounds", "1")
    assert out["workload"] == "rebalance"
    assert (out["config"]["members"], out["config"]["rounds"]) == (2, 1)
    assert out["queues"] == 8
    assert out["initial_s"] >= 0
    [round_] = out["rounds"]
    assert list(round_) == ["join", "leave", "kill", "rejoin"]
    assert all(v >= 0 for v in round_.values())
    assert out["max_s"] == max(round_.values())
    assert out["target_s"] == 2.0
    assert out["within_target"] == (out["max_s"] <= 2.0)
    assert len(out["worker_pids"]) == 4  # two members, one joining, one rejoining
    assert_cleaned_up(out, tmp_path)


def test_namesrv_and_start_cluster_exclude_each_other() -> None:
    proc = subprocess.run(
        [MQBENCH, "produce", "--namesrv", "127.0.0.1:1", "--start-cluster"],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert proc.returncode == 2
    assert "exclude each other" in proc.stderr


@pytest.mark.parametrize("command", ["store", "stacks"])
def test_store_commands_load_lazily(command: str) -> None:
    code = (
        "import sys, client.bench.cli\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('store', 'broker')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=LIMIT_S, env=os.environ)
    proc = subprocess.run(
        [MQBENCH, command, "--help"], capture_output=True, text=True, timeout=LIMIT_S, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "Usage: mqbench " + command in proc.stdout


def run_store_bench(tmp_path: Path, workload: str, *args: str) -> dict[str, Any]:
    """Run ``mqbench store <workload> ... --json`` with its stores under ``tmp_path``."""
    proc = subprocess.run(
        [MQBENCH, "store", workload, *args, "--json", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.mark.parametrize("batch", ["1", "32"])
def test_store_put_puts_and_dispatches_every_message(tmp_path: Path, batch: str) -> None:
    """``mqbench store put`` drives a real store under trio, checks that every message reached
    its consume queue and the index, and reports the time per message by part."""
    args = ["--count", "3000", "--batch", batch, "--commitlog-file-size", str(256 << 10)]
    out = run_store_bench(tmp_path, "put", *args)
    (run,) = out["runs"]
    assert run["messages"] == 3000
    assert run["calls"] == -(-3000 // int(batch))  # the last call takes the rest
    assert run["msgs_per_s"] > 0
    assert set(run["breakdown_us_per_msg"]) >= {"put_call", "dispatch", "scheduler"}
    assert list(tmp_path.iterdir()) == []  # the store was removed


def test_store_group_commit_shares_flushes_between_writers(tmp_path: Path) -> None:
    """``mqbench store group-commit`` runs SYNC_FLUSH putters against a real store and reports
    puts, flushes and the disk's own fsync rate for each writer count."""
    args = ["--writers", "1", "--writers", "4", "--duration", "0.3", "--fsync-probe", "0.1"]
    out = run_store_bench(tmp_path, "group-commit", *args, "--commitlog-file-size", "1M")
    assert [r["writers"] for r in out["runs"]] == [1, 4]
    for run in out["runs"]:
        assert run["puts"] > 0
        assert 0 < run["flushes"] <= run["puts"]  # every put waited for a flush of its own or
        assert run["puts_per_flush"] >= 1  # one shared with others
        assert run["fsync_per_write_s"] > 0
    assert out["runs"][0]["puts_per_flush"] == 1  # one writer: nothing to share a flush with
    # best and spread are over the runs of one writer count (the most), not across counts
    summary = out["summary"]
    assert summary["best"] == summary["worst"] == pytest.approx(out["runs"][1]["puts_per_s"], abs=1)
    assert summary["spread_pct"] == 0
    assert list(tmp_path.iterdir()) == []  # the stores were removed


def test_store_recover_times_each_variant_and_checks_the_store(tmp_path: Path) -> None:
    """``mqbench store recover`` fills a store, then opens it after each simulated shutdown and
    fails unless the log end and every queue's size come back (``crash-index``: the index
    lost its newest entries behind a saved header and slots)."""
    args = ["--size", "2M", "--commitlog-file-size", "1M"]
    variants = ("clean", "crash", "crash-index", "crash-rescan")
    out = run_store_bench(tmp_path, "recover", *args, *(f"--variant={v}" for v in variants))
    (run,) = out["runs"]
    assert [t["variant"] for t in run["variants"]] == list(variants)
    assert all(t["seconds"] > 0 for t in run["variants"])
    assert list(tmp_path.iterdir()) == []  # the store was removed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["produce", "--namesrv", "garbage"], "Invalid value for '--namesrv'"),
        (["consume", "--topic", "bad topic!"], "Invalid value for '--topic'"),
        (["store", "put", "--commitlog-file-size", "1K"], "less than the minimum of 4096"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [MQBENCH, *args], capture_output=True, text=True, timeout=LIMIT_S, check=False
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_store_bench_failure_under_trio_is_one_line(tmp_path: Path) -> None:
    """The put fails inside the trio nursery (a body over 4 MiB): one ``Error:`` line, not an
    exception group's traceback."""
    args = ["--count", "2", "--body-size", str(5 << 20), "--commitlog-file-size", "16M"]
    proc = subprocess.run(
        [MQBENCH, "store", "put", *args, "--json", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"Error: put failed: MESSAGE_ILLEGAL body of {5 << 20} bytes exceeds 4194304"
    ]
    assert list(tmp_path.iterdir()) == []


def test_sigterm_stops_the_run_and_leaves_no_server_or_store(tmp_path: Path) -> None:
    """``kill``, ``timeout`` or a cancelled CI job: handled as Ctrl+C, so the started name
    server and broker are stopped and their temporary store removed."""
    clusters = tmp_path / "clusters"
    argv = [MQBENCH, "produce", "--count", "100000000", *SMALL, "--dir", str(clusters)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not list(clusters.glob("*/store/commitlog")):  # the broker is up
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.05)
        servers = servers_of(proc.pid)
        assert len(servers) == 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert "Aborted!" in err
    assert not [pid for pid in servers if alive(pid)]
    assert list(clusters.iterdir()) == []


def servers_of(pid: int) -> list[int]:
    """The ``mqnamesrv`` and ``mqbroker`` children of ``pid`` (Linux ``/proc``)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"mqnamesrv" in cmdline or b"mqbroker" in cmdline:
                out.append(int(child))
    return out
