"""minimq end to end on one machine: ``make demo`` (or ``.venv/bin/python examples/demo.py``).

1. starts ``mqnamesrv`` and ``mqbroker`` (console scripts of this Python's environment) with the
   broker's store and both servers' logs under ``./data``;
2. creates a topic (``UPDATE_AND_CREATE_TOPIC``, what ``mqadmin updateTopic`` sends);
3. produces sample messages with the blocking ``Producer``;
4. consumes them with a ``PushConsumer``;
5. reads the topic into Spark and prints a summary, when pyspark, Java and the Spark connector
   are present (``--no-spark`` skips it; otherwise the reason it was skipped is printed);
6. stops both servers with SIGTERM (by pid) and waits for their clean exit.

Exit code 0 when every step that ran succeeded.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

from client import ConsumeFrom, ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand

BOOT_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 60.0
NAMESRV_BOOT = re.compile(r"The Name Server boot success\. listening on [^:]+:(\d+)")
BROKER_BOOT = re.compile(r"The broker\[([^,\]]+), ([^\]]+)\] boot success\..*")


def say(text: str) -> None:
    """One line of demo output."""
    print(f"[demo] {text}", flush=True)


class Servers:
    """Server processes started by the demo, stopped by pid in reverse order."""

    def __init__(self, bin_dir: Path, logs: Path) -> None:
        self.bin_dir = bin_dir
        self.logs = logs
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, args: Sequence[str], boot: re.Pattern[str]) -> re.Match[str]:
        """Start ``<bin_dir>/<args[0]>``; its stderr goes to ``logs/<name>.log``; wait for the
        boot line on stdout and return its match."""
        log = self.logs / f"{name}.log"
        with log.open("ab") as stderr:
            proc = subprocess.Popen(
                [str(self.bin_dir / args[0]), *args[1:]], stdout=subprocess.PIPE, stderr=stderr
            )
        self.procs.append((name, proc))
        line = _read_line(proc, BOOT_TIMEOUT_S)
        match = boot.fullmatch(line)
        if match is None:
            raise RuntimeError(f"{name} did not boot ({line!r}); see {log}")
        say(f"{name} started (pid {proc.pid}): {line}")
        return match

    def stop_all(self) -> bool:
        """SIGTERM each process by pid, newest first, and wait; True if all exited with 0."""
        clean = True
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            try:
                code = proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                code = proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            say(f"{name} stopped (exit code {code})")
            clean = clean and code == 0
        self.procs.clear()
        return clean


def _read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The first stdout line of ``proc``, within ``timeout_s``."""
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError(f"no boot line within {timeout_s} s")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"exited early with code {proc.wait()}")
        buf += chunk
    return buf.split(b"\n", 1)[0].decode()


@contextmanager
def servers_under(data: Path) -> Iterator[Servers]:
    """A :class:`Servers` whose processes are stopped on the way out, whatever happens."""
    logs = data / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    servers = Servers(Path(sys.executable).parent, logs)
    try:
        yield servers
    finally:
        servers.stop_all()


async def _create_topic(broker: str, topic: str, queues: int) -> None:
    fields: dict[str, ExtValue] = {
        "topic": topic,
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
    }
    cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields, opaque=0)
    async with RemotingClient(default_timeout_s=10) as client:
        resp = await client.invoke(broker, cmd)
    if resp.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"creating topic {topic} failed: {resp.remark}")


def produce(namesrv: str, topic: str, count: int) -> Counter[int]:
    """Send ``count`` sample orders; the number sent to each queue."""
    per_queue: Counter[int] = Counter()
    with Producer(group="demo-producer", namesrv=namesrv) as producer:
        for i in range(count):
            order = {"order": i, "amount": round(10 + i * 1.5, 2)}
            tags = "paid" if i % 3 == 0 else "created"
            msg = Message(topic, json.dumps(order).encode(), tags=tags, keys=[f"order-{i}"])
            result = producer.send(msg, timeout=10)
            per_queue[result.queue.queue_id] += 1
    return per_queue


def consume(namesrv: str, topic: str, count: int) -> list[ReceivedMessage]:
    """Receive ``count`` messages of ``topic`` with a push consumer."""
    got: list[ReceivedMessage] = []
    lock, done = threading.Lock(), threading.Event()

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            got.extend(msgs)
            if len({m.msg_id for m in got}) >= count:
                done.set()
        return ConsumeResult.SUCCESS

    with PushConsumer(
        group="demo-push", namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe(topic, "*", handle)
        if not done.wait(CONSUME_TIMEOUT_S):
            raise RuntimeError(f"consumed {len(got)} of {count} messages")
    return got


def spark_unavailable() -> str | None:
    """Why the Spark step cannot run here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'minimq[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java found (Spark needs Java 17+)"
    try:
        importlib.import_module("client.spark")
    except ImportError as exc:
        return f"the Spark connector cannot be imported ({exc})"
    return None


def spark_summary(namesrv: str, topic: str) -> None:
    """Read ``topic`` with ``spark.read.format("minimq")`` and print a summary."""
    from pyspark.sql import SparkSession

    connector: Any = importlib.import_module("client.spark")
    # Spark's Python workers must run this interpreter: it is the one with minimq installed
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the demo's brokers are on loopback
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("minimq-demo")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        connector.register(spark)
        df = spark.read.format("minimq").option("namesrv", namesrv).option("topic", topic).load()
        say(f"spark: {df.count()} rows in {topic}")
        df.groupBy("tags").count().orderBy("tags").show()
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--data-dir", default="data", help="store and logs (default ./data)")
    parser.add_argument("--topic", default="DemoOrders")
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark step")
    args = parser.parse_args(argv)
    data = Path(args.data_dir).resolve()

    with servers_under(data) as servers:
        match = servers.start(
            "namesrv",
            ["mqnamesrv", "--listenPort", "0", "--bindAddress", "127.0.0.1"],
            NAMESRV_BOOT,
        )
        namesrv = f"127.0.0.1:{match[1]}"
        broker_args = [
            *("mqbroker", "-n", namesrv, "--bindAddress", "127.0.0.1"),
            *("--listenPort", "0", "--brokerIP1", "127.0.0.1"),
            *("--storePathRootDir", str(data / "store")),
        ]
        broker = servers.start("broker", broker_args, BROKER_BOOT)[2]

        trio.run(_create_topic, broker, args.topic, 4)
        say(f"topic {args.topic} created on {broker} (4 queues)")
        per_queue = produce(namesrv, args.topic, args.messages)
        say(f"produced {args.messages} messages; per queue: {dict(sorted(per_queue.items()))}")
        got = consume(namesrv, args.topic, args.messages)
        tags = Counter(m.tags for m in got)
        say(f"push consumer received {len({m.msg_id for m in got})} messages; tags: {dict(tags)}")

        reason = "--no-spark" if args.no_spark else spark_unavailable()
        spark_ok = True
        if reason is None:
            try:
                spark_summary(namesrv, args.topic)
            except Exception as exc:  # noqa: BLE001 - report it, still stop the servers cleanly
                say(f"Spark step failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                spark_ok = False
        else:
            say(f"Spark step skipped: {reason}")

        clean = servers.stop_all()
    say("done" if clean and spark_ok else "done, with failures")
    return 0 if clean and spark_ok else 1


if __name__ == "__main__":
    sys.exit(main())
