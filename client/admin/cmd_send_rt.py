"""``mqadmin`` send round-trip checks: checkMsgSendRT and clusterRT (RocketMQ's
``CheckMsgSendRTCommand`` and ``CLusterSendMsgRTCommand``).

Both send ``-a`` messages of ``-s`` bytes (``a`` repeated) one after another, each waited for,
and time each send (ms). As RocketMQ's, the average leaves the first send out (it pays for the
connection and the route lookup) unless it is the only one; failed sends count in it too. A
send is not retried (it goes to one chosen queue).

- checkMsgSendRT sends to the topic's queues in turn (send ``i`` to queue ``i % queues``) and
  prints one row per send (``#Broker Name #QID #Send Result #RT``), then ``Avg RT``.
- clusterRT sends, for each broker of each cluster (``-c``: one), to queue 0 of that broker of
  :data:`RT_TOPIC` and prints ``#Cluster Name #Broker Name #RT #successCount #failCount``
  (or, with ``-p true``, RocketMQ's tlog lines ``time|machineRoom|cluster|broker|rt``). One
  round by default; ``-i seconds`` repeats it every that many seconds until Ctrl+C.

Either exits 1 (after printing everything) when a send failed, naming how many and the last
reason on stderr.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import click
import trio

from client.admin.admin_client import AdminClient
from client.admin.base import admin_command, emit_json, fail, lines, run, table
from client.errors import MQClientError
from client.message import Message, MessageQueue
from client.producer import Producer
from common.topic import BENCHMARK_TOPIC
from remoting.codes import ResponseCode

RT_TOPIC: Final = BENCHMARK_TOPIC
"""The topic clusterRT sends to: every minimq broker has it from the start. RocketMQ's sends to
the topic named after each broker (``brokerTopicEnable``), which minimq brokers do not have."""

CHECK_HEADERS = ("#Broker Name", "#QID", "#Send Result", "#RT")
CLUSTER_RT_HEADERS = ("#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount")

amount_option = click.option(
    "-a",
    "--amount",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Message amount.",
)
size_option = click.option(
    "-s",
    "--size",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Message size in bytes.",
)


@dataclass(frozen=True)
class SendTiming:
    """One timed send: where it went, whether it was stored, how long it took."""

    queue: MessageQueue | None
    """The queue chosen (None when no queue could be chosen: no route)."""
    rt_ms: float
    error: str | None = None
    """Why it failed; None when it succeeded."""

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` form of one send."""
        row: dict[str, Any] = {
            "brokerName": self.queue.broker_name if self.queue else None,
            "queueId": self.queue.queue_id if self.queue else None,
            "sendResult": self.error is None,
            "rt": round(self.rt_ms, 3),
        }
        if self.error is not None:
            row["error"] = self.error
        return row


def average_rt(timings: Sequence[SendTiming]) -> float:
    """The mean RT in ms, the first send left out unless it is the only one."""
    counted = timings[1:] or timings
    return sum(t.rt_ms for t in counted) / len(counted) if counted else 0.0


def failures(timings: Sequence[SendTiming]) -> list[str]:
    """The reasons of the failed sends."""
    return [t.error for t in timings if t.error is not None]


QueueChoice = Callable[[Sequence[MessageQueue], int], MessageQueue]
"""``(the topic's queues, send index) -> the queue to send to``."""


async def timed_sends(
    producer: Producer, topic: str, amount: int, size: int, choose: QueueChoice
) -> list[SendTiming]:
    """``amount`` sends of ``size`` bytes to ``topic``, each to the queue ``choose`` picks."""
    body = b"a" * size
    chosen: list[MessageQueue] = []

    def selector(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        chosen.append(choose(queues, arg))
        return chosen[-1]

    timings = []
    for i in range(amount):
        chosen.clear()
        started = time.perf_counter()
        error = None
        try:
            await producer.send_orderly(Message(topic, body), selector=selector, arg=i)
        except MQClientError as exc:
            error = exc.reason
        rt_ms = (time.perf_counter() - started) * 1000
        timings.append(SendTiming(chosen[-1] if chosen else None, rt_ms, error))
    return timings


def always(queue: MessageQueue) -> QueueChoice:
    """A queue choice that is ``queue`` whatever the route holds."""
    return lambda _queues, _index: queue


def tools_producer(admin: AdminClient) -> Producer:
    """A producer on the admin's connections, its group named by the time (as RocketMQ's)."""
    return Producer(str(time.time_ns() // 1_000_000), instance=admin.instance)


def fail_on_failures(timings: Sequence[SendTiming]) -> None:
    """When a send failed: :func:`fail` saying how many and the last reason."""
    failed = failures(timings)
    if failed:
        fail(f"{len(failed)} of {len(timings)} sends failed; the last: {failed[-1]}")


# ---------------------------------------------------------------------- checkMsgSendRT


@admin_command("checkMsgSendRT")
@click.option("-t", "--topic", required=True, help="Topic name.")
@amount_option
@size_option
def check_msg_send_rt(
    namesrv: str | None, as_json: bool, topic: str, amount: int, size: int
) -> None:
    """Check message send response time: one row per send (broker, queue, result, RT in
    ms), then the average."""

    async def body(admin: AdminClient) -> list[SendTiming]:
        async with tools_producer(admin) as producer:
            return await timed_sends(
                producer, topic, amount, size, lambda queues, i: queues[i % len(queues)]
            )

    timings = run(namesrv, body)
    avg = average_rt(timings)
    if as_json:
        emit_json({"topic": topic, "sends": [t.to_json() for t in timings], "avgRT": avg})
    else:
        table(CHECK_HEADERS, (_check_row(t) for t in timings))
        lines(f"Avg RT: {avg:.2f}")
    fail_on_failures(timings)


def _check_row(timing: SendTiming) -> tuple[str, str, str, str]:
    queue = timing.queue
    return (
        queue.broker_name if queue else "null",
        str(queue.queue_id) if queue else "null",
        "true" if timing.error is None else "false",
        f"{timing.rt_ms:.2f}",
    )


# ---------------------------------------------------------------------- clusterRT


@dataclass(frozen=True)
class BrokerRT:
    """One broker's sends of a clusterRT round."""

    cluster: str
    broker_name: str
    timings: list[SendTiming]

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` form: the figures of the table row, and the failures' reasons."""
        failed = failures(self.timings)
        return {
            "clusterName": self.cluster,
            "brokerName": self.broker_name,
            "rt": round(average_rt(self.timings), 3),
            "successCount": len(self.timings) - len(failed),
            "failCount": len(failed),
            "errors": failed,
        }


async def cluster_round(
    admin: AdminClient, producer: Producer, cluster: str | None, amount: int, size: int
) -> list[BrokerRT]:
    """One round: the sends to each broker of ``cluster`` (else of every cluster), by name."""
    info = await admin.cluster_info()
    if cluster is not None and cluster not in info.cluster_addr_table:
        raise MQClientError(ResponseCode.SYSTEM_ERROR, f"cluster [{cluster}] not exist")
    out = []
    for name in sorted(info.cluster_addr_table):
        if cluster is not None and name != cluster:
            continue
        for broker in sorted(info.cluster_addr_table[name]):
            choose = always(MessageQueue(RT_TOPIC, broker, 0))
            timings = await timed_sends(producer, RT_TOPIC, amount, size, choose)
            out.append(BrokerRT(name, broker, timings))
    return out


def print_round(results: Sequence[BrokerRT], as_json: bool, tlog: bool, machine_room: str) -> None:
    """Print one round as a table, tlog lines or JSON."""
    if as_json:
        emit_json([r.to_json() for r in results])
    elif tlog:
        now = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        lines(
            *(
                f"{now}|{machine_room}|{r.cluster}|{r.broker_name}|{average_rt(r.timings):.0f}"
                for r in results
            )
        )
    else:
        rows = []
        for r in results:
            failed = len(failures(r.timings))
            rt = f"{average_rt(r.timings):.2f}"
            rows.append((r.cluster, r.broker_name, rt, len(r.timings) - failed, failed))
        table(CLUSTER_RT_HEADERS, rows)


@admin_command("clusterRT")
@amount_option
@size_option
@click.option("-c", "--cluster", help="Cluster name [default: every cluster].")
@click.option(
    "-p",
    "--printAsTlog",
    "tlog",
    type=click.BOOL,
    default=False,
    show_default=True,
    help="Print as tlog lines (time|machineRoom|cluster|broker|rt).",
)
@click.option(
    "-m", "--machineRoom", "machine_room", default="noname", show_default=True, help="For tlog."
)
@click.option(
    "-i",
    "--interval",
    type=click.IntRange(min=1),
    default=None,
    help="Repeat every this many seconds until Ctrl+C [default: one round].",
)
def cluster_rt(
    namesrv: str | None,
    as_json: bool,
    amount: int,
    size: int,
    cluster: str | None,
    tlog: bool,
    machine_room: str,
    interval: int | None,
) -> None:
    """List all clusters message send RT: per broker, the average RT (ms) of -a sends to its
    queue 0 of BenchmarkTest, with the success and failure counts."""

    async def body(admin: AdminClient) -> list[BrokerRT]:
        async with tools_producer(admin) as producer:
            while True:
                results = await cluster_round(admin, producer, cluster, amount, size)
                print_round(results, as_json, tlog, machine_room)
                if interval is None:
                    return results
                await trio.sleep(interval)

    results = run(namesrv, body)
    fail_on_failures([t for r in results for t in r.timings])
