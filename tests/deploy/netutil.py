"""Small network helpers for the deployment tests."""

from __future__ import annotations

import random
import socket
import urllib.error
import urllib.request
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
EPHEMERAL_LOW = int(_RANGE.read_text().split()[0]) if _RANGE.exists() else 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range.

    For settings where 0 means "off" (``metricsPort``) or must be known up front: a port the
    kernel hands out for ``bind(0)`` or ``connect`` (other servers and clients of the same test)
    cannot collide with it.
    """
    while True:
        port = random.randrange(max(1024, EPHEMERAL_LOW - 12000), EPHEMERAL_LOW)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


async def http_get(url: str) -> tuple[int, str, str]:
    """``GET url`` in a worker thread: (status, content type, body text)."""
    return await trio.to_thread.run_sync(_get, url)


def samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition (parsed by prometheus_client's parser)."""
    return [s for family in text_string_to_metric_families(text) for s in family.samples]
