"""``mqbench produce|consume --queue-type``: the benchmark topic is created with that
``queue.type`` first (real processes: a name server, a broker, mqbench and its workers)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import trio

from client.admin.admin_client import AdminClient
from client.message import MessageQueue
from common.topic_attributes import QUEUE_TYPE
from remoting.codes import RequestCode
from tests.client.test_bench_cli import LIMIT_S, MQBENCH
from tests.spark.cluster import sync_cluster

TOPIC = "BenchBatchCQ"


def _bench(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MQBENCH, *args, "--namesrv", namesrv, "--topic", TOPIC, "--json"],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )


async def _attributes_and_max_offsets(namesrv: str, addr: str) -> tuple[dict[str, str], int]:
    async with AdminClient(namesrv) as admin:
        config = await admin.topic_config(addr, TOPIC)
        assert config is not None
        total = 0
        for qid in range(config.write_queue_nums):
            mq = MessageQueue(TOPIC, "broker-a", qid)
            total += await admin.offset(RequestCode.GET_MAX_OFFSET, mq)
        return dict(config.attributes), total


def test_produce_and_consume_a_batch_cq_topic(tmp_path: Path) -> None:
    with sync_cluster(tmp_path, {"broker-a": {"diskMaxUsedSpaceRatio": "95"}}) as c:
        produced = _bench(
            c.namesrv, "produce", "--queue-type", "BatchCQ", "--mode", "batch",
            "--batch", "16", "--count", "320",
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        out: dict[str, Any] = json.loads(produced.stdout)
        assert out["config"]["queue_type"] == "BatchCQ"
        assert out["msgs"] == 320
        attributes, total = trio.run(_attributes_and_max_offsets, c.namesrv, c.brokers["broker-a"])
        assert attributes == {QUEUE_TYPE: "BatchCQ"}
        assert total >= 320  # message offsets (the workers' warm-up messages too)

        consumed = _bench(c.namesrv, "consume", "--no-fill", "--count", "320")
        assert consumed.returncode == 0, consumed.stderr
        assert json.loads(consumed.stdout)["msgs"] == 320

        refused = _bench(c.namesrv, "produce", "--queue-type", "SimpleCQ", "--count", "10")
        assert refused.returncode != 0
        assert "unchangeable attribute" in refused.stderr
