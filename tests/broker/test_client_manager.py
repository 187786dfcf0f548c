"""ClientManager: the pure producer / consumer group table (no I/O, explicit clock)."""

from __future__ import annotations

from broker.client_manager import ClientChannelInfo, ClientManager
from common.subscription import build_subscription
from remoting.client_bodies import ConsumerData, MessageModel

EXPIRED_MS = 120_000


def info(client_id: str, channel: str, now: int) -> ClientChannelInfo[str]:
    return ClientChannelInfo(channel, client_id, 3, 1, now)


def data(group: str = "cg", expr: str = "*", **kw: object) -> ConsumerData:
    return ConsumerData(group, subscriptions=(build_subscription("T", expr),), **kw)  # type: ignore[arg-type]


def test_register_refresh_and_membership_flags() -> None:
    m: ClientManager[str] = ClientManager(EXPIRED_MS)
    assert m.register_consumer(data(), info("c1", "ch1", 0)) is True
    assert m.register_consumer(data(), info("c2", "ch2", 0)) is True
    # refresh, even on a new connection: same members
    assert m.register_consumer(data(), info("c1", "ch1b", 10)) is False
    assert m.consumer_ids("cg") == ["c1", "c2"]
    assert sorted(m.consumer_channels("cg")) == ["ch1b", "ch2"]
    assert m.consumer_ids("other") == []


def test_newest_heartbeat_wins_for_group_data() -> None:
    m: ClientManager[str] = ClientManager(EXPIRED_MS)
    m.register_consumer(data(expr="A"), info("c1", "ch1", 0))
    newer = data(expr="A || B", message_model=MessageModel.BROADCASTING)
    m.register_consumer(newer, info("c2", "ch2", 5))
    assert m.consumer_data("cg") == newer
    assert m.consumer_data("none") is None


def test_unregister() -> None:
    m: ClientManager[str] = ClientManager(EXPIRED_MS)
    m.register_consumer(data(), info("c1", "ch1", 0))
    m.register_producer("pg", info("c1", "ch1", 0))
    assert m.unregister_consumer("cg", "nobody") is False
    assert m.unregister_consumer("nogroup", "c1") is False
    assert m.unregister_consumer("cg", "c1") is True
    assert "cg" not in m.consumers  # an emptied group disappears
    m.unregister_producer("pg", "c1")
    m.unregister_producer("pg", "c1")
    assert m.producer_ids("pg") == []
    assert "pg" not in m.producers


def test_scan_expires_silent_clients_only() -> None:
    m: ClientManager[str] = ClientManager(EXPIRED_MS)
    m.register_consumer(data(), info("old", "ch1", 0))
    m.register_consumer(data(), info("fresh", "ch2", 0))
    m.register_producer("pg", info("old", "ch1", 0))
    m.register_consumer(data(), info("fresh", "ch2", 100_000))  # heartbeat refreshes
    assert m.scan(EXPIRED_MS) == set()  # exactly at the limit: kept
    assert m.scan(EXPIRED_MS + 1) == {"cg"}
    assert m.consumer_ids("cg") == ["fresh"]
    assert m.producer_ids("pg") == []
    assert m.scan(EXPIRED_MS + 2) == set()  # nothing changed again


def test_scan_drops_closed_channels_and_drop_channel() -> None:
    m: ClientManager[str] = ClientManager(EXPIRED_MS)
    m.register_consumer(data("g1"), info("c1", "ch1", 0))
    m.register_consumer(data("g2"), info("c1", "ch1", 0))
    m.register_consumer(data("g2"), info("c2", "ch2", 0))
    assert m.scan(1, is_closed=lambda ch: ch == "ch2") == {"g2"}
    assert m.consumer_ids("g2") == ["c1"]
    assert m.drop_channel("ch1") == {"g1", "g2"}
    assert m.consumers == {}
    assert m.drop_channel("ch1") == set()
