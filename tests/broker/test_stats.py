"""broker.stats: the rates operators see (``putTps``, ``getTransferedTps``) are counts over
time windows, as RocketMQ's StoreStatsService, not a per-round average."""

from __future__ import annotations

import pytest

from broker.stats import StoreStats, Totals


def test_rates_over_each_window() -> None:
    stats = StoreStats()
    for second in range(0, 601):
        # 100 puts a second for the first 540 s, then 10 a second; reads at half the rate
        put = 100 * min(second, 540) + 10 * max(0, second - 540)
        stats.sample(Totals(float(second), put, put // 2))
    now = Totals(600.0, 100 * 540 + 10 * 60, (100 * 540 + 10 * 60) // 2)
    fields = stats.runtime_fields(now)
    ten, sixty, six_hundred = (float(x) for x in fields["putTps"].split())
    assert ten == pytest.approx(10.0)
    assert sixty == pytest.approx(10.0)
    assert six_hundred == pytest.approx((100 * 540 + 10 * 60) / 600)
    assert float(fields["getTransferedTps"].split()[0]) == pytest.approx(5.0)


def test_a_few_messages_on_an_idle_broker_are_a_few_a_second_at_most() -> None:
    """Three messages, two of them 0.5 ms apart: the figure is about three per window, not
    the thousands a second the gap between the two suggests."""
    stats = StoreStats()
    for second in range(0, 12):
        stats.sample(Totals(float(second), 1 if second >= 1 else 0, 0))
    stats.sample(Totals(12.0, 3, 0))
    ten = float(stats.runtime_fields(Totals(12.5, 3, 0))["putTps"].split()[0])
    assert ten == pytest.approx(2 / 10.5, abs=0.01)  # 2 messages since the sample 10.5 s ago


def test_a_young_broker_measures_from_its_first_sample() -> None:
    stats = StoreStats()
    assert stats.runtime_fields(Totals(0.0, 0, 0))["putTps"] == "0.00 0.00 0.00"
    stats.sample(Totals(0.0, 0, 0))
    assert stats.runtime_fields(Totals(0.0, 5, 0))["putTps"] == "0.00 0.00 0.00"
    stats.sample(Totals(1.0, 40, 0))
    assert stats.runtime_fields(Totals(2.0, 80, 0))["putTps"] == "40.00 40.00 40.00"
