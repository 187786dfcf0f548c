"""``mqbench`` against a running cluster (``--namesrv``) of two brokers that other clients use
too: a name server and brokers ``broker-a`` and ``broker-b`` as real processes, the benchmarks
as real ``mqbench`` processes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import client
from client.bench.cluster import BROKER_BOOT, _start, console_script, local_cluster, stop_process
from client.bench.runner import fill_topic
from common.benchkit import NullProgress

MQBENCH = str(Path(sys.executable).parent / "mqbench")
LIMIT_S = 90
FILE_SIZE = str(16 << 20)


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A name server with two brokers (``broker-a``, ``broker-b``): each numbers its queues of
    a topic from 0."""
    root = tmp_path_factory.mktemp("two_brokers")
    with local_cluster(commitlog_file_size=int(FILE_SIZE), parent=root) as cluster:
        argv = [console_script("mqbroker"), "-n", cluster.namesrv, "--bindAddress", "127.0.0.1"]
        argv += ["--listenPort", "0", "--brokerIP1", "127.0.0.1", "--brokerName", "broker-b"]
        argv += ["--storePathRootDir", str(root / "store-b"), "--diskMaxUsedSpaceRatio", "95"]
        argv += ["--mappedFileSizeCommitLog", FILE_SIZE]
        broker_b, _ = _start(argv, "mqbroker", root / "broker-b.log", BROKER_BOOT)
        try:
            yield cluster.namesrv
        finally:
            stop_process(broker_b)


def run_bench(namesrv: str, *args: str) -> tuple[int, dict[str, Any], str]:
    """Run ``mqbench <args> --namesrv <namesrv> --json``: exit code, JSON object, stderr."""
    proc = subprocess.run(
        [MQBENCH, *args, "--namesrv", namesrv, "--json"],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, (proc.stdout, proc.stderr)
    out: dict[str, Any] = json.loads(lines[0])
    return proc.returncode, out, proc.stderr


def create_on_both_brokers(namesrv: str, topic: str) -> None:
    """Create ``topic`` on every broker (an auto-created topic may land on one broker only)."""
    argv = [console_script("mqadmin"), "updateTopic", "-n", namesrv, "-c", "DefaultCluster"]
    argv += ["-t", topic, "-r", "4", "-w", "4"]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert brokers_of(namesrv, topic) == {"broker-a", "broker-b"}


def brokers_of(namesrv: str, topic: str) -> set[str]:
    """The brokers holding queues of ``topic``."""
    with client.PullConsumer(group=f"probe_{os.getpid()}", namesrv=namesrv) as probe:
        return {mq.broker_name for mq in probe.fetch_queues(topic)}


def test_a_fill_ranges_each_brokers_queues_apart(namesrv: str) -> None:
    create_on_both_brokers(namesrv, "TwoBrokersFill")
    ranges = fill_topic(namesrv, "TwoBrokersFill", 300, body_size=16, progress=NullProgress())
    assert {broker for broker, _ in ranges} == {"broker-a", "broker-b"}
    assert sum(end - begin for begin, end in ranges.values()) == 300


def test_consume_counts_each_brokers_queues_apart(namesrv: str) -> None:
    """Queue 0 of broker-a and queue 0 of broker-b are two queues: the fill's ranges of one
    do not stand for the other (the run waited for messages that were never written)."""
    create_on_both_brokers(namesrv, "TwoBrokers")
    code, out, err = run_bench(namesrv, "consume", "--topic", "TwoBrokers", "--count", "400")
    assert code == 0, err
    assert out["msgs"] == 400


def test_push_counts_each_brokers_queues_apart(namesrv: str) -> None:
    create_on_both_brokers(namesrv, "TwoBrokersPush")
    code, out, err = run_bench(namesrv, "push", "--topic", "TwoBrokersPush", "--count", "400")
    assert code == 0, err
    assert out["msgs"] == 400


class StampedTraffic:
    """Another client sending to a topic until stopped: messages that start with the current
    ``time.time_ns()`` like a latency benchmark's (another run of it, say)."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.stop = threading.Event()
        self.sent = 0
        self._producer = client.Producer(group=f"other_{os.getpid()}", namesrv=namesrv)
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StampedTraffic:
        self._producer.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(LIMIT_S)
        self._producer.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            body = struct.pack("<q", time.time_ns()) + bytes(56)
            self._producer.send(client.Message(self._topic, body))
            self.sent += 1


def test_latency_counts_only_its_own_producers_messages(namesrv: str) -> None:
    """Other stamped messages on the topic during the run are neither received messages nor
    latency samples of the run: every sent message is received once, none lost."""
    topic = "LatencyShared"
    with StampedTraffic(namesrv, topic) as other:
        code, out, err = run_bench(
            namesrv, "latency", "--topic", topic, "--rate", "100", "--duration", "1"
        )
    assert code == 0, err
    assert other.sent > 0
    assert out["sent"] == 100
    assert out["msgs"] == out["requests"] == 100
    assert (out["lost"], out["duplicates"]) == (0, 0)
    assert out["foreign"] > 0
