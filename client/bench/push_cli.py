"""``mqbench push`` and ``mqbench rebalance`` (issue #4's push-consumer figures).

Loaded lazily by :mod:`client.bench.cli` (see ``LAZY_COMMANDS``).

- ``push``: fill an 8-queue topic (untimed), then ``--clients`` push-consumer processes of a
  fresh group consume it from the first offset with a no-op handler; the rate is the filled
  messages over the span from the go to the last one consumed (:mod:`client.bench.push`).
- ``rebalance``: ``--members`` push consumers of one group on an 8-queue topic; each round a
  member joins, one leaves (SIGTERM), one is killed (SIGKILL) and one joins again to restore
  the group's size, each timed until every queue has exactly one owner again
  (:mod:`client.bench.rebalance`).
"""

from __future__ import annotations

import signal
from typing import Any

import click

from client.bench import stats
from client.bench.cli import Session, _bench_errors, _config, _pids, common_options
from client.bench.protocol import QueueRanges
from client.bench.push import PushSpec, push_main
from client.bench.rebalance import Members, MemberSpec
from client.bench.runner import (
    WorkerPool,
    bench_group,
    ensure_topic,
    fill_topic,
    topic_queues,
    wait_members,
)
from client.bench.workers import Api

QUEUES = 8
"""Queues of the benchmark topic (when the run creates it)."""
TARGET_S = 2.0
"""Issue #4: a membership change converges within this long."""


@click.command("push")
@common_options
@click.option("--count", type=click.IntRange(1), default=100_000, show_default=True)
@click.option("--orderly", is_flag=True, help="Orderly consumption (broker-side queue locks).")
@click.option(
    "--clients",
    type=click.IntRange(1, QUEUES),
    default=1,
    show_default=True,
    help="Push-consumer processes of the group.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="consume_message_batch_max_size (messages per handler call).",
)
@click.option(
    "--threads",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="consume_thread_max (consume workers per consumer).",
)
@click.option(
    "--api",
    type=click.Choice(["aio", "blocking"]),
    default="aio",
    show_default=True,
    help="aio: client.aio.PushConsumer, async handler; blocking: client.PushConsumer, sync "
    "handler in worker threads.",
)
def push_command(**kw: Any) -> None:
    """Fill the topic (untimed), then push consumers read --count messages from the first
    offset with a no-op handler."""
    s = Session(kw)
    clients, count, api = kw["clients"], kw["count"], kw["api"]
    config = _config(
        s,
        kw,
        clients=clients,
        count=count,
        orderly=kw["orderly"],
        batch_size=kw["batch_size"],
        threads=kw["threads"],
        api=api,
    )
    with _bench_errors(), s.cluster() as (namesrv, cluster):
        with s.progress() as hook:
            ranges = fill_topic(
                namesrv,
                kw["topic"],
                count,
                body_size=kw["body_size"],
                progress=hook,
                queues=QUEUES,
                account=s.account,
            )
        results, worker_pids = _push_run(s, namesrv, kw, ranges, api)
    agg = stats.aggregate(results, body_size=kw["body_size"])
    del agg["requests"], agg["latency_us"]
    obj = stats.report(
        "push",
        config,
        s.machine,
        agg,
        queues=sorted(q for r in results for q in r["queues"]),
        clients_detail=stats.per_client(results),
        cluster_pids=_pids(cluster),
        worker_pids=worker_pids,
    )
    label = "push " + ("orderly" if kw["orderly"] else "concurrent")
    s.emit(obj, [(label, agg)], latency=False)


def _push_run(
    s: Session, namesrv: str, kw: dict[str, Any], ranges: QueueRanges, api: Api
) -> tuple[list[dict[str, Any]], list[int]]:
    clients = kw["clients"]
    group = bench_group("bench_push")
    spec = PushSpec(
        namesrv=namesrv,
        topic=kw["topic"],
        group=group,
        orderly=kw["orderly"],
        batch_size=kw["batch_size"],
        threads=kw["threads"],
        api=api,
        ranges=ranges,
        account=s.account,
    )
    total = sum(e - b for b, e in ranges.values())
    with WorkerPool("push-consumer", push_main, [spec] * clients) as pool, s.progress() as hook:
        hook.phase("start push consumers", clients)
        pool.collect("ready")
        wait_members(namesrv, group, kw["topic"], clients, s.account)
        hook.advance(clients)
        hook.phase("push consume (" + ("orderly" if kw["orderly"] else "concurrent") + ")", total)
        pool.send_all("go")
        pool.until_progress(total, hook.advance)
        pool.send_all("stop")
        results = pool.collect("result")
        hook.advance(sum(r["msgs"] for r in results))
        return results, pool.pids


@click.command("rebalance")
@common_options
@click.option(
    "--members",
    type=click.IntRange(2, QUEUES - 1),
    default=3,
    show_default=True,
    help="Group members at the start of each round.",
)
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True)
def rebalance_command(**kw: Any) -> None:
    """Time from a member joining, leaving (SIGTERM) or being killed (SIGKILL) until every
    queue of an 8-queue topic has exactly one owner again."""
    s = Session(kw)
    n = kw["members"]
    config = _config(s, kw, members=n, rounds=kw["rounds"])
    with _bench_errors(), s.cluster() as (namesrv, cluster):
        ensure_topic(namesrv, kw["topic"], kw["body_size"], queues=QUEUES, account=s.account)
        queues = topic_queues(namesrv, kw["topic"], s.account)
        spec = MemberSpec(
            namesrv=namesrv, topic=kw["topic"], group=bench_group("bench_rb"), account=s.account
        )
        qids = [(mq.broker_name, mq.queue_id) for mq in queues]
        with Members(spec, qids) as members, s.progress() as hook:
            hook.phase(f"start {n} members", n)
            started = [members.spawn() for _ in range(n)]
            t0 = min(members.go(m) for m in started)
            initial = members.wait_converged(t0)
            hook.advance(n)
            rounds = []
            for r in range(kw["rounds"]):
                hook.phase(f"round {r + 1}: join, leave, kill, join", 4)
                rounds.append(_round(members, hook.advance))
            worker_pids = members.pids
    worst = max(v for r in rounds for v in r.values())
    result = {
        "queues": len(queues),
        "initial_s": round(initial, 4),
        "rounds": rounds,
        "max_s": worst,
        "target_s": TARGET_S,
        "within_target": worst <= TARGET_S,
    }
    obj = stats.report(
        "rebalance",
        config,
        s.machine,
        result,
        cluster_pids=_pids(cluster),
        worker_pids=worker_pids,
    )
    s.emit(obj, [], table=stats.rebalance_table(rounds, TARGET_S))
    if not s.json:
        verdict = "within" if worst <= TARGET_S else "over"
        s.err.print(f"max {worst:.3f} s, {verdict} the {TARGET_S:g} s target")


def _round(members: Members, advance: Any) -> dict[str, float]:
    """One round on a converged group: join, leave (SIGTERM), kill (SIGKILL), join again."""
    out: dict[str, float] = {}
    new = members.spawn()
    out["join"] = members.wait_converged(members.go(new))
    advance(1)
    out["leave"] = members.wait_converged(members.signal(members.live[0], signal.SIGTERM))
    advance(2)
    out["kill"] = members.wait_converged(members.signal(members.live[0], signal.SIGKILL))
    advance(3)
    again = members.spawn()
    out["rejoin"] = members.wait_converged(members.go(again))
    advance(4)
    return {k: round(v, 4) for k, v in out.items()}
