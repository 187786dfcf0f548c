"""In-process BrokerController (and NameServer) on 127.0.0.1 port 0 for end-to-end tests."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from broker.config import BrokerConfig
from broker.controller import BrokerController
from common.record import encode_properties
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import ExtValue, RemotingCommand

LIMIT = 20.0
SMALL_STORE = {
    "mappedFileSizeCommitLog": "1048576",
    "mappedFileSizeConsumeQueue": "6000",
    "maxHashSlotNum": "100",
    "maxIndexNum": "400",
}
_opaque = itertools.count(1)


def req(code: int, body: bytes = b"", **ext: ExtValue) -> RemotingCommand:
    """A request with a fresh opaque."""
    return RemotingCommand.request(code, ext, body, opaque=next(_opaque))


def send_req(topic: str, body: bytes, queue_id: int = 0, tag: str | None = None) -> RemotingCommand:
    """SEND_MESSAGE of ``body`` to ``topic``/``queue_id`` (with ``tag`` as TAGS)."""
    props = encode_properties({"TAGS": tag}).decode() if tag else ""
    return req(
        RequestCode.SEND_MESSAGE,
        body,
        producerGroup="pg",
        topic=topic,
        queueId=str(queue_id),
        bornTimestamp="1700000000000",
        properties=props,
    )


async def wait_until(
    cond: Callable[[], bool | Awaitable[bool]],
    what: str,
    *,
    limit: float = LIMIT,
    every: float = 0.01,
) -> None:
    """Poll ``cond`` every ``every`` seconds until true; fail after ``limit`` seconds (trio
    time: virtual under an autojump clock)."""
    with trio.move_on_after(limit):
        while True:
            value = cond()
            if not isinstance(value, bool):
                value = await value
            if value:
                return
            await trio.sleep(every)
    raise AssertionError(f"timed out after {limit:g} s waiting for {what}")


@asynccontextmanager
async def running_namesrv() -> AsyncIterator[str]:
    """A NameServer; yields its address."""
    namesrv = NameServer(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(namesrv.run)
        yield f"127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def running_broker(
    tmp_path: Path,
    namesrv_addr: str | None = None,
    *,
    hold_check_interval_s: float = 3600.0,
    overrides: Mapping[str, str] | None = None,
) -> AsyncIterator[tuple[BrokerController, str]]:
    """A BrokerController under ``tmp_path``; yields it and its address.

    Parked pulls re-check only every ``hold_check_interval_s`` (an hour by default), so only an
    arrival notification can answer them early.
    """
    props = {
        "listenPort": "0",
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(tmp_path / "store"),
        **SMALL_STORE,
        **(overrides or {}),
    }
    if namesrv_addr is not None:
        props["namesrvAddr"] = namesrv_addr
    broker = BrokerController(BrokerConfig.from_properties(props), host="127.0.0.1")
    broker.hold_check_interval_s = hold_check_interval_s
    async with trio.open_nursery() as nursery:
        port = await nursery.start(broker.run)
        yield broker, f"127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def broker_and_client(
    tmp_path: Path,
) -> AsyncIterator[tuple[BrokerController, str, RemotingClient]]:
    """:func:`running_broker` plus a connected-on-demand client."""
    async with (
        running_broker(tmp_path) as (broker, addr),
        RemotingClient(default_timeout_s=LIMIT) as client,
    ):
        yield broker, addr, client
