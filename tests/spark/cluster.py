"""A real name server and brokers for the Spark tests, as processes of the console scripts.

Spark's worker processes reach them over 127.0.0.1; the tests themselves are plain sync code
(the SparkSession is blocking), so this helper is sync too.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from client.bench.cluster import BROKER_BOOT, NAMESRV_BOOT, _start, console_script, stop_process
from tests.broker.inprocess import SMALL_STORE
from tests.e2e.cluster import create_topic

LIMIT = 20.0


@dataclass
class SyncCluster:
    """A name server and named brokers (name -> address)."""

    root: Path
    namesrv: str = ""
    brokers: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    by_name: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start_namesrv(self, extra_args: Sequence[str] = ()) -> None:
        """Start ``mqnamesrv`` on an ephemeral port (``extra_args``: e.g. ``-c FILE``)."""
        argv = [console_script("mqnamesrv"), *extra_args]
        argv += ["--listenPort", "0", "--bindAddress", "127.0.0.1"]
        proc, m = _start(argv, "mqnamesrv", self.root / "namesrv.log", NAMESRV_BOOT)
        self.procs.append(proc)
        self.namesrv = f"127.0.0.1:{m[1]}"

    def start_broker(self, name: str, overrides: Mapping[str, str] | None = None) -> str:
        """Start ``mqbroker`` ``name``; returns its address."""
        settings = {
            "brokerName": name,
            "listenPort": "0",
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(self.root / name),
            **SMALL_STORE,
            **(overrides or {}),
        }
        argv = [console_script("mqbroker"), "-n", self.namesrv, "--bindAddress", "127.0.0.1"]
        argv += itertools.chain.from_iterable((f"--{k}", v) for k, v in settings.items())
        proc, m = _start(argv, f"mqbroker {name}", self.root / f"{name}.log", BROKER_BOOT)
        self.procs.append(proc)
        self.by_name[name] = proc
        self.brokers[name] = f"127.0.0.1:{m[2]}"
        return self.brokers[name]

    def stop_broker(self, name: str, *, kill: bool = False) -> None:
        """Stop broker ``name`` by pid: SIGTERM (it unregisters from the name server), or
        with ``kill`` SIGKILL (the name server drops it when its connection closes)."""
        proc = self.by_name[name]
        if kill and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(LIMIT)
        stop_process(proc)

    def freeze_broker(self, name: str, *, frozen: bool = True) -> None:
        """SIGSTOP broker ``name`` (SIGCONT with ``frozen=False``): its connections stay open,
        so its route stays at the name server while nothing answers, as in a partition."""
        proc = self.by_name[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def create_topic(self, topic: str, queues: Mapping[str, int]) -> None:
        """Create ``topic`` with ``queues[broker]`` queues on each named broker."""
        for broker, n in queues.items():
            trio.run(create_topic, self.brokers[broker], topic, n)

    def close(self) -> None:
        """Stop every process by pid (a frozen one is let go on first)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
            stop_process(proc)


@contextlib.contextmanager
def sync_cluster(
    root: Path, brokers: Mapping[str, Mapping[str, str]], namesrv_args: Sequence[str] = ()
) -> Iterator[SyncCluster]:
    """A name server (started with ``namesrv_args``) plus one broker per entry of
    ``brokers`` (name -> extra settings)."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = SyncCluster(root)
    try:
        cluster.start_namesrv(namesrv_args)
        for name, overrides in brokers.items():
            cluster.start_broker(name, overrides)
        yield cluster
    finally:
        cluster.close()


def wait_for(cond: Callable[[], bool], what: str, limit: float = LIMIT) -> None:
    """Check ``cond`` every 50 ms until true; fail after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
