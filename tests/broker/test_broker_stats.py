"""broker.broker_stats: RocketMQ's StatsItem figures (sum, tps, avgpt over a minute, an hour
and a day) with times given as plain numbers."""

from __future__ import annotations

import pytest

from broker.broker_stats import (
    DAY,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    HOUR,
    MINUTE,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStatsManager,
    StatsItem,
    StatsSnapshot,
)


def test_a_batch_counts_its_messages_once_per_request() -> None:
    stats = BrokerStatsManager()
    stats.inc_topic_put("T", 1, 10)
    stats.inc_topic_put("T", 32, 3200)  # one batch
    snap = stats.snapshots(TOPIC_PUT_NUMS, "T", 0.0)
    assert snap is not None
    assert snap["minute"] == StatsSnapshot(33, 3.3, 16.5, 2)  # 33 over the 10 s before now
    size = stats.snapshots(TOPIC_PUT_SIZE, "T", 0.0)
    assert size is not None
    assert size["day"].sum == 3210
    assert size["day"].avgpt == 1605.0


def test_group_items_are_keyed_topic_at_group() -> None:
    stats = BrokerStatsManager()
    stats.inc_group_get("g", "T", 4, 400)
    stats.inc_send_back("g", "T")
    assert stats.item(GROUP_GET_NUMS, "T@g") is not None
    assert stats.item(GROUP_GET_SIZE, "T@g") is not None
    assert stats.item(SNDBCK_PUT_NUMS, "T@g") is not None
    assert stats.item(GROUP_GET_NUMS, "g@T") is None
    assert stats.snapshots("NO_SUCH_STATS", "T", 0.0) is None
    assert stats.snapshots(TOPIC_PUT_NUMS, "T", 0.0) is None  # nothing sent


def test_minute_window_drops_what_is_older_than_its_samples() -> None:
    item = StatsItem()
    for t in range(0, 200, 10):  # a sample every 10 s, 5 messages between two samples
        item.sample(MINUTE, float(t))
        item.add(5)
    # the 7 kept samples run from t=130 (value 65, 13 adds) to t=190; now t=195, value 100
    snap = item.snapshot(MINUTE, 195.0)
    assert snap.sum == 35
    assert snap.tps == pytest.approx(35 / 65)
    assert snap.times == 7
    assert snap.avgpt == 5.0


def test_hour_and_day_windows_sample_at_their_own_intervals() -> None:
    stats = BrokerStatsManager()
    stats.tick(0.0)  # first call: every window samples (nothing counted yet)
    stats.inc_topic_put("T", 10, 0)
    stats.tick(10.0)  # the minute ring samples; the hour ring waits for 600 s
    stats.inc_topic_put("T", 10, 0)
    item = stats.item(TOPIC_PUT_NUMS, "T")
    assert item is not None
    # the minute ring's first sample is preceded by (10 - 10, 0, 0); the hour and day rings
    # have no sample yet: they start an interval before now
    assert item.snapshot(MINUTE, 20.0) == StatsSnapshot(20, 1.0, 10.0, 2)  # from (0, 0, 0)
    assert item.snapshot(HOUR, 20.0).tps == pytest.approx(20 / 600)
    assert item.snapshot(DAY, 20.0).sum == 20
    stats.tick(600.0)  # minute and hour rings sample
    stats.inc_topic_put("T", 5, 0)
    # hour ring: (600 - 600, 0, 0), (600, 20); the minute ring's oldest is (10 - 10, 0, 0)
    assert item.snapshot(HOUR, 610.0).sum == 25
    assert item.snapshot(MINUTE, 610.0).sum == 25  # 7 samples kept: not yet a minute of them


def test_a_window_without_time_has_no_rate() -> None:
    item = StatsItem()
    item.sample(MINUTE, 100.0)
    item.add(3)
    # the made-up first sample is an interval before the first real one
    assert item.snapshot(MINUTE, 100.0) == StatsSnapshot(3, 0.3, 3.0, 1)
    assert StatsItem().snapshot(MINUTE, 5.0) == StatsSnapshot(0, 0.0, 0.0, 0)


def test_deleting_a_topic_or_group_forgets_its_items() -> None:
    stats = BrokerStatsManager()
    stats.inc_topic_put("T", 1, 1)
    stats.inc_topic_put("T2", 1, 1)
    for group in ("g", "g2"):
        stats.inc_group_get(group, "T", 1, 1)
        stats.inc_group_get(group, "T2", 1, 1)
        stats.inc_send_back(group, "T")
    stats.on_topic_deleted("T")
    assert set(stats.totals(TOPIC_PUT_NUMS)) == {"T2"}
    assert set(stats.totals(GROUP_GET_NUMS)) == {"T2@g", "T2@g2"}
    assert stats.totals(SNDBCK_PUT_NUMS) == {}
    stats.on_group_deleted("g")
    assert set(stats.totals(GROUP_GET_SIZE)) == {"T2@g2"}
    assert list(stats.group_totals(GROUP_GET_NUMS)) == [("T2", "g2", 1)]
