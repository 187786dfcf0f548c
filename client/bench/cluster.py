"""A throw-away local cluster for the client benchmarks: one name server and one broker.

Both run as real processes of the venv's console scripts (``mqnamesrv``, ``mqbroker`` next to
``sys.executable``) on 127.0.0.1 with ports the kernel picks; the ports come from their boot
lines. The broker's store lives in a temporary directory removed afterwards. Processes are
stopped by pid (SIGTERM, then SIGKILL after a grace period) however the block ends; on Linux
they also get SIGTERM from the kernel if ``mqbench`` itself dies (``PR_SET_PDEATHSIG``), so even
a SIGKILLed run leaves no server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BOOT_LIMIT_S = 30.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_GRACE_S = 5.0

NAMESRV_BOOT = re.compile(r"The Name Server boot success\. listening on 127\.0\.0\.1:(\d+)")
BROKER_BOOT = re.compile(
    r"The broker\[([^,\]]+), 127\.0\.0\.1:(\d+)\] boot success\. "
    r"serializeType=MSGPACK and name server is (.+)"
)

FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")


class ClusterError(RuntimeError):
    """A cluster process did not start."""


@dataclass(slots=True)
class LocalCluster:
    """A running name server and broker (see :func:`local_cluster`)."""

    namesrv: str
    broker_addr: str
    namesrv_pid: int
    broker_pid: int
    root: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        """The pids of the cluster's processes."""
        return [self.namesrv_pid, self.broker_pid]


def console_script(name: str) -> str:
    """The path of the console script ``name`` installed next to ``sys.executable``."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise ClusterError(f"{name} is not installed in {path.parent} (pip install -e .)")
    return str(path)


def _read_boot_line(proc: subprocess.Popen[bytes], name: str, log: Path) -> str:
    """The first stdout line of ``proc``, within ``BOOT_LIMIT_S``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + BOOT_LIMIT_S
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise ClusterError(f"{name} did not boot in {BOOT_LIMIT_S:g} s; log: {log}")
            chunk = os.read(fd, 4096)
            if not chunk:
                tail = log.read_text(errors="replace")[-2000:]
                raise ClusterError(f"{name} exited early:\n{tail}")
            buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace")


def _die_with_parent() -> None:
    """In the child before exec: ask the kernel for SIGTERM when our parent dies (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _start(
    argv: list[str], name: str, log: Path, boot: re.Pattern[str]
) -> tuple[subprocess.Popen[bytes], re.Match[str]]:
    tie = _die_with_parent if sys.platform == "linux" else None
    with log.open("ab") as err:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=tie
        )
    try:
        line = _read_boot_line(proc, name, log)
        match = boot.fullmatch(line)
        if match is None:
            raise ClusterError(f"{name}: unexpected boot line {line!r}")
    except BaseException:
        stop_process(proc)
        raise
    return proc, match


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc`` by pid, SIGKILL it after ``STOP_GRACE_S``, reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@contextlib.contextmanager
def local_cluster(
    *,
    flush: str = "ASYNC_FLUSH",
    commitlog_file_size: int | None = None,
    parent: Path | None = None,
    keep: bool = False,
) -> Iterator[LocalCluster]:
    """Start a name server and a broker (``flushDiskType`` = ``flush``); stop both afterwards.

    The store (and both processes' stderr logs) go under a fresh temporary directory in
    ``parent`` (default: the system's temporary directory), removed afterwards unless ``keep``.
    """
    if flush not in FLUSH_TYPES:
        raise ValueError(f"flush must be one of {FLUSH_TYPES}")
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="mqbench-cluster-", dir=parent))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ns, m = _start(
            [console_script("mqnamesrv"), "--listenPort", "0", "--bindAddress", "127.0.0.1"],
            "mqnamesrv",
            root / "namesrv.log",
            NAMESRV_BOOT,
        )
        procs.append(ns)
        namesrv = f"127.0.0.1:{m[1]}"
        argv = [console_script("mqbroker"), "-n", namesrv, "--bindAddress", "127.0.0.1"]
        argv += ["--listenPort", "0", "--brokerIP1", "127.0.0.1"]
        argv += ["--storePathRootDir", str(root / "store"), "--flushDiskType", flush]
        if commitlog_file_size is not None:
            argv += ["--mappedFileSizeCommitLog", str(commitlog_file_size)]
        broker, m = _start(argv, "mqbroker", root / "broker.log", BROKER_BOOT)
        procs.append(broker)
        yield LocalCluster(
            namesrv=namesrv,
            broker_addr=f"127.0.0.1:{m[2]}",
            namesrv_pid=ns.pid,
            broker_pid=broker.pid,
            root=root,
            procs=procs,
        )
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
