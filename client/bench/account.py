"""The ACL account the benchmark's clients sign with (``--access-key`` / ``--secret-key``, or
``MINIMQ_ACCESS_KEY`` / ``MINIMQ_SECRET_KEY``, else ``$ROCKETMQ_HOME/conf/tools.yml``, as for
``mqadmin``), carried to the worker processes in their specs. Without one (the default)
clients are built exactly as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

from client.config import ClientConfig
from client.instance import ClientInstance


@dataclass(frozen=True, slots=True)
class Account:
    """An ACL account (picklable); the secret stays out of ``repr``."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)

    def config(self, namesrv: str) -> ClientConfig:
        """The client config for ``namesrv`` signing with this account (none: unsigned; TLS
        from the environment as :meth:`ClientConfig.create` reads it)."""
        return ClientConfig.create(namesrv, access_key=self.access_key, secret_key=self.secret_key)

    @asynccontextmanager
    async def instance(self, namesrv: str) -> AsyncIterator[ClientInstance]:
        """A running :class:`ClientInstance` of :meth:`config`, for ``instance=``."""
        async with ClientInstance(self.config(namesrv)) as instance:
            yield instance


NO_ACCOUNT: Final = Account()
"""Unsigned requests (a cluster with ACL off)."""
