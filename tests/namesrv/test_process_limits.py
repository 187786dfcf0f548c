"""``mqnamesrv`` raises its soft open-files limit to the hard limit at start, as the JVM that
runs RocketMQ's name server does (``-XX:+MaxFDLimit``): its connection cap is sized from it."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
import trio

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req
from tests.processes import (
    LOWERED_SOFT_NOFILE,
    NAMESRV_BOOT,
    console_script,
    open_files_limits,
    read_log,
    start_command,
    stop_process,
    with_lowered_soft_nofile,
)

pytestmark = pytest.mark.timeout(60)


async def test_namesrv_raises_its_open_files_limit_to_the_hard_limit(tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= LOWERED_SOFT_NOFILE:
        pytest.skip("no finite hard limit above the lowered soft one to raise to")
    stderr_path = tmp_path / "stderr.log"
    argv = [console_script("mqnamesrv"), "--listenPort", "0", "--bindAddress", "127.0.0.1"]
    proc, boot = await start_command(with_lowered_soft_nofile(argv), stderr_path, NAMESRV_BOOT)
    try:
        assert open_files_limits(proc.pid) == (hard, hard)
        assert f"raised from {LOWERED_SOFT_NOFILE} to {hard}" in read_log(stderr_path)
        with trio.fail_after(20):
            async with RemotingClient() as client:
                request = req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
                resp = await client.invoke(f"127.0.0.1:{boot[1]}", request)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await stop_process(proc)
