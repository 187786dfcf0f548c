"""ACL through the real programs: ``mqnamesrv`` with ``aclEnable`` refuses a malformed file,
refuses unsigned or non-admin writes from ``mqadmin``, takes ``--accessKey/--secretKey``,
``MINIMQ_*`` variables and ``$ROCKETMQ_HOME/conf/tools.yml``, and reloads on SIGHUP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from tests.broker.inprocess import wait_until
from tests.processes import NAMESRV_BOOT, REPO, read_log, start_process, stop_process

ADMIN_ONLY = """
accounts:
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: true
  - accessKey: normal01
    secretKey: normal-secret
    defaultTopicPerm: PUB|SUB
"""


def _conf(tmp_path: Path, acl_file: Path) -> Path:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(
        f"aclEnable=true\naclFileFullPath={acl_file}\nkvConfigPath={tmp_path / 'kv.json'}\n"
    )
    return conf


async def _mqadmin(ns: str, *extra: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    args = [sys.executable, "-m", "client.admin.cli", "updateKvConfig", "-n", ns]
    args += ["-s", "ns", "-k", "k", "-v", "v", *extra]
    proc = await trio.run_process(
        args,
        cwd=REPO,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, (proc.stdout + proc.stderr).decode()


def test_malformed_file_refuses_to_start(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts: [{accessKey: abcdefgh, secretKey: TOPSECRET1, admin: maybe}]")
    done = subprocess.run(
        [sys.executable, "-m", "namesrv", "-c", str(_conf(tmp_path, acl_file))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert f"cannot start: bad ACL file {acl_file}" in done.stderr
    assert "admin must be true or false" in done.stderr
    assert "TOPSECRET1" not in done.stderr


async def test_mqadmin_credentials_and_sighup_reload(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ADMIN_ONLY)
    acl_file.chmod(0o644)  # readable by others: warned about
    log = tmp_path / "namesrv.log"
    proc, boot = await start_process(
        [
            "namesrv",
            "-c",
            str(_conf(tmp_path, acl_file)),
            "--listenPort",
            "0",
            "--bindAddress",
            "127.0.0.1",
        ],
        log,
        NAMESRV_BOOT,
    )
    ns = f"127.0.0.1:{boot[1]}"
    try:
        assert "may be read by other users" in read_log(log)
        code, out = await _mqadmin(ns, env={"ROCKETMQ_HOME": str(tmp_path / "none")})
        assert code == 1
        assert "AccessKey missing" in out
        code, out = await _mqadmin(ns, "--accessKey", "normal01", "--secretKey", "normal-secret")
        assert code == 1
        assert "needs an admin account" in out
        code, out = await _mqadmin(ns, "--accessKey", "rocketmq2", "--secretKey", "12345678")
        assert code == 0, out
        env = {"MINIMQ_ACCESS_KEY": "rocketmq2", "MINIMQ_SECRET_KEY": "12345678"}
        code, out = await _mqadmin(ns, env=env)
        assert code == 0, out
        (tmp_path / "conf").mkdir()
        (tmp_path / "conf" / "tools.yml").write_text("accessKey: rocketmq2\nsecretKey: 12345678\n")
        code, out = await _mqadmin(ns, env={"ROCKETMQ_HOME": str(tmp_path)})
        assert code == 0, out
        # the admin loses its admin bit; SIGHUP reloads at once (no 5 s wait)
        acl_file.write_text(ADMIN_ONLY.replace("admin: true", "admin: false"))
        os.kill(proc.pid, signal.SIGHUP)
        await wait_until(lambda: "ACL reloaded" in read_log(log), "the SIGHUP reload")
        code, out = await _mqadmin(ns, env={"ROCKETMQ_HOME": str(tmp_path)})
        assert code == 1
        assert "needs an admin account" in out
        assert "12345678" not in read_log(log)
    finally:
        await stop_process(proc)
