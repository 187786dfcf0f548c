"""client.consumer_stats: RocketMQ's ConsumerStatsManager figures (consumeStatus) with times
given as plain numbers."""

from __future__ import annotations

import pytest

from client.consumer_stats import CONSUME_OK_TPS, ConsumerStatsManager
from remoting.consumer_bodies import ConsumeStatus


def test_figures_over_the_minute_and_the_hour() -> None:
    stats = ConsumerStatsManager()
    stats.tick(0.0)  # no item yet: an item counts from now - 10 s until it is sampled
    stats.inc_pull("g", "T", rt_ms=10, msgs=32)
    stats.inc_pull("g", "T", rt_ms=30, msgs=0)  # FOUND, but every message filtered out
    stats.inc_consume("g", "T", rt_ms=90, calls=3, ok=2, failed=1)
    status = stats.consume_status("g", "T", 5.0)  # the minute spans -5 .. 5
    assert status == ConsumeStatus(
        pull_rt=20.0,  # 40 ms over 2 pulls
        pull_tps=pytest.approx(3.2),
        consume_rt=30.0,  # 90 ms over 3 calls
        consume_ok_tps=pytest.approx(0.2),
        consume_failed_tps=pytest.approx(0.1),
        consume_failed_msgs=1,  # over the hour
    )
    for now in range(10, 90, 10):  # the minute ring keeps 7 samples: the counts leave it
        stats.tick(float(now))
    later = stats.consume_status("g", "T", 85.0)
    assert (later.pull_rt, later.pull_tps, later.consume_ok_tps) == (0.0, 0.0, 0.0)
    assert later.consume_rt == 30.0  # RocketMQ's getConsumeRT: the hour's, when the minute's is 0
    assert later.consume_failed_msgs == 1
    assert stats.consume_status("g", "Other", 85.0) == ConsumeStatus()
    assert stats.consume_status("other-group", "T", 85.0) == ConsumeStatus()


def test_a_closed_groups_items_go() -> None:
    stats = ConsumerStatsManager()
    stats.inc_consume("g", "T", rt_ms=1, calls=1, ok=1, failed=0)
    stats.inc_consume("xg", "T", rt_ms=1, calls=1, ok=1, failed=0)
    stats.forget_group("g")
    assert list(stats.tables[CONSUME_OK_TPS]) == ["T@xg"]
