"""``mqbench spark-read`` as a real process against a running cluster (``--namesrv``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.cluster import SyncCluster
from tests.spark.test_connector import produce

pytest.importorskip("pyspark")  # installed by the spark extra; see conftest

MQBENCH = str(Path(sys.executable).parent / "mqbench")
LIMIT_S = 240


def test_spark_read_counts_only_the_fill_of_a_small_topic_that_held_messages(
    cluster: SyncCluster,
) -> None:
    """A fill of fewer than 1,000 messages a queue (the warm-up read's share) on a topic that
    already held messages: both reads stay within the queues and count the fill, not the
    topic's older messages."""
    topic = "BenchSparkReadSmall"
    cluster.create_topic(topic, {"broker-a": 2, "broker-b": 2})
    produce(cluster.namesrv, topic, {("broker-a", 0): 3, ("broker-b", 1): 2})
    argv = [MQBENCH, "spark-read", "--namesrv", cluster.namesrv, "--topic", topic]
    argv += ["--count", "200", "--reads", "1", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=LIMIT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert (out["rows"], out["expected_rows"]) == (200, 200)
