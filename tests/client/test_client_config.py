"""ClientConfig: the busy-poll window's default, environment override and validation."""

from __future__ import annotations

import pytest

from client.config import ClientConfig
from client.errors import MQClientError
from remoting.busy_poll import DEFAULT_WINDOW_US


def test_busy_poll_defaults_to_the_window_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MINIMQ_BUSY_POLL_US", raising=False)
    assert ClientConfig(namesrv_addrs=("127.0.0.1:9876",)).busy_poll_us in (0, DEFAULT_WINDOW_US)
    monkeypatch.setenv("MINIMQ_BUSY_POLL_US", "0")
    assert ClientConfig(namesrv_addrs=("127.0.0.1:9876",)).busy_poll_us == 0
    explicit = ClientConfig(namesrv_addrs=("127.0.0.1:9876",), busy_poll_us=30)
    assert explicit.busy_poll_us == 30


def test_bad_busy_poll_settings_are_client_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MQClientError, match="busy_poll_us"):
        ClientConfig(namesrv_addrs=("127.0.0.1:9876",), busy_poll_us=-1)
    monkeypatch.setenv("MINIMQ_BUSY_POLL_US", "lots")
    with pytest.raises(MQClientError, match="MINIMQ_BUSY_POLL_US"):
        ClientConfig(namesrv_addrs=("127.0.0.1:9876",))
