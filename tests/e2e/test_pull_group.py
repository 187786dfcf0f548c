"""Pull-consumer groups (``PullConsumer.subscribe``, the blocking API) of real processes:
``mqnamesrv``, ``mqbroker`` and one ``python -m tests.e2e.pull_member`` process per member,
each reporting its assignment and every message its polls returned as JSON lines on stdout.

- Members join, leave cleanly (SIGTERM) and are killed (SIGKILL) while a producer sends: after
  each change every queue has exactly one owner; nothing sent is lost, and every message that
  came twice was first returned to a member that later lost its queue.
- The reliability plan's R3 stale owner: a member SIGSTOPped past the broker's
  ``channelExpiredTimeout`` and its own ``pull_max_idle_ms`` is dropped and its queues go to the
  others. On SIGCONT it drops what it had pulled and starts again from the committed offsets,
  so no poll after the freeze returns a message the others had already consumed.

Every wait has a deadline; every process is killed by pid when a test ends.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import trio

from client import Message, MessageQueue, api
from remoting.client import RemotingClient
from tests.broker.inprocess import wait_until
from tests.e2e.cluster import LIMIT, create_topic, running_cluster
from tests.e2e.push_group import (
    GROUP,
    TOPIC,
    assert_duplicates_follow_handovers,
    feeding,
    member_group,
    plain,
    topic_queues,
    wait_all_consumed,
)

MEMBER = "tests.e2e.pull_member"
FAST = ("--heartbeat-interval", "0.3", "--suspend-ms", "500", "--request-timeout", "1")
"""Member options: members heartbeat often and their parked pulls come back quickly."""
PULL_BATCH = 32
"""The members' ``pull_batch_size`` (the default)."""
FREEZE_S = 6.0
"""How long the frozen member stays stopped at least: past its ``pull_max_idle_ms`` (4 s)."""


async def test_pull_members_share_the_queues_through_joins_and_leaves(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, {"broker-a": {}, "broker-b": {}}) as cluster:
        for broker in cluster.brokers.values():
            await create_topic(broker.addr, TOPIC, 4)
        queues = topic_queues({"broker-a": 4, "broker-b": 4})
        options = (*FAST, "--auto-commit-interval", "0.5")
        with trio.fail_after(90):
            async with member_group(tmp_path, cluster.namesrv_addr, MEMBER) as group:
                p1, p2 = [await group.start(f"p{i}", *options) for i in (1, 2)]
                times = {"start": await group.wait_converged(queues, "2 members start")}
                async with feeding(cluster.namesrv_addr, plain) as feeder:
                    await wait_until(lambda: len(p1.msgs()) > 20, "p1 consuming")
                    p3 = await group.start("p3", *options)
                    times["join"] = await group.wait_converged(queues, "p3 joined")
                    await wait_until(lambda: len(p3.msgs()) > 20, "p3 consuming")
                    await group.terminate(p1)
                    times["sigterm"] = await group.wait_converged(queues, "p1 left")
                    await group.kill(p2)
                    times["sigkill"] = await group.wait_converged(queues, "p2 killed")
                    await wait_until(lambda: len(feeder.sent) >= 600, "600 messages sent")
                    sent = await feeder.finish()
                await wait_all_consumed(group, sent)
        counts = Counter(e["body"] for e in group.consumed())
        assert set(counts) == set(sent)  # nothing lost, nothing invented
        dups = sum(n - 1 for n in counts.values())
        print(f"\npull group: sent {len(sent)}, duplicates {dups}, converged {times}")
        assert_duplicates_follow_handovers(group)


def later(i: int) -> tuple[Message, str | None]:
    """Message ``i`` of the second feeder: bodies apart from the first one's."""
    return plain(i + 1_000_000)


async def committed_offsets(broker_addr: str, queues: list[MessageQueue]) -> dict[int, int]:
    """The group's committed offset of each of ``queues`` (by queue id; -1: none), asked of
    the broker directly (a consumer of the group would count as a member)."""
    out = {}
    async with RemotingClient(default_timeout_s=LIMIT) as client:
        for mq in queues:
            resp = await client.invoke(broker_addr, api.query_offset_request(GROUP, mq))
            offset = api.parse_query_offset(resp, broker_addr)
            out[mq.queue_id] = -1 if offset is None else offset
    return out


async def test_a_frozen_pull_member_returns_nothing_stale(tmp_path: Path) -> None:
    expiry = {"channelExpiredTimeout": "2000"}
    async with running_cluster(tmp_path, {"broker-a": expiry}) as cluster:
        broker = cluster.brokers["broker-a"].addr
        await create_topic(broker, TOPIC, 8)
        queues = topic_queues({"broker-a": 8})
        options = (*FAST, "--auto-commit-interval", "0.5", "--pull-max-idle-ms", "4000")
        with trio.fail_after(90):
            async with member_group(tmp_path, cluster.namesrv_addr, MEMBER) as group:
                _, _, m3 = [await group.start(f"m{i}", *options) for i in (1, 2, 3)]
                times = {"start": await group.wait_converged(queues, "3 members start")}
                async with feeding(cluster.namesrv_addr, plain) as feeder:
                    await wait_until(lambda: len(m3.msgs()) > 30, "m3 consuming")
                    before = await feeder.finish()
                # m3 has returned everything of its queues: no poll is handing anything out
                # when the SIGSTOP comes, so its events' times tell before from after exactly
                await wait_all_consumed(group, before)
                frozen_with = sorted(m3.assignment or ())
                group.pause(m3)
                paused_at, frozen_at = time.time(), trio.current_time()
                async with feeding(cluster.namesrv_addr, later) as feeder:
                    # the broker's scan (every 10 s) drops m3 once silent for 2 s
                    times["dropped"] = await group.wait_converged(queues, "m3 frozen")
                    # the queues' new owners consume and commit well past what m3 had taken
                    reported = Counter({e["queue"][1]: e["offset"] for e in m3.msgs()})
                    commits: dict[int, int] = {}

                    async def overtaken() -> bool:
                        commits.update(await committed_offsets(broker, frozen_with))
                        return all(o > reported[q] + PULL_BATCH for q, o in commits.items())

                    await wait_until(overtaken, "the others committed past m3")
                    await trio.sleep_until(frozen_at + FREEZE_S)  # longer than pull_max_idle
                    resumed_at = time.time()
                    group.resume(m3)
                    times["rejoined"] = await group.wait_converged(queues, "m3 back")
                    n = len(m3.msgs())
                    await wait_until(lambda: len(m3.msgs()) > n + 30, "m3 consuming again")
                    sent = before + await feeder.finish()
                await wait_all_consumed(group, sent)
        counts = Counter(e["body"] for e in group.consumed())
        assert set(counts) == set(sent)  # nothing lost, nothing invented
        dups = sum(n - 1 for n in counts.values())
        # a poll returns at a time m3 runs: before the SIGSTOP or after the SIGCONT
        after = [e for e in m3.msgs() if e["t1"] > resumed_at]
        assert all(e["t1"] < paused_at for e in m3.msgs() if e["t1"] <= resumed_at)
        first: dict[int, int] = {}
        for e in after:
            first.setdefault(e["queue"][1], e["offset"])
        print(f"\nfrozen pull member: sent {len(sent)}, duplicates {dups}, the others "
              f"committed {commits} while it was stopped, it started again from {first}, "
              f"converged {times}")  # fmt: skip
        # what m3 had pulled before the freeze, and what followed on its old queues, went to the
        # others meanwhile, who committed past it: once it runs again, m3 starts those queues
        # from the committed offsets (or later), never from where it was
        stale = [e for e in after if e["offset"] < commits.get(e["queue"][1], -1)]
        assert not stale, (stale[:3], commits)
        # any duplicate follows a handover: its first consumer lost the queue later
        assert_duplicates_follow_handovers(group)
