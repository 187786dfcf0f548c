"""A loopback fault proxy (the reliability plan's section 5.2): a TCP relay on 127.0.0.1 in
front of one server, which a test can partition.

- :meth:`FaultProxy.blackhole` stops relaying, in both directions or in one: bytes already read
  are held, nothing more is read that way, connections stay open (a network that silently drops
  packets, so TCP retransmits until the link is back). ``"requests"`` blocks client to server
  only, ``"responses"`` server to client only: requests arrive and are acted on, but their
  answers do not come back.
- :meth:`FaultProxy.heal` relays again, held bytes first.
- :meth:`FaultProxy.reset_all` closes every relayed connection (both sides see a reset peer).

The upstream may be set after the proxy starts (``proxy.upstream = (host, port)``), so a broker
can be told to advertise the proxy's port before the broker itself has bound one.
"""

from __future__ import annotations

from typing import Literal

import trio

Direction = Literal["both", "requests", "responses"]


class FaultProxy:
    """Relays ``127.0.0.1:<port>`` to ``upstream``; see the module docstring."""

    def __init__(self, upstream_host: str = "127.0.0.1", upstream_port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections = 0
        """Connections accepted so far."""
        self._gates = {"requests": trio.Event(), "responses": trio.Event()}
        for gate in self._gates.values():
            gate.set()
        self._scopes: set[trio.CancelScope] = set()

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"`` once :meth:`run` has started."""
        return f"127.0.0.1:{self.port}"

    def blackhole(self, direction: Direction = "both") -> None:
        """Stop relaying ``direction`` (see the module docstring)."""
        for name in ("requests", "responses"):
            if direction in ("both", name) and self._gates[name].is_set():
                self._gates[name] = trio.Event()

    def heal(self) -> None:
        """Relay both ways again."""
        for gate in self._gates.values():
            gate.set()

    def reset_all(self) -> None:
        """Close every relayed connection."""
        for scope in list(self._scopes):
            scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; ``task_status.started`` gets the port."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._relay, listeners, handler_nursery=nursery)

    async def _relay(self, client: trio.SocketStream) -> None:
        self.connections += 1
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                async with client:
                    server = await trio.open_tcp_stream(*self.upstream)
                    async with server, trio.open_nursery() as nursery:
                        both = nursery.cancel_scope
                        nursery.start_soon(self._pump, client, server, "requests", both)
                        nursery.start_soon(self._pump, server, client, "responses", both)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # a side went away: the other is closed with it
            finally:
                self._scopes.discard(scope)

    async def _pump(
        self,
        source: trio.SocketStream,
        sink: trio.SocketStream,
        direction: Literal["requests", "responses"],
        both: trio.CancelScope,
    ) -> None:
        try:
            while True:
                await self._gates[direction].wait()
                data = await source.receive_some()
                if not data:
                    break
                await self._gates[direction].wait()  # a blackhole that began meanwhile holds them
                await sink.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a side reset or went away
        both.cancel()  # one side closed: close the other
