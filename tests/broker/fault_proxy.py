"""A loopback fault proxy (the reliability plan's section 5.2): a TCP relay on 127.0.0.1 in
front of one server, which a test can partition.

- :meth:`FaultProxy.blackhole` stops relaying in both directions: bytes already read are held,
  nothing more is read, connections stay open (a network that silently drops everything).
- :meth:`FaultProxy.heal` relays again, held bytes first.
- :meth:`FaultProxy.reset_all` closes every relayed connection (both sides see a reset peer).
"""

from __future__ import annotations

import trio


class FaultProxy:
    """Relays ``127.0.0.1:<port>`` to ``upstream``; see the module docstring."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections = 0
        """Connections accepted so far."""
        self._open = trio.Event()
        self._open.set()
        self._scopes: set[trio.CancelScope] = set()

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"`` once :meth:`run` has started."""
        return f"127.0.0.1:{self.port}"

    def blackhole(self) -> None:
        """Stop relaying (see the module docstring)."""
        if self._open.is_set():
            self._open = trio.Event()

    def heal(self) -> None:
        """Relay again."""
        self._open.set()

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
                        nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                        nursery.start_soon(self._pump, server, client, nursery.cancel_scope)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # a side went away: the other is closed with it
            finally:
                self._scopes.discard(scope)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, both: trio.CancelScope
    ) -> None:
        while True:
            await self._open.wait()
            data = await source.receive_some()
            if not data:
                both.cancel()  # one side closed: close the other
                return
            await self._open.wait()  # a blackhole that began meanwhile holds the bytes
            await sink.send_all(data)
