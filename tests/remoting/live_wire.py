"""A live name server and broker on a background trio thread, and a blocking wire client.

Property-based tests run their examples one after another in plain (synchronous) test
functions, and starting a broker per example would cost seconds each. So
:class:`LiveServers` runs one in-process :class:`~namesrv.server.NameServer` and one
:class:`~broker.controller.BrokerController` (127.0.0.1, port 0) in ``trio.run`` on a thread
for the whole test, and :class:`WireClient` talks to them over a real socket with the frame
codec: it sends well-framed commands whose contents are anything a test wants (headers of any
type, bodies of any bytes, raw frames) and reads back what the server answers.

Every log record of level WARNING or more emitted meanwhile is kept in
:attr:`LiveServers.records`, so a test can check that no request made a server log an error.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import msgpack
import trio

from broker.controller import BrokerController
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.codes import LanguageCode
from remoting.command import RemotingCommand
from remoting.frame import LENGTH_SIZE, FrameDecoder
from tests.broker.inprocess import running_broker

LIMIT: Final = 30.0
"""Upper bound of any wait: starting the servers, one answer, one close."""

_ONEWAY_FLAG: Final = 2


class _Records(logging.Handler):
    """Keeps every record it is given (thread-safe: logging locks around ``emit``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class LiveServers:
    """A name server and a broker served by ``trio.run`` on a thread (see the module doc)."""

    def __init__(self, root: Path, overrides: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.overrides = dict(overrides or {})
        self.namesrv_addr = ""
        self.broker_addr = ""
        self.broker: BrokerController | None = None
        self.namesrv_codes: frozenset[int] = frozenset()
        self.broker_codes: frozenset[int] = frozenset()
        self.crash: BaseException | None = None
        """What ``trio.run`` raised, if the servers' task tree ever crashed."""
        self._log = _Records()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-servers", daemon=True)
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None

    @property
    def records(self) -> list[logging.LogRecord]:
        """The WARNING-or-worse log records emitted since :meth:`start`."""
        return self._log.records

    def errors_since(self, mark: int) -> list[str]:
        """The ERROR-or-worse records after the first ``mark`` ones, with their exceptions."""
        return [
            f"{r.name}: {r.getMessage()}" + (f" [{r.exc_info[1]!r}]" if r.exc_info else "")
            for r in self.records[mark:]
            if r.levelno >= logging.ERROR
        ]

    def start(self) -> None:
        """Start the thread; return once both servers listen (or raise what stopped them)."""
        logging.getLogger().addHandler(self._log)
        self._thread.start()
        if not self._started.wait(LIMIT) or self.crash is not None:
            raise RuntimeError(f"live servers did not start: {self.crash!r}")

    def stop(self) -> None:
        """Cancel the servers and wait for the thread; raise if their task tree crashed."""
        try:
            if self._token is not None and self._scope is not None:
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
            self._thread.join(LIMIT)
            if self._thread.is_alive():
                raise RuntimeError("live servers did not stop")
        finally:
            logging.getLogger().removeHandler(self._log)
        if self.crash is not None:
            raise RuntimeError("the live servers crashed") from self.crash

    def alive(self) -> bool:
        """True while the servers' thread runs and nothing crashed."""
        return self._thread.is_alive() and self.crash is None

    def _run(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # noqa: BLE001 - reported by stop() and alive()
            self.crash = exc
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        namesrv = NameServer(
            NamesrvConfig(
                listen_port=0,
                bind_address="127.0.0.1",
                kv_config_path=str(self.root / "namesrv" / "kvConfig.json"),
                config_store_path=str(self.root / "namesrv" / "namesrv.properties"),
            )
        )
        with trio.CancelScope() as self._scope:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(namesrv.run)
                self.namesrv_addr = f"127.0.0.1:{port}"
                self.namesrv_codes = frozenset(namesrv.processor.handlers())
                async with running_broker(
                    self.root, self.namesrv_addr, overrides=self.overrides
                ) as (
                    broker,
                    addr,
                ):
                    assert broker.server is not None
                    self.broker_addr, self.broker = addr, broker
                    self.broker_codes = frozenset(broker.server.handlers)
                    self._started.set()
                    await trio.sleep_forever()


def command_map(
    code: int,
    opaque: int,
    ext: Mapping[Any, Any] | None = None,
    body: object = b"",
    *,
    flag: int = 0,
) -> dict[str, Any]:
    """A command as the wire map, with ``ext`` and ``body`` of any type (nothing checked)."""
    wire: dict[str, Any] = {
        "code": code,
        "language": int(LanguageCode.PYTHON),
        "version": 0,
        "opaque": opaque,
        "flag": flag,
    }
    if ext:
        wire["extFields"] = dict(ext)
    if body != b"":
        wire["body"] = body
    return wire


def frame_of(payload: object) -> bytes:
    """The frame carrying ``payload``: raw bytes as they are, anything else msgpack-packed."""
    data = payload if isinstance(payload, bytes) else msgpack.packb(payload, use_bin_type=True)
    return len(data).to_bytes(LENGTH_SIZE, "big") + data


class ConnectionClosedError(Exception):
    """The server closed the connection while an answer was awaited."""


class WireClient:
    """One blocking connection to a server; commands go out as they are given."""

    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=LIMIT)
        self.sock.settimeout(LIMIT)
        self.decoder = FrameDecoder()
        self._opaques = itertools.count(1)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def next_opaque(self) -> int:
        """A fresh request id."""
        return next(self._opaques)

    def send_frame(self, data: bytes) -> None:
        """Write raw bytes."""
        self.sock.sendall(data)

    def receive(self) -> RemotingCommand | None:
        """The next command the server sends; None when it closed the connection (EOF or
        reset). Raises ``TimeoutError`` when it stays silent for :data:`LIMIT` seconds."""
        while True:
            command = self.decoder.next_command()
            if command is not None:
                return command
            if self.decoder.at_eof:
                return None
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            self.decoder.receive_data(data)

    def receive_response(self) -> RemotingCommand | None:
        """The next response, skipping the requests the server sends us meanwhile (a
        heartbeat makes us a consumer, told of group changes); None when it closed."""
        while True:
            command = self.receive()
            if command is None or command.is_response:
                return command

    def closed_by_server(self) -> bool:
        """Half-close our side, then read to the end: True when the server closed the
        connection without sending anything else (a protocol error, or our EOF)."""
        self.sock.shutdown(socket.SHUT_WR)
        return self.receive() is None

    def call(
        self, code: int, ext: Mapping[Any, Any] | None = None, body: object = b""
    ) -> RemotingCommand:
        """Send one request and return its answer (ConnectionClosedError if none comes)."""
        opaque = self.next_opaque()
        self.send_frame(frame_of(command_map(code, opaque, ext, body)))
        answer = self.receive_response()
        if answer is None:
            raise ConnectionClosedError(f"code {code}: connection closed instead of an answer")
        assert answer.opaque == opaque, (answer.opaque, opaque)
        return answer

    def send_oneway(
        self, code: int, ext: Mapping[Any, Any] | None = None, body: object = b""
    ) -> None:
        """Send one oneway request (nothing comes back)."""
        opaque = self.next_opaque()
        self.send_frame(frame_of(command_map(code, opaque, ext, body, flag=_ONEWAY_FLAG)))


@contextmanager
def wire_client(addr: str) -> Iterator[WireClient]:
    """A :class:`WireClient`, closed on exit."""
    client = WireClient(addr)
    try:
        yield client
    finally:
        client.close()
