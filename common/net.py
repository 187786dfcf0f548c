"""Host address and listening helpers shared by the servers and the client."""

from __future__ import annotations

import socket

import trio


def primary_ipv4() -> str:
    """The address of the default route's interface (no packet is sent); 127.0.0.1 on failure."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 1))
            addr = sock.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    return addr if isinstance(addr, str) and addr != "0.0.0.0" else "127.0.0.1"


async def open_listeners(port: int, host: str, setting: str) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners`` whose OSError names ``setting`` and the address: with two
    ports to bind (``listenPort``, ``metricsPort``), "address already in use" alone does not
    say which one is taken."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OSError(exc.errno, f"{setting} {host}:{port}: {reason}") from exc
