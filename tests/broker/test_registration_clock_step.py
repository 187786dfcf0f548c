"""A broker whose wall clock steps back during its run: its topic table's data versions keep
moving forward in both fields, so the name server still refuses the late delivery of an
earlier table (the reliability plan's R9).

Real in-process name server and broker on 127.0.0.1 (see ``test_registration_version``); the
step is made where the wall clock is read, ``time.time`` and ``time.time_ns``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.broker.test_registration_version import (
    applied_version,
    cluster,
    deliver_late,
    routed_queue,
    update_topic,
)

STEP_BACK_S = 60


def step_the_wall_clock_back(monkeypatch: pytest.MonkeyPatch, seconds: int) -> None:
    """From now on, the wall clock reads ``seconds`` earlier (as after an NTP step)."""
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() - seconds)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() - seconds * 1_000_000_000)


async def test_a_late_older_registration_after_the_clock_stepped_back_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table changed (4 queues), the clock stepped back 60 s, the table changed again
    (8 queues): the first registration, delivered late, used to replace the newer table (its
    timestamp was the later one, so it did not look older)."""
    async with cluster(tmp_path) as (namesrv, broker, addr, client):
        assert broker.topics is not None
        await update_topic(client, addr, 4)
        old_table, old_version = broker.topics.topics(), broker.topics.current_version()
        step_the_wall_clock_back(monkeypatch, STEP_BACK_S)
        await update_topic(client, addr, 8)
        new_version = broker.topics.current_version()
        assert new_version.counter > old_version.counter
        assert new_version.timestamp >= old_version.timestamp
        assert applied_version(namesrv, addr) == new_version

        await deliver_late(client, namesrv, broker, old_table, old_version)
        assert await routed_queue(client, namesrv) == (8, 6)
        assert applied_version(namesrv, addr) == new_version
