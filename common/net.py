"""Host address helpers shared by broker and client."""

from __future__ import annotations

import socket


def primary_ipv4() -> str:
    """The address of the default route's interface (no packet is sent); 127.0.0.1 on failure."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 1))
            addr = sock.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    return addr if isinstance(addr, str) and addr != "0.0.0.0" else "127.0.0.1"
