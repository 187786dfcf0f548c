"""Spark test fixtures: one SparkSession (local[2], loopback only) and a real cluster.

pyspark and pyarrow come with the ``spark`` extra, which ``make test`` installs: their absence
is an error here, not a skip. Only a machine without java skips these tests.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.cluster import SyncCluster, sync_cluster

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

if shutil.which("java") is None:
    pytest.skip("java is not installed (Spark needs Java 17+)", allow_module_level=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One SparkSession for every Spark test, with format("minimq") registered."""
    from pyspark.sql import SparkSession

    from client.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("minimq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.log.level", "ERROR")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncCluster]:
    """A name server and brokers broker-a and broker-b; broker-a filters by SQL92
    (``enablePropertyFilter=true``), broker-b keeps RocketMQ's default and refuses it."""
    root: Path = tmp_path_factory.mktemp("spark-cluster")
    with sync_cluster(root, {"broker-a": {"enablePropertyFilter": "true"}, "broker-b": {}}) as c:
        yield c
