"""ClientConfig: the busy-poll window's default, environment override and validation."""

from __future__ import annotations

import os
import pickle

import pytest

from client.config import ClientConfig
from client.errors import MQClientError
from client.instance import ClientInstance
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


def test_instances_of_one_config_get_client_ids_of_their_own() -> None:
    """A config built once (at import time, before a fork, or pickled to worker processes)
    must not give every client instance the same id: the brokers would see one member, and
    each would own every queue."""
    config = ClientConfig(namesrv_addrs=("127.0.0.1:9876",), client_ip="10.0.0.1")
    restored = pickle.loads(pickle.dumps(config))
    ids = {ClientInstance(c).client_id for c in (config, config, restored)}
    assert len(ids) == 3
    assert all(i.startswith(f"10.0.0.1@{os.getpid()}#") for i in ids)
    named = ClientConfig(namesrv_addrs=("127.0.0.1:9876",), client_ip="10.0.0.1", instance_name="w")
    assert ClientInstance(named).client_id == ClientInstance(named).client_id == "10.0.0.1@w"


def test_the_trio_client_under_asyncio_says_what_to_use_instead() -> None:
    """client.aio is trio-native: from asyncio a clear error, not trio's internals."""
    import asyncio

    async def under_asyncio() -> None:
        config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
        async with ClientInstance(config):
            pass

    with pytest.raises(RuntimeError, match="blocking client"):
        asyncio.run(under_asyncio())
