"""``mqbench`` against a broker with ACL on (real processes): its clients sign with the
account of ``--access-key/--secret-key`` or ``MINIMQ_ACCESS_KEY/MINIMQ_SECRET_KEY``; without
one the run fails with the broker's refusal; the secret shows nowhere."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import trio

from client.admin.base import ACCESS_KEY_ENV, SECRET_KEY_ENV
from tests.broker.test_acl import READER, TOPIC, acl_overrides, create_topic, write_accounts
from tests.client.test_bench_cli import LIMIT_S, MQBENCH
from tests.spark.cluster import sync_cluster

COUNT = "40"


def bench(namesrv: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``mqbench <args> --namesrv namesrv --topic Orders --json``: exit code, stdout, stderr."""
    clean = {k: v for k, v in os.environ.items() if k not in (ACCESS_KEY_ENV, SECRET_KEY_ENV)}
    proc = subprocess.run(
        [MQBENCH, *args, "--namesrv", namesrv, "--topic", TOPIC, "--json"],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
        env={**clean, **(env or {})},
    )
    return proc.returncode, proc.stdout, proc.stderr


def result(code: int, out: str, err: str) -> dict[str, Any]:
    assert code == 0, err
    parsed: dict[str, Any] = json.loads(out)
    return parsed


def test_mqbench_signs_with_the_given_account(tmp_path: Path) -> None:
    acl_file = write_accounts(tmp_path / "plain_acl.yml")
    broker = {**acl_overrides(acl_file), "diskMaxUsedSpaceRatio": "95"}
    with sync_cluster(tmp_path / "cluster", {"broker-a": broker}) as cluster:
        trio.run(create_topic, cluster.brokers["broker-a"], TOPIC)
        ns = cluster.namesrv
        from_env = {ACCESS_KEY_ENV: READER.access_key, SECRET_KEY_ENV: READER.secret_key}
        produced = bench(ns, "produce", "--count", COUNT, env=from_env)
        consumed = bench(
            ns, "consume", "--count", COUNT,
            "--access-key", READER.access_key, "--secret-key", READER.secret_key,
        )  # fmt: skip
        unsigned = bench(ns, "produce", "--count", COUNT)
        half = bench(ns, "produce", "--count", COUNT, "--access-key", READER.access_key)
    assert result(*produced)["msgs"] == int(COUNT)
    assert result(*consumed)["msgs"] == int(COUNT)
    assert unsigned[0] != 0
    assert "AccessKey missing" in unsigned[2]
    assert half[0] == 2
    assert "give both --access-key and --secret-key" in half[2]
    for _code, out, err in (produced, consumed, unsigned, half):
        assert READER.secret_key not in out + err
