"""Push-consumer groups of real processes: ``mqnamesrv``, ``mqbroker`` and one
``python -m tests.e2e.push_member`` process per member, each reporting its assignment and every
message it consumed as JSON lines on stdout (read by one task per member).

- Clustering: three members on an 8-queue topic over two brokers while a producer keeps
  sending; a fourth joins, one leaves cleanly (SIGTERM), one is SIGKILLed. After each change
  the live members' assignments are exactly what the allocation strategy gives for the live
  client ids (so every queue has one owner); at the end nothing sent is lost and few messages
  were consumed twice.
- Orderly: per-queue order across two rebalances, never a queue in two members' handlers at
  once (handler intervals, wall clock of one machine), also when the old owner's handler
  outlasts the 1 s a dropped queue waits for it.
- Broadcasting: every member gets every message; a restarted member resumes from the offsets
  it persisted when it closed: exactly the messages sent while it was away.
- Retry: a handler failing the first two attempts sees each message exactly three times.

Every wait has a deadline; every process is killed by pid when a test ends.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import trio

from tests.e2e.cluster import create_topic, running_cluster, wait_until
from tests.e2e.push_group import (
    FAST_LEVELS,
    TOPIC,
    Event,
    Group,
    assert_duplicates_follow_handovers,
    bodies_of,
    feeding,
    keyed,
    member_group,
    plain,
    send_bodies,
    topic_queues,
    wait_all_consumed,
)

PULL_BATCH = 32
"""The members' ``pull_batch_size`` (the default)."""
FREEZE_S = 6.0
"""How long the frozen member stays stopped at least: past its ``pull_max_idle_ms`` (5 s)."""


def assert_no_overlap(group: Group) -> None:
    """No queue was in two members' handlers at the same time."""
    calls: defaultdict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    for member in group.members:
        for e in member.msgs():
            calls[e["queue"][0], e["queue"][1]].append((e["t0"], e["t1"], member.name))
    for queue, intervals in calls.items():
        busy_until: dict[str, float] = {}
        for t0, t1, name in sorted(intervals):
            for other, until in busy_until.items():
                assert other == name or t0 >= until, (queue, name, other, t0, until)
            busy_until[name] = max(t1, busy_until.get(name, t1))


def assert_queue_order(group: Group) -> int:
    """Per member and queue, offsets strictly increase; per key, in global time order, each
    message is the next sequence number or one seen before (a re-delivered prefix after a
    rebalance). Returns the number of re-deliveries."""
    for member in group.members:
        last: dict[tuple[str, int], int] = {}
        for e in member.msgs():
            queue = (e["queue"][0], e["queue"][1])
            assert e["offset"] > last.get(queue, -1), (member.name, e)
            last[queue] = e["offset"]
    events = sorted((e for m in group.members for e in m.msgs()), key=lambda e: e["t0"])
    top: dict[str, int] = {}
    redelivered = 0
    for e in events:
        key, seq = e["body"].split(":")
        if int(seq) <= top.get(key, -1):
            redelivered += 1
            continue
        assert int(seq) == top.get(key, -1) + 1, f"{key}: {seq} after {top.get(key)}"
        top[key] = int(seq)
    return redelivered


async def test_group_rebalances_on_join_leave_and_kill_without_loss(tmp_path: Path) -> None:
    brokers: dict[str, dict[str, str]] = {"broker-a": {}, "broker-b": {}}
    async with running_cluster(tmp_path, brokers) as cluster:
        for broker in cluster.brokers.values():
            await create_topic(broker.addr, TOPIC, 4)
        queues = topic_queues({"broker-a": 4, "broker-b": 4})
        fast = ("--persist-interval", "0.5")  # bounds re-deliveries after the SIGKILL
        with trio.fail_after(60):
            async with member_group(tmp_path, cluster.namesrv_addr) as group:
                _, m2, m3 = [await group.start(f"m{i}", *fast) for i in (1, 2, 3)]
                times = {"start": await group.wait_converged(queues, "3 members start")}
                async with feeding(cluster.namesrv_addr, plain) as feeder:
                    await wait_until(lambda: len(group.consumed()) > 200, "consumption under way")
                    m4 = await group.start("m4", *fast)
                    times["join"] = await group.wait_converged(queues, "m4 joined")
                    await wait_until(lambda: len(m4.msgs()) > 50, "m4 consuming")
                    await group.terminate(m2)
                    times["sigterm"] = await group.wait_converged(queues, "m2 left")
                    await wait_until(lambda: len(m3.msgs()) > 100, "m3 consuming more")
                    await group.kill(m3)
                    times["sigkill"] = await group.wait_converged(queues, "m3 killed")
                    await wait_until(lambda: len(feeder.sent) >= 1000, "1000 messages sent")
                    sent = await feeder.finish()
                await wait_all_consumed(group, sent)
        counts = Counter(e["body"] for e in group.consumed())
        assert set(counts) == set(sent)  # nothing lost, nothing invented
        dups = sum(counts.values()) - len(counts)
        print(f"\npush group: sent {len(sent)}, duplicates {dups}, converged {times}")
        assert dups < len(sent) // 10
        assert_duplicates_follow_handovers(group)


async def test_a_frozen_member_is_dropped_and_rejoins_without_loss(tmp_path: Path) -> None:
    """The reliability plan's R3 stale owner: a member SIGSTOPped past the broker's
    ``channelExpiredTimeout`` is dropped and its queues go to the others; on SIGCONT it finds
    its pulls stalled, re-creates its queues from the committed offsets and rejoins. Nothing is
    lost, and few messages come twice."""
    expiry = {"channelExpiredTimeout": "2000"}
    async with running_cluster(tmp_path, {"broker-a": expiry}) as cluster:
        await create_topic(cluster.brokers["broker-a"].addr, TOPIC, 8)
        queues = topic_queues({"broker-a": 8})
        options = ("--heartbeat-interval", "0.3", "--persist-interval", "0.5")
        options += ("--suspend-ms", "500", "--request-timeout", "1", "--pull-max-idle-ms", "5000")
        with trio.fail_after(90):
            async with member_group(tmp_path, cluster.namesrv_addr) as group:
                _, _, m3 = [await group.start(f"m{i}", *options) for i in (1, 2, 3)]
                times = {"start": await group.wait_converged(queues, "3 members start")}
                async with feeding(cluster.namesrv_addr, plain) as feeder:
                    await wait_until(lambda: len(m3.msgs()) > 30, "m3 consuming")
                    frozen_with = {(q.broker_name, q.queue_id) for q in m3.assignment or ()}
                    group.pause(m3)
                    frozen_at = trio.current_time()
                    # the broker's scan (every 10 s) drops m3 once silent for 2 s
                    times["dropped"] = await group.wait_converged(queues, "m3 frozen")
                    stopped_at = len(feeder.sent)
                    await wait_until(
                        lambda: len(feeder.sent) > stopped_at + 100, "sends while m3 is out"
                    )
                    await trio.sleep_until(frozen_at + FREEZE_S)  # longer than pull_max_idle
                    group.resume(m3)
                    times["rejoined"] = await group.wait_converged(queues, "m3 back")
                    await wait_until(lambda: len(m3.msgs()) > 60, "m3 consuming again")
                    sent = await feeder.finish()
                await wait_all_consumed(group, sent)
        counts = Counter(e["body"] for e in group.consumed())
        assert set(counts) == set(sent)  # nothing lost, nothing invented
        dups = {body for body, n in counts.items() if n > 1}
        seen_by: defaultdict[str, set[str]] = defaultdict(set)
        queue_of: dict[str, tuple[str, int]] = {}
        for member in group.members:
            for e in member.msgs():
                seen_by[e["body"]].add(member.name)
                queue_of[e["body"]] = (e["queue"][0], e["queue"][1])
        stale = {body for body in dups if "m3" in seen_by[body]}
        print(f"\nfrozen member: sent {len(sent)}, duplicates {len(dups)} ({len(stale)} with m3)"
              f", converged {times}")  # fmt: skip
        # m3 finds its pulls stalled past pull_max_idle_ms: it drops what it had in hand and
        # starts again from the committed offsets, so what the others consumed meanwhile does
        # not come again (a RocketMQ consumer would carry on from where it froze); only what it
        # had pulled before the freeze can, on its own queues
        assert {queue_of[body] for body in stale} <= frozen_with
        assert len(stale) <= 2 * PULL_BATCH * len(frozen_with)
        # any other duplicate follows a handover: its first consumer lost the queue later
        assert_duplicates_follow_handovers(group, allowed=lambda body: body in stale)


async def test_orderly_members_keep_queue_order_and_never_share_a_queue(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
        await create_topic(cluster.brokers["broker-a"].addr, TOPIC, 8)
        queues = topic_queues({"broker-a": 8})
        orderly = ("--orderly", "--handler-ms", "2")
        with trio.fail_after(60):
            async with member_group(tmp_path, cluster.namesrv_addr) as group:
                o1 = await group.start("o1", *orderly)
                times = {"start": await group.wait_converged(queues, "o1 start")}
                async with feeding(cluster.namesrv_addr, keyed(16)) as feeder:
                    await wait_until(lambda: len(o1.msgs()) > 100, "o1 consuming")
                    o2 = await group.start("o2", *orderly)
                    times["join"] = await group.wait_converged(queues, "o2 joined")
                    await wait_until(lambda: len(o2.msgs()) > 100, "o2 consuming")
                    await group.terminate(o1)
                    times["sigterm"] = await group.wait_converged(queues, "o1 left")
                    await wait_until(lambda: len(feeder.sent) >= 800, "800 messages sent")
                    sent = await feeder.finish()
                await wait_all_consumed(group, sent)
        assert {e["body"] for e in group.consumed()} == set(sent)
        assert_no_overlap(group)
        redelivered = assert_queue_order(group)
        print(f"\norderly: sent {len(sent)}, re-delivered {redelivered}, converged {times}")


async def test_orderly_handover_waits_for_a_slow_handler(tmp_path: Path) -> None:
    # o1's handler outlasts the 1 s a dropped queue waits for its in-flight message: o1 must
    # keep the broker lock until its handler returns, so o2 (fast) cannot start early
    async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
        await create_topic(cluster.brokers["broker-a"].addr, TOPIC, 8)
        queues = topic_queues({"broker-a": 8})
        with trio.fail_after(60):
            async with member_group(tmp_path, cluster.namesrv_addr) as group:
                o1 = await group.start("o1", "--orderly", "--handler-ms", "2500")
                await group.wait_converged(queues, "o1 start")
                async with feeding(cluster.namesrv_addr, keyed(16), interval=0) as feeder:
                    await wait_until(lambda: len(feeder.sent) >= 64, "a backlog on every queue")
                    await feeder.finish()

                def busy() -> int:
                    return len({tuple(e["queue"]) for e in o1.events if e["event"] == "begin"})

                await wait_until(lambda: busy() == len(queues), "o1 in a handler on each queue")
                o2 = await group.start("o2", "--orderly", "--handler-ms", "20")
                await group.wait_converged(queues, "o2 joined")
                await wait_until(lambda: len(o1.msgs()) >= 8, "o1's first handlers end")
                await wait_until(lambda: len(o2.msgs()) >= 8, "o2 consumes its queues")
        assert_no_overlap(group)
        assert_queue_order(group)


async def test_broadcasting_members_get_everything_and_resume_after_restart(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
        await create_topic(cluster.brokers["broker-a"].addr, TOPIC, 4)
        queues = topic_queues({"broker-a": 4})
        common = ("--broadcasting", "--offset-dir", str(tmp_path / "offsets"))
        before, after = [f"a{i}" for i in range(100)], [f"b{i}" for i in range(100)]
        with trio.fail_after(60):
            async with member_group(tmp_path, cluster.namesrv_addr) as group:
                b1 = await group.start("b1", *common, "--instance-name", "b1")
                b2 = await group.start("b2", *common, "--instance-name", "b2")
                await wait_until(
                    lambda: b1.assignment == b2.assignment == frozenset(queues), "all queues each"
                )
                await send_bodies(cluster.namesrv_addr, before)
                await wait_until(lambda: set(before) <= set(bodies_of(b2)), "b2 has all")
                await group.terminate(b2)  # persists its offsets as it closes
                await send_bodies(cluster.namesrv_addr, after)
                again = await group.start("b2-again", *common, "--instance-name", "b2")
                await wait_until(lambda: set(after) <= set(bodies_of(again)), "b2 resumed")
                await wait_until(lambda: set(before + after) <= set(bodies_of(b1)), "b1 has all")
                await group.terminate(again)
        assert bodies_of(b1) == Counter(before + after)
        assert bodies_of(b2) == Counter(before)
        # every queue got some of ``after``, and a queue is consumed in offset order, so an old
        # message re-delivered to the restarted member would have come before the new ones
        assert len({tuple(e["queue"]) for e in again.msgs()}) == len(queues)
        assert bodies_of(again) == Counter(after)


async def test_failed_attempts_come_back_through_the_retry_topic(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, {"broker-a": FAST_LEVELS}) as cluster:
        await create_topic(cluster.brokers["broker-a"].addr, TOPIC, 4)
        bodies = [f"r{i}" for i in range(20)]
        with trio.fail_after(60):
            async with member_group(tmp_path, cluster.namesrv_addr) as group:
                r1 = await group.start("r1", "--fail-first", "2")
                await send_bodies(cluster.namesrv_addr, bodies)
                await wait_until(lambda: set(bodies) <= set(bodies_of(r1)), "all succeeded")
                await group.terminate(r1)
        calls: defaultdict[str, list[Event]] = defaultdict(list)
        for e in r1.msgs():
            calls[e["body"]].append(e)
        assert set(calls) == set(bodies)
        for body, seen in calls.items():
            assert [(e["attempt"], e["ok"]) for e in seen] == [(1, False), (2, False), (3, True)]
            assert [e["reconsume"] for e in seen] == [0, 1, 2], body
            assert {e["topic"] for e in seen} == {TOPIC}  # the original topic...
            assert len({e["msg_id"] for e in seen}) == 1  # ...and the original id
