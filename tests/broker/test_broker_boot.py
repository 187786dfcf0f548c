"""A broker process while it starts: a signal stops it there, and a port it cannot bind ends
the start before any name server hears of it, with the setting named.

The name server here is a listening socket that accepts and never answers (a peer that
vanished behind a live TCP stack), so the broker's first registration round waits for its
full timeout.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import trio

from tests.processes import REPO, read_log, stop_process

LIMIT = 30.0


class SilentNameServer:
    """Accepts connections, reads what comes and never answers; counts the connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.connected = trio.Event()
        self.port = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._swallow, listeners)

    async def _swallow(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self.connected.set()
        while await stream.receive_some():
            pass


async def start_broker(
    tmp_path: Path, namesrv_port: int, *extra: str
) -> tuple[trio.Process, Path, Path]:
    """Start ``python -m broker`` with stdout and stderr in files; return it and the files."""
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    argv = [
        sys.executable,
        "-m",
        "broker",
        "-n",
        f"127.0.0.1:{namesrv_port}",
        "--bindAddress",
        "127.0.0.1",
        "--listenPort",
        "0",
        "--brokerIP1",
        "127.0.0.1",
        "--storePathRootDir",
        str(tmp_path / "store"),
        "--mappedFileSizeCommitLog",
        "1048576",
        *extra,
    ]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = await trio.lowlevel.open_process(argv, cwd=REPO, stdout=stdout, stderr=stderr)
    return proc, out, err


async def test_sigterm_while_registering_stops_before_boot_success(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        namesrv = SilentNameServer()
        await nursery.start(namesrv.run)
        proc, out, err = await start_broker(tmp_path, namesrv.port)
        try:
            with trio.fail_after(LIMIT):
                await namesrv.connected.wait()  # the first registration round has begun
                proc.send_signal(signal.SIGTERM)
                rc = await proc.wait()
        finally:
            await stop_process(proc)
        nursery.cancel_scope.cancel()
    log = read_log(err)
    assert rc == 0, log
    assert "received SIGTERM" in log
    assert "boot success" not in out.read_text(), "announced after the stop began"
    assert "serving on port" not in log
    assert not (tmp_path / "store" / "abort").exists(), "the store was not closed cleanly"


async def test_taken_metrics_port_is_named_and_no_name_server_hears_of_the_broker(
    tmp_path: Path,
) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        async with trio.open_nursery() as nursery:
            namesrv = SilentNameServer()
            await nursery.start(namesrv.run)
            proc, out, err = await start_broker(tmp_path, namesrv.port, "--metricsPort", str(port))
            try:
                with trio.fail_after(LIMIT):
                    rc = await proc.wait()
            finally:
                await stop_process(proc)
            nursery.cancel_scope.cancel()
    finally:
        taken.close()
    lines = read_log(err).strip().splitlines()
    assert rc == 1
    assert lines[-1].startswith("mqbroker: error: cannot start: "), lines
    assert f"metricsPort 127.0.0.1:{port}: " in lines[-1], lines[-1]
    assert namesrv.connections == 0, "registered a broker that never served"
    assert out.read_text() == ""


def test_taken_listen_port_is_named(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = subprocess.run(
            [
                sys.executable,
                *("-m", "namesrv", "--bindAddress", "127.0.0.1", "--listenPort", str(port)),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=LIMIT,
            check=False,
        )
    assert out.returncode == 1
    assert f"listenPort 127.0.0.1:{port}: " in out.stderr.strip().splitlines()[-1], out.stderr
