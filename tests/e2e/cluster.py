"""Real minimq clusters for the end-to-end tests, and helpers for the blocking client.

- Every process starts through its console script (``mqnamesrv``, ``mqbroker`` next to
  ``sys.executable``), bound to 127.0.0.1 on port 0 (the boot line carries the bound port),
  with its store under the test's ``tmp_path``, small store files and one stderr log each.
- :func:`running_cluster` kills every process still running by pid when the block ends,
  whatever happened inside it.
- The blocking client runs its own loop thread, so trio tests call it from a worker thread
  (:func:`in_thread`); waits are bounded by deadlines, never by sleeping and hoping.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from client import PullConsumer, ReceivedMessage
from common.route import PermName
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import SMALL_STORE
from tests.processes import (
    BROKER_BOOT_ANY,
    NAMESRV_BOOT,
    console_script,
    read_log,
    start_command,
    stop_process,
)

T = TypeVar("T")

LIMIT = 20.0
"""Upper bound of any single wait for a condition."""


@dataclass(eq=False)
class BrokerProc:
    """One running (or stopped) ``mqbroker`` process and how to start it again."""

    name: str
    store: Path
    overrides: dict[str, str]
    log: Path
    proc: trio.Process
    port: int

    @property
    def addr(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"


@dataclass(eq=False)
class Cluster:
    """A name server and brokers under ``root``; every process ever started is in ``procs``."""

    root: Path
    namesrv_addr: str = ""
    brokers: dict[str, BrokerProc] = field(default_factory=dict)
    procs: list[trio.Process] = field(default_factory=list)

    async def start_namesrv(self) -> str:
        """Start ``mqnamesrv`` on an ephemeral port, its KV config under ``root``; returns and
        remembers its address."""
        conf = self.root / "namesrv.properties"
        conf.write_text(f"kvConfigPath={self.root / 'kvConfig.json'}\n", encoding="utf-8")
        argv = [console_script("mqnamesrv"), "-c", str(conf), "--listenPort", "0"]
        argv += ["--bindAddress", "127.0.0.1"]
        proc, match = await start_command(argv, self.root / "namesrv.log", NAMESRV_BOOT)
        self.procs.append(proc)
        self.namesrv_addr = f"127.0.0.1:{match[1]}"
        return self.namesrv_addr

    async def start_broker(
        self, name: str, overrides: Mapping[str, str] | None = None, *, port: int = 0
    ) -> BrokerProc:
        """Start ``mqbroker`` named ``name`` (store ``root/<name>``) registered with the name
        server; ``overrides`` are extra ``--<key> <value>`` settings."""
        store, log = self.root / name, self.root / f"{name}.log"
        overrides = dict(overrides or {})
        proc, bound = await self._launch(name, store, log, port, overrides)
        broker = self.brokers[name] = BrokerProc(name, store, dict(overrides), log, proc, bound)
        return broker

    def broker_argv(
        self, name: str, store: Path, port: int, overrides: Mapping[str, str]
    ) -> list[str]:
        """The ``mqbroker`` command line of broker ``name`` on ``store`` and ``port``."""
        settings = {
            "brokerName": name,
            "listenPort": str(port),
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(store),
            **SMALL_STORE,
            **overrides,
        }
        return [
            console_script("mqbroker"),
            "-n",
            self.namesrv_addr,
            "--bindAddress",
            "127.0.0.1",
            *itertools.chain.from_iterable((f"--{k}", v) for k, v in settings.items()),
        ]

    async def _launch(
        self, name: str, store: Path, log: Path, port: int, overrides: Mapping[str, str]
    ) -> tuple[trio.Process, int]:
        argv = self.broker_argv(name, store, port, overrides)
        proc, match = await start_command(argv, log, BROKER_BOOT_ANY)
        self.procs.append(proc)
        assert match[1] == name, match[0]
        assert match[3] == self.namesrv_addr, match[0]
        return proc, int(match[2])

    async def restart_broker(self, broker: BrokerProc) -> bool:
        """Start a stopped broker again on its store, on its old port if that port can be
        bound again, else on a new ephemeral one. Returns True if the old port was reused."""
        assert broker.proc.returncode is not None, "stop the broker first"
        args = (broker.name, broker.store, broker.log)
        reused = True
        try:
            broker.proc, broker.port = await self._launch(*args, broker.port, broker.overrides)
        except AssertionError:
            if "cannot start" not in read_log(broker.log):
                raise
            reused = False
            broker.proc, broker.port = await self._launch(*args, 0, broker.overrides)
        return reused

    async def terminate(self, broker: BrokerProc) -> int:
        """SIGTERM the broker and return its exit code (within ``LIMIT``)."""
        broker.proc.send_signal(signal.SIGTERM)
        with trio.fail_after(LIMIT):
            return await broker.proc.wait()

    async def kill(self, broker: BrokerProc) -> None:
        """SIGKILL the broker and reap it: once this returns its sockets are closed."""
        broker.proc.send_signal(signal.SIGKILL)
        with trio.fail_after(LIMIT):
            await broker.proc.wait()

    async def aclose(self) -> None:
        """Kill (by pid) and reap every process still running, newest first."""
        for proc in reversed(self.procs):
            await stop_process(proc)


@asynccontextmanager
async def running_cluster(
    tmp_path: Path, brokers: Mapping[str, Mapping[str, str]]
) -> AsyncIterator[Cluster]:
    """A name server plus one broker per ``brokers`` entry (name -> extra settings)."""
    cluster = Cluster(tmp_path)
    try:
        await cluster.start_namesrv()
        for name, overrides in brokers.items():
            await cluster.start_broker(name, overrides)
        yield cluster
    finally:
        await cluster.aclose()


async def create_topic(broker_addr: str, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC on one broker (it re-registers before answering)."""
    header = {
        "topic": topic,
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": str(PermName.PERM_READ | PermName.PERM_WRITE),
    }
    async with RemotingClient(default_timeout_s=LIMIT) as client:
        cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header, opaque=0)
        resp = await client.invoke(broker_addr, cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking client code in a worker thread (abandoned if the test is cancelled)."""
    return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


RECOVERING = "recovering store"
"""The broker's log line as it starts recovering a store left by a crash."""
BOOTED = "serving on port"
"""The broker's log line once it listens."""


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its chain of causes, outermost first."""
    cur: BaseException | None = exc
    while cur is not None:
        yield cur
        cur = cur.__cause__


async def kill_when_logged(
    cluster: Cluster, broker: BrokerProc, line: str, delay_s: float = 0.0
) -> bool:
    """Start ``mqbroker`` on the broker's store and port; SIGKILL it ``delay_s`` after its log
    shows ``line`` (or at once if it exits first). Returns whether it had logged that it
    serves (:data:`BOOTED`)."""
    argv = cluster.broker_argv(broker.name, broker.store, broker.port, broker.overrides)
    before = len(read_log(broker.log))
    with broker.log.open("ab") as stderr:
        proc = await trio.lowlevel.open_process(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    cluster.procs.append(proc)
    await wait_until(
        lambda: line in read_log(broker.log)[before:] or proc.returncode is not None,
        f"the restarted broker logging {line!r}",
    )
    if delay_s > 0:
        await trio.sleep(delay_s)
    proc.kill()
    with trio.fail_after(20):
        await proc.wait()
    return BOOTED in read_log(broker.log)[before:]


async def wait_until(cond: Callable[[], bool], what: str, limit: float = LIMIT) -> None:
    """Check ``cond`` every 10 ms until it is true; fail after ``limit`` seconds."""
    with trio.move_on_after(limit):
        while True:
            if cond():
                return
            await trio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def poll_until(
    consumer: PullConsumer,
    done: Callable[[list[ReceivedMessage]], bool],
    limit: float = LIMIT,
    max_records: int | None = None,
) -> list[ReceivedMessage]:
    """Blocking: poll ``consumer`` until ``done(received so far)`` or ``limit`` seconds pass;
    returns everything received."""
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + limit
    while not done(got) and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout=0.5, max_records=max_records))
    return got


class IdsSeen:
    """A :func:`poll_until` condition: every msg_id of ``wanted`` has been received."""

    def __init__(self, wanted: Iterable[str]) -> None:
        self.missing = set(wanted)
        self._checked = 0

    def __call__(self, got: list[ReceivedMessage]) -> bool:
        for msg in got[self._checked :]:
            self.missing.discard(msg.msg_id)
        self._checked = len(got)
        return not self.missing
