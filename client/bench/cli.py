"""``mqbench``: the benchmark command line (client benchmarks, plus the store's, lazily).

``mqbench produce|consume|latency|backlog`` (and ``push|rebalance``, from
:mod:`client.bench.push_cli`) run clients in worker processes against a running
cluster (``--namesrv``) or a local one started for the run (``--start-cluster``, the default).
``mqbench store ...`` and ``mqbench stacks`` are the store benchmarks of :mod:`store.bench.cli`,
imported only when invoked (the client does not depend on the store). ``--json`` prints one
JSON object per run on stdout; otherwise a rich progress display (stderr) and a table.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from client.admin.base import ACCESS_KEY_ENV, ROCKETMQ_HOME_ENV, SECRET_KEY_ENV, tools_credentials
from client.bench import stats
from client.bench.account import NO_ACCOUNT, Account
from client.bench.cluster import FLUSH_TYPES, ClusterError, LocalCluster, local_cluster
from client.bench.cpu import CpuMeter, describe
from client.bench.protocol import QueueRanges
from client.bench.runner import (
    BenchError,
    WorkerPool,
    bench_group,
    create_topic,
    ensure_topic,
    fill_topic,
    shares,
)
from client.bench.workers import (
    ConsumeSpec,
    LatencySpec,
    ProduceSpec,
    consume_main,
    latency_consumer_main,
    latency_producer_main,
    produce_main,
)
from client.config import parse_namesrv
from client.errors import MQClientError
from client.validation import validate_topic
from common.benchkit import (
    LatencyRecorder,
    MachineInfo,
    NullProgress,
    ProgressHook,
    RichProgress,
    one_line_errors,
    rss_anon_bytes,
)
from common.topic_attributes import CQType
from remoting.acl.config import TOOLS_FILE, AclConfigError

F = TypeVar("F", bound=Callable[..., Any])

SOURCES = ("broker", "client", "common", "namesrv", "remoting", "store")
"""The code a client figure measures (for the commit in the machine info)."""
BENCH_CODE = ("client/bench", "store/bench")
WARMUP_MSGS = 300
PRODUCE_QUEUES = 8
"""Queues of a ``produce --queue-type`` topic: what a producer's send auto-creates
(``defaultTopicQueueNums``)."""
FILL_QUEUES = 4
"""Queues of a ``consume --queue-type`` topic: what :func:`fill_topic` auto-creates."""

LAZY_COMMANDS = {
    "store": ("store.bench.cli", "store_group"),
    "stacks": ("store.bench.cli", "stacks_command"),
    "push": ("client.bench.push_cli", "push_command"),
    "rebalance": ("client.bench.push_cli", "rebalance_command"),
    "spark-read": ("client.bench.spark_cli", "spark_read_command"),
    "tx": ("client.bench.tx_cli", "tx_command"),
}


class LazyGroup(click.Group):
    """A click group whose ``LAZY_COMMANDS`` are imported only when looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Eager and lazy command names, sorted."""
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, importing its module if it is a lazy one."""
        if cmd_name in LAZY_COMMANDS:
            module, attr = LAZY_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


class Session:
    """What every client command shares: output mode, consoles, the cluster to use."""

    def __init__(self, kw: dict[str, Any]) -> None:
        self.json: bool = kw.pop("json_out")
        self.namesrv: str | None = kw.pop("namesrv")
        start: bool = kw.pop("start_cluster")
        if self.namesrv is not None and start:
            raise click.UsageError("--namesrv and --start-cluster exclude each other")
        self.flush: str = kw.pop("flush")
        self.directory: Path | None = kw.pop("directory")
        self.file_size: int | None = kw.pop("commitlog_file_size")
        self.account: Account = _account(kw.pop("access_key"), kw.pop("secret_key"))
        """The ACL account every client of the run signs with (kept out of ``kw``, so out
        of the printed config)."""
        self.out = Console()
        if not self.out.is_terminal:
            self.out.width = 160
        self.err = Console(stderr=True)
        self.machine = MachineInfo.current(SOURCES, BENCH_CODE)

    @contextlib.contextmanager
    def progress(self) -> Iterator[ProgressHook]:
        """A rich progress display on stderr, or nothing with ``--json``."""
        if self.json:
            yield NullProgress()
            return
        with RichProgress(self.err) as p:
            yield p

    @contextlib.contextmanager
    def cluster(self) -> Iterator[tuple[str, LocalCluster | None]]:
        """The name-server address to use, and the local cluster started for the run."""
        if self.namesrv is not None:
            yield self.namesrv, None
            return
        if not self.json:
            self.err.print(f"starting a local name server and broker ({self.flush})")
        try:
            with local_cluster(
                flush=self.flush, commitlog_file_size=self.file_size, parent=self.directory
            ) as c:
                yield c.namesrv, c
        except ClusterError as exc:
            raise click.ClickException(str(exc)) from exc

    def emit(
        self,
        obj: dict[str, Any],
        rows: list[tuple[str, dict[str, Any]]],
        *,
        latency: bool = True,
        table: Table | None = None,
        note: str | None = None,
    ) -> None:
        """Print the run's JSON object, or its table (``table``, else a rate table of
        ``rows``, with latency columns if ``latency``) and ``note`` under it."""
        if self.json:
            click.echo(stats.to_json(obj))
            return
        self.out.print(stats.machine_line(self.machine), style="dim")
        caption = stats.config_caption(obj["config"])
        if table is None:
            table = stats.rate_table(obj["workload"], rows, caption, latency=latency)
        else:
            table.caption = caption
        self.out.print(table)
        if note is not None:
            self.out.print(note)


@contextlib.contextmanager
def _bench_errors() -> Iterator[None]:
    with one_line_errors(BenchError):
        yield


def _account(access_key: str | None, secret_key: str | None) -> Account:
    """The run's ACL account: both keys or neither (UsageError; no key is ever shown); with
    neither, ``$ROCKETMQ_HOME/conf/tools.yml`` as for ``mqadmin`` (:func:`tools_credentials`),
    else none (unsigned)."""
    if bool(access_key) != bool(secret_key):
        raise click.UsageError(
            f"give both --access-key and --secret-key (or ${ACCESS_KEY_ENV} and "
            f"${SECRET_KEY_ENV}), or neither"
        )
    if access_key and secret_key:
        return Account(access_key, secret_key)
    try:
        keys = tools_credentials()
    except AclConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return NO_ACCOUNT if keys is None else Account(*keys)


def _check_namesrv(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--namesrv`` is checked before any process starts."""
    if value is not None:
        try:
            parse_namesrv(value)
        except MQClientError as exc:
            raise click.BadParameter(exc.reason) from None
    return value


def _check_topic(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--topic`` is checked before any process starts."""
    try:
        validate_topic(value)
    except MQClientError as exc:
        raise click.BadParameter(exc.reason) from None
    return value


def common_options(f: F) -> F:
    """Options every client command takes."""
    options = [
        click.option(
            "--namesrv",
            default=None,
            callback=_check_namesrv,
            help="Use the running cluster at host:port.",
        ),
        click.option(
            "--start-cluster",
            is_flag=True,
            help="Start a local name server and broker for the run (the default without "
            "--namesrv).",
        ),
        click.option(
            "--flush",
            type=click.Choice(FLUSH_TYPES),
            default="ASYNC_FLUSH",
            show_default=True,
            help="flushDiskType of the started broker.",
        ),
        click.option(
            "--dir",
            "directory",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Parent directory of the started broker's store (default: system temp).",
        ),
        click.option(
            "--commitlog-file-size",
            type=click.IntRange(4096),
            default=None,
            help="mappedFileSizeCommitLog of the started broker (bytes; default 1 GiB).",
        ),
        click.option(
            "--access-key",
            envvar=ACCESS_KEY_ENV,
            default=None,
            help=f"ACL accessKey every client signs with (or ${ACCESS_KEY_ENV}; default: "
            f"${ROCKETMQ_HOME_ENV}/conf/{TOOLS_FILE}, as mqadmin), for a cluster with "
            "aclEnable=true.",
        ),
        click.option(
            "--secret-key",
            envvar=SECRET_KEY_ENV,
            default=None,
            help=f"Its secretKey (or ${SECRET_KEY_ENV}, which keeps it out of ps).",
        ),
        click.option("--json", "json_out", is_flag=True, help="One JSON object on stdout."),
        click.option("--topic", default="BenchTopic", show_default=True, callback=_check_topic),
        click.option(
            "--body-size", type=click.IntRange(8), default=128, show_default=True, help="Bytes."
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def queue_type_option(f: F) -> F:
    """``--queue-type``: create the topic with that ``queue.type`` before the run."""
    return click.option(
        "--queue-type",
        type=click.Choice([t.value for t in CQType]),
        default=None,
        help="Create the topic with this queue.type attribute first (on every master; a "
        "topic's queue type cannot change). Default: the topic as it is, or auto-created "
        "(SimpleCQ).",
    )(f)


def _create_typed_topic(s: Session, namesrv: str, kw: dict[str, Any], queues: int) -> None:
    """The ``--queue-type`` topic, when one was asked for."""
    if kw["queue_type"] is not None:
        create_topic(namesrv, kw["topic"], kw["queue_type"], queues, account=s.account)


def _config(s: Session, kw: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "cluster": "started" if s.namesrv is None else s.namesrv,
        "flush": s.flush if s.namesrv is None else None,
        "topic": kw["topic"],
        "body_size": kw["body_size"],
        **more,
    }


def _pids(cluster: LocalCluster | None) -> list[int]:
    return [] if cluster is None else cluster.pids


def _broker_pid(cluster: LocalCluster | None) -> int | None:
    """The started broker's pid (None for a cluster given with --namesrv)."""
    return None if cluster is None else cluster.broker_pid


def _terminate_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, ``timeout``, a cancelled CI job) is handled as Ctrl+C: the run stops
    its workers and servers and removes its temporary stores on the way out."""
    signal.raise_signal(signal.SIGINT)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """minimq benchmarks: clients against a cluster (produce, consume, latency, backlog, push,
    rebalance, tx, spark-read); the message store alone (store ...); py-spy profile summaries
    (stacks)."""
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    signal.signal(signal.SIGHUP, _terminate_as_interrupt)


# -- produce ---------------------------------------------------------------------------------
@main.command()
@common_options
@click.option("--clients", type=click.IntRange(1), default=1, show_default=True)
@click.option(
    "--mode",
    type=click.Choice(["sync", "batch", "oneway", "tx"]),
    default="sync",
    show_default=True,
    help="tx: transactional sends whose local transaction commits at once.",
)
@click.option("--batch", type=click.IntRange(1), default=32, show_default=True)
@click.option(
    "--inflight",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Concurrent requests per client (trio tasks, or threads with --api blocking).",
)
@click.option("--count", type=click.IntRange(1), default=100_000, show_default=True)
@click.option(
    "--duration",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Seconds to send for (instead of --count).",
)
@click.option("--api", type=click.Choice(["aio", "blocking"]), default="aio", show_default=True)
@queue_type_option
def produce(**kw: Any) -> None:
    """N producer processes sending their share of --count messages (or for --duration)."""
    s = Session(kw)
    clients, duration = kw["clients"], kw["duration"]
    count = None if duration is not None else kw["count"]
    config = _config(
        s,
        kw,
        clients=clients,
        mode=kw["mode"],
        batch=kw["batch"] if kw["mode"] == "batch" else None,
        inflight=kw["inflight"],
        count=count,
        duration_s=duration,
        api=kw["api"],
        queue_type=kw["queue_type"],
    )
    counts = shares(count, clients) if count is not None else [None] * clients
    with _bench_errors(), s.cluster() as (namesrv, cluster):
        _create_typed_topic(s, namesrv, kw, PRODUCE_QUEUES)
        group = bench_group("bench_pg")
        specs = [
            ProduceSpec(
                namesrv=namesrv,
                topic=kw["topic"],
                group=group,
                body_size=kw["body_size"],
                mode=kw["mode"],
                batch=kw["batch"],
                inflight=kw["inflight"],
                count=n,
                duration_s=duration,
                api=kw["api"],
                warmup=WARMUP_MSGS,
                account=s.account,
            )
            for n in counts
        ]
        with WorkerPool("producer", produce_main, specs) as pool, s.progress() as hook:
            hook.phase("start + warm up clients", clients)
            pool.collect("ready")
            hook.advance(clients)
            hook.phase(f"produce ({kw['mode']})", count or 0)
            meter = CpuMeter(_broker_pid(cluster))
            meter.start()
            pool.send_all("go")
            results = pool.collect("result", hook.advance)
            meter.stop()
            hook.advance(sum(r["msgs"] for r in results))
            worker_pids = pool.pids
    agg = stats.aggregate(results, body_size=kw["body_size"])
    cpu = meter.us_per_message(agg["msgs"])
    obj = stats.report(
        "produce",
        config,
        s.machine,
        agg,
        cpu_us_per_msg=cpu,
        clients_detail=stats.per_client(results),
        cluster_pids=_pids(cluster),
        worker_pids=worker_pids,
    )
    s.emit(obj, [(f"produce {kw['mode']}", agg)], note=describe(cpu))


# -- consume ---------------------------------------------------------------------------------
def _consume_run(
    s: Session,
    namesrv: str,
    kw: dict[str, Any],
    ranges: QueueRanges | None,
    on_progress: Callable[[int], None] | None = None,
    meter: CpuMeter | None = None,
) -> tuple[list[dict[str, Any]], list[int]]:
    clients = kw["clients"]
    limits = shares(kw["count"], clients)
    group = bench_group("bench_cg")
    specs = [
        ConsumeSpec(
            namesrv=namesrv,
            topic=kw["topic"],
            group=group,
            index=i,
            clients=clients,
            pull_batch=kw["pull_batch"],
            ranges=ranges,
            limit=None if ranges else limits[i],
            account=s.account,
        )
        for i in range(clients)
    ]
    with WorkerPool("consumer", consume_main, specs) as pool, s.progress() as hook:
        hook.phase("start consumers", clients)
        pool.collect("ready")
        hook.advance(clients)
        total = sum(e - b for b, e in ranges.values()) if ranges else kw["count"]
        hook.phase("consume", total)

        def progress(done: int) -> None:
            hook.advance(done)
            if on_progress is not None:
                on_progress(done)

        if meter is not None:
            meter.start()
        pool.send_all("go")
        results = pool.collect("result", progress)
        if meter is not None:
            meter.stop()
        hook.advance(sum(r["msgs"] for r in results))
        return results, pool.pids


def _fill(s: Session, namesrv: str, kw: dict[str, Any]) -> tuple[QueueRanges, float]:
    with s.progress() as hook:
        t0 = time.perf_counter()
        ranges = fill_topic(
            namesrv,
            kw["topic"],
            kw["count"],
            body_size=kw["body_size"],
            batch=32,
            inflight=4,
            progress=hook,
            account=s.account,
        )
        return ranges, time.perf_counter() - t0


def consume_options(f: F) -> F:
    """Options of the commands that consume."""
    f = click.option(
        "--pull-batch",
        type=click.IntRange(1, 1024),
        default=32,
        show_default=True,
        help="pull_batch_size of each consumer.",
    )(f)
    f = click.option(
        "--clients",
        type=click.IntRange(1),
        default=1,
        show_default=True,
        help="Consumer processes (the queues are split between them).",
    )(f)
    return f


@main.command()
@common_options
@consume_options
@click.option("--count", type=click.IntRange(1), default=100_000, show_default=True)
@click.option(
    "--no-fill",
    is_flag=True,
    help="Read what the topic holds (at most --count) instead of filling it first.",
)
@queue_type_option
def consume(**kw: Any) -> None:
    """Fill the topic (untimed), then read --count messages from the first offset."""
    s = Session(kw)
    config = _config(
        s,
        kw,
        clients=kw["clients"],
        pull_batch=kw["pull_batch"],
        count=kw["count"],
        fill=not kw["no_fill"],
        queue_type=kw["queue_type"],
    )
    with _bench_errors(), s.cluster() as (namesrv, cluster):
        _create_typed_topic(s, namesrv, kw, FILL_QUEUES)
        ranges = None if kw["no_fill"] else _fill(s, namesrv, kw)[0]
        meter = CpuMeter(_broker_pid(cluster))
        results, worker_pids = _consume_run(s, namesrv, kw, ranges, meter=meter)
    agg = stats.aggregate(results, body_size=kw["body_size"])
    cpu = meter.us_per_message(agg["msgs"])
    obj = stats.report(
        "consume",
        config,
        s.machine,
        agg,
        cpu_us_per_msg=cpu,
        clients_detail=stats.per_client(results),
        cluster_pids=_pids(cluster),
        worker_pids=worker_pids,
    )
    s.emit(obj, [("consume", agg)], note=describe(cpu))


# -- latency ---------------------------------------------------------------------------------
@main.command()
@common_options
@click.option(
    "--rate",
    type=click.FloatRange(0, min_open=True),
    default=2000.0,
    show_default=True,
    help="Messages per second.",
)
@click.option(
    "--duration",
    type=click.FloatRange(0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds of sending.",
)
def latency(**kw: Any) -> None:
    """End-to-end latency: one producer at a fixed rate, one long-polling consumer."""
    s = Session(kw)
    config = _config(s, kw, rate=kw["rate"], duration_s=kw["duration"])
    with _bench_errors(), s.cluster() as (namesrv, cluster):
        ensure_topic(namesrv, kw["topic"], kw["body_size"], account=s.account)
        spec = LatencySpec(
            namesrv=namesrv,
            topic=kw["topic"],
            group=bench_group("bench_lat"),
            body_size=kw["body_size"],
            rate=kw["rate"],
            duration_s=kw["duration"],
            warmup=100,
            account=s.account,
        )
        with (
            WorkerPool("latency-consumer", latency_consumer_main, [spec]) as cons,
            s.progress() as hook,
        ):
            hook.phase("start consumer + producer", 2)
            cons.collect("ready")
            with WorkerPool("latency-producer", latency_producer_main, [spec]) as prod:
                prod.collect("ready")
                hook.advance(2)
                hook.phase("send at rate", int(kw["rate"] * kw["duration"]))
                cons.send_all("go")
                prod.send_all("go")
                produced = prod.collect("result", hook.advance)
                hook.advance(produced[0]["msgs"])
                cons.send(0, "stop", produced[0]["positions"])
                received = cons.collect("result")
                worker_pids = cons.pids + prod.pids
    agg = stats.aggregate(received, body_size=kw["body_size"])
    p, r = produced[0], received[0]
    send_s = max(p["end_ns"] - p["start_ns"], 1) / 1e9
    obj = stats.report(
        "latency",
        config,
        s.machine,
        agg,
        sent=p["msgs"],
        lost=r["lost"],
        duplicates=r["duplicates"],
        foreign=r["foreign"],
        send_rate=round(p["msgs"] / send_s, 1),
        lateness_us=LatencyRecorder.merged([p["lateness"]]).percentiles_us(),
        send_latency_us=LatencyRecorder.merged([p["latency"]]).percentiles_us(),
        cluster_pids=_pids(cluster),
        worker_pids=worker_pids,
    )
    if not s.json:
        s.err.print(
            f"sent {p['msgs']:,}, received {agg['msgs']:,} (lost {r['lost']:,}, duplicated "
            f"{r['duplicates']:,}; {r['foreign']:,} other messages on the topic left out); "
            f"lateness against the schedule p99 {obj['lateness_us']['p99']:,.0f} µs"
        )
    s.emit(obj, [("end-to-end", agg)])
    _fail_on_loss(r["lost"], r["duplicates"], p["msgs"])


def _fail_on_loss(lost: int, duplicates: int, sent: int) -> None:
    """Exit non-zero (after the report) when sent messages never arrived or arrived twice."""
    if lost or duplicates:
        raise click.ClickException(
            f"{lost} of {sent} sent messages not received, {duplicates} received more than once"
        )


# -- backlog ---------------------------------------------------------------------------------
@main.command()
@common_options
@consume_options
@click.option("--count", type=click.IntRange(1), default=10_000_000, show_default=True)
def backlog(**kw: Any) -> None:
    """Fill a backlog on a started broker, then consume it all; the broker's RssAnon."""
    s = Session(kw)
    if s.namesrv is not None:
        raise click.UsageError("backlog starts its own cluster (it reads the broker's memory)")
    config = _config(s, kw, clients=kw["clients"], pull_batch=kw["pull_batch"], count=kw["count"])
    with _bench_errors(), s.cluster() as (namesrv, cluster):
        assert cluster is not None
        pid = cluster.broker_pid
        rss = {"start": rss_anon_bytes(pid)}
        ranges, fill_s = _fill(s, namesrv, kw)
        rss["after_fill"] = rss_anon_bytes(pid)
        peak = rss["after_fill"]

        def sample(_: int) -> None:
            nonlocal peak
            peak = max(peak, rss_anon_bytes(pid))

        results, worker_pids = _consume_run(s, namesrv, kw, ranges, sample)
        rss["after_consume"] = rss_anon_bytes(pid)
        rss["peak"] = max(peak, rss["after_consume"])
    agg = stats.aggregate(results, body_size=kw["body_size"])
    obj = stats.report(
        "backlog",
        config,
        s.machine,
        agg,
        clients_detail=stats.per_client(results),
        fill={
            "msgs": kw["count"],
            "seconds": round(fill_s, 3),
            "msgs_per_s": round(kw["count"] / fill_s, 1),
        },
        broker_rss_anon=rss,
        cluster_pids=_pids(cluster),
        worker_pids=worker_pids,
    )
    if not s.json:
        mib = {k: f"{v / (1 << 20):,.1f} MiB" for k, v in rss.items()}
        s.err.print(f"broker RssAnon: {mib}")
    s.emit(obj, [("consume backlog", agg)])


if __name__ == "__main__":
    main()
