"""``mqbench tx``: transactional sends (local transaction commits at once) against plain sync
sends, with the same clients, on the same cluster.

Runs ``mqbench produce --mode sync`` and then ``--mode tx`` with identical workers (each run
warmed up first) and reports both rates and their ratio (issue #7's target: at least 0.5).
Each transactional send is a half-message request answered by the broker, the local
transaction, and a oneway END_TRANSACTION after which the broker re-stores the message in its
real topic. Imported lazily by :mod:`client.bench.cli` (see ``LAZY_COMMANDS``).
"""

from __future__ import annotations

from typing import Any

import click

from client.bench import stats
from client.bench.cli import (
    WARMUP_MSGS,
    Session,
    _bench_errors,
    _config,
    _pids,
    common_options,
)
from client.bench.runner import WorkerPool, bench_group, shares
from client.bench.workers import ProduceSpec, produce_main
from common.benchkit import ProgressHook

TARGET_RATIO = 0.5


def _run(
    s: Session, namesrv: str, kw: dict[str, Any], mode: str, hook: ProgressHook
) -> tuple[dict[str, Any], list[int]]:
    group = bench_group("bench_tx_pg" if mode == "tx" else "bench_pg")
    specs = [
        ProduceSpec(
            namesrv=namesrv,
            topic=kw["topic"],
            group=group,
            body_size=kw["body_size"],
            mode="tx" if mode == "tx" else "sync",
            batch=1,
            inflight=kw["inflight"],
            count=n,
            duration_s=None,
            api=kw["api"],
            warmup=WARMUP_MSGS,
            account=s.account,
        )
        for n in shares(kw["count"], kw["clients"])
    ]
    with WorkerPool(f"producer-{mode}", produce_main, specs) as pool:
        hook.phase(f"start + warm up clients ({mode})", kw["clients"])
        pool.collect("ready")
        hook.advance(kw["clients"])
        hook.phase(f"produce ({mode})", kw["count"])
        pool.send_all("go")
        results = pool.collect("result", hook.advance)
        hook.advance(sum(r["msgs"] for r in results))
        return stats.aggregate(results, body_size=kw["body_size"]), pool.pids


@click.command("tx")
@common_options
@click.option("--clients", type=click.IntRange(1), default=1, show_default=True)
@click.option(
    "--inflight",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Concurrent sends per client (trio tasks, or threads with --api blocking).",
)
@click.option("--count", type=click.IntRange(1), default=20_000, show_default=True)
@click.option("--api", type=click.Choice(["aio", "blocking"]), default="aio", show_default=True)
def tx_command(**kw: Any) -> None:
    """Transactional sends with an immediate commit vs plain sync sends (same clients)."""
    s = Session(kw)
    config = _config(
        s, kw, clients=kw["clients"], inflight=kw["inflight"], count=kw["count"], api=kw["api"]
    )
    with _bench_errors(), s.cluster() as (namesrv, cluster), s.progress() as hook:
        plain, plain_pids = _run(s, namesrv, kw, "sync", hook)
        tx, tx_pids = _run(s, namesrv, kw, "tx", hook)
    ratio = round(tx["msgs_per_s"] / plain["msgs_per_s"], 3)
    obj = stats.report(
        "tx",
        config,
        s.machine,
        tx,
        plain_sync=plain,
        ratio_to_sync=ratio,
        target_ratio=TARGET_RATIO,
        cluster_pids=_pids(cluster),
        worker_pids=plain_pids + tx_pids,
    )
    if not s.json:
        s.err.print(f"transactional / plain sync rate: {ratio:.2f} (target ≥ {TARGET_RATIO})")
    s.emit(obj, [("produce sync", plain), ("transactional (commit)", tx)])
