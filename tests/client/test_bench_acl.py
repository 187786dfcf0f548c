"""``mqbench`` against a broker with ACL on (real processes): its clients sign with the
account of ``--access-key/--secret-key`` or ``MINIMQ_ACCESS_KEY/MINIMQ_SECRET_KEY``, else of
``$ROCKETMQ_HOME/conf/tools.yml`` (as ``mqadmin``); without one the run fails with the broker's
refusal; the secret shows nowhere."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import trio

from client.admin.base import ACCESS_KEY_ENV, ROCKETMQ_HOME_ENV, SECRET_KEY_ENV
from tests.broker.test_acl import READER, TOPIC, acl_overrides, create_topic, write_accounts
from tests.client.test_bench_cli import LIMIT_S, MQBENCH
from tests.spark.cluster import sync_cluster

COUNT = "40"


def bench(namesrv: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``mqbench <args> --namesrv namesrv --topic Orders --json``: exit code, stdout, stderr."""
    ours = (ACCESS_KEY_ENV, SECRET_KEY_ENV, ROCKETMQ_HOME_ENV)
    clean = {k: v for k, v in os.environ.items() if k not in ours}
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


def tools_home(path: Path, text: str) -> dict[str, str]:
    """``ROCKETMQ_HOME`` of a ``conf/tools.yml`` holding ``text``."""
    (path / "conf").mkdir(parents=True)
    (path / "conf" / "tools.yml").write_text(text)
    return {ROCKETMQ_HOME_ENV: str(path)}


def test_mqbench_signs_with_the_given_account(tmp_path: Path) -> None:
    acl_file = write_accounts(tmp_path / "plain_acl.yml")
    reader_yml = f"accessKey: {READER.access_key}\nsecretKey: {READER.secret_key}\n"
    home = tools_home(tmp_path / "home", reader_yml)
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
        from_tools = bench(ns, "produce", "--count", COUNT, env=home)
        wrong_tools = tools_home(tmp_path / "wrong", "accessKey: reader01\nsecretKey: nope-nope\n")
        given_wins = bench(ns, "produce", "--count", COUNT, env={**wrong_tools, **from_env})
    assert result(*produced)["msgs"] == int(COUNT)
    assert result(*from_tools)["msgs"] == int(COUNT)
    assert result(*given_wins)["msgs"] == int(COUNT)
    assert result(*consumed)["msgs"] == int(COUNT)
    assert unsigned[0] != 0
    assert "AccessKey missing" in unsigned[2]
    assert half[0] == 2
    assert "give both --access-key and --secret-key" in half[2]
    for _code, out, err in (produced, consumed, unsigned, half, from_tools, given_wins):
        assert READER.secret_key not in out + err


def test_mqbench_refuses_a_broken_tools_yml(tmp_path: Path) -> None:
    """A tools.yml that does not parse stops the run before any client starts (exit 2, the
    file named), as it stops mqadmin; no cluster is needed to see it."""
    home = tools_home(tmp_path / "home", "accessKey: [\n")
    code, _out, err = bench("127.0.0.1:1", "produce", "--count", COUNT, env=home)
    assert code == 2, err
    assert "tools.yml" in err
    assert "not valid YAML" in err
