"""The plain-ACL mqadmin commands end to end: real ``mqnamesrv`` and ``mqbroker`` processes
(``aclEnable=true``), ``mqadmin`` run as a program, signed with an admin account."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from tests.broker.test_acl import ACCOUNTS, ADMIN, READER, write_accounts
from tests.broker.test_broker_process import small_broker_args
from tests.processes import (
    BROKER_BOOT,
    REPO,
    read_log,
    start_namesrv,
    start_process,
    stop_process,
)

CLUSTER = "DefaultCluster"
NEW_SECRET = "newcomer-secret"


@asynccontextmanager
async def acl_cluster(tmp_path: Path) -> AsyncIterator[tuple[str, str, Path]]:
    """A name server and a broker with ACL on: (name server, broker address, ACL file)."""
    stderr_path = tmp_path / "stderr.log"
    acl_file = write_accounts(tmp_path / "acl" / "plain_acl.yml", ACCOUNTS)
    procs: list[trio.Process] = []
    try:
        ns, ns_addr = await start_namesrv(stderr_path)
        procs.append(ns)
        args = ["broker", *small_broker_args(ns_addr, tmp_path / "store")]
        args += ["--aclEnable", "true", "--aclFileFullPath", str(acl_file)]
        broker, match = await start_process(args, stderr_path, BROKER_BOOT)
        procs.append(broker)
        yield ns_addr, f"127.0.0.1:{match[1]}", acl_file
    finally:
        for proc in reversed(procs):
            await stop_process(proc)


async def mqadmin(ns: str, *args: str, as_admin: bool = True) -> tuple[int, str, str]:
    """``mqadmin <args> -n ns``, signed with ADMIN (else READER): exit code, stdout, stderr."""
    creds = ADMIN if as_admin else READER
    env = {
        **os.environ,
        "MINIMQ_ACCESS_KEY": creds.access_key,
        "MINIMQ_SECRET_KEY": creds.secret_key,
    }
    proc = await trio.run_process(
        [sys.executable, "-m", "client.admin.cli", *args, "-n", ns],
        cwd=REPO,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def ok_json(ns: str, *args: str) -> Any:
    code, out, err = await mqadmin(ns, *args, "--json")
    assert code == 0, err
    assert NEW_SECRET not in out
    return json.loads(out)


async def fails(ns: str, *args: str, as_admin: bool = True) -> str:
    code, out, err = await mqadmin(ns, *args, as_admin=as_admin)
    assert code == 1, (out, err)
    assert out == ""
    assert err.count("\n") == 1, err
    return err


async def test_acl_commands_against_a_real_broker(tmp_path: Path) -> None:
    async with acl_cluster(tmp_path) as (ns, addr, acl_file):
        account = ["-a", "newcomer1", "-s", NEW_SECRET, "-t", "Orders=PUB", "-m", "false"]
        done = await ok_json(ns, "updateAclConfig", "-c", CLUSTER, *account)
        assert done == {
            "account": {
                "accessKey": "newcomer1",
                "secretKey": "******",
                "admin": False,
                "topicPerms": ["Orders=PUB"],
            },
            "brokers": [addr],
        }
        assert "newcomer1" in acl_file.read_text()

        configs = await ok_json(ns, "getAclConfig", "-b", addr)
        assert list(configs) == [addr]
        accounts = {a["accessKey"]: a for a in configs[addr]["plainAccessConfigs"]}
        assert set(accounts) == {"producer1", "reader01", "rocketmq2", "newcomer1"}
        assert {a["secretKey"] for a in accounts.values()} == {"******"}
        assert accounts["newcomer1"]["topicPerms"] == ["Orders=PUB"]

        versions = await ok_json(ns, "clusterAclConfigVersion", "-c", CLUSTER)
        assert len(versions) == 1
        row = versions[0]
        assert (row["clusterName"], row["brokerAddr"], row["aclFilePath"]) == (
            CLUSTER,
            addr,
            str(acl_file),
        )
        assert row["aclConfigVersionNum"] == 1
        assert row["brokerName"] == "broker-a"

        white = await ok_json(ns, "updateGlobalWhiteAddr", "-b", addr, "-g", "127.0.0.1,10.0.0.*")
        assert white == {"globalWhiteRemoteAddresses": ["127.0.0.1", "10.0.0.*"], "brokers": [addr]}

        code, out, err = await mqadmin(ns, "getAclConfig", "-c", CLUSTER)
        assert code == 0, err
        assert f"============{addr}============" in out
        assert "globalWhiteRemoteAddresses: [127.0.0.1, 10.0.0.*]" in out
        assert "#AccessKey" in out
        assert "newcomer1" in out
        for secret in (NEW_SECRET, ADMIN.secret_key, READER.secret_key):
            assert secret not in out

        code, out, err = await mqadmin(ns, "clusterAclConfigVersion", "-b", addr)
        assert code == 0, err
        assert "#AclConfigVersionNum" in out
        assert str(acl_file) in out

        code, out, err = await mqadmin(ns, "deleteAccessConfig", "-b", addr, "-a", "newcomer1")
        assert code == 0, err
        assert f"delete plain access config account from {addr} success." in out
        assert "newcomer1" not in acl_file.read_text()

        err = await fails(ns, "deleteAclConfig", "-b", addr, "-a", ADMIN.access_key)
        assert "cannot delete itself" in err
        err = await fails(ns, "updateAclConfig", "-b", addr, "-a", "newuser1", "-s", "short")
        assert "secretKey must be text longer than 6 characters" in err
        err = await fails(ns, "getAclConfig", "-b", addr, as_admin=False)
        assert "needs an admin account" in err
        versions = await ok_json(ns, "clusterAclConfigVersion", "-b", addr)
        assert versions[0]["aclConfigVersionNum"] == 3  # the refusals changed nothing

        log = read_log(tmp_path / "stderr.log")
        assert "ACL admin: account 'newcomer1' set by accessKey 'rocketmq2'" in log
        assert "ACL admin: delete account refused" in log
        for secret in (NEW_SECRET, READER.secret_key, "short"):
            assert secret not in log
