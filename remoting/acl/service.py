"""The ACL of one server process (broker or name server): the accounts file, its reloads and
the validator (RocketMQ's ``PlainPermissionManager`` with ``AclFileWatchService``).

Rules:

- :class:`AclService` loads the file when built: a missing or malformed file raises
  :class:`~remoting.acl.config.AclConfigError` (a ``ValueError``), so the server refuses to
  start with a clear error. A file the group or others may read is warned about (it holds
  every account's secret; chmod 600).
- :meth:`AclService.watch` checks the file every :data:`WATCH_INTERVAL_S` (RocketMQ's
  ``AclFileWatchService.WATCH_INTERVAL``, 5 s) and reloads it when its modification time,
  size or inode changed (:class:`common.file_watch.FileWatch`, which the TLS reload uses too;
  a deleted file is no change until a new one takes its place); :meth:`AclService.reload`
  reloads at once (SIGHUP). A file that became malformed or unreadable is logged as an error
  and the accounts in force stay.
- The file is small and read on the event loop (a stat every 5 s, a read on change).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

from common.file_watch import FileWatch
from remoting.acl.config import AclConfigError, load_acl_config, readable_by_others
from remoting.acl.signing import wall_ms
from remoting.acl.validator import AclValidator

log = logging.getLogger(__name__)

WATCH_INTERVAL_S: Final = 5.0
"""How often the accounts file is checked for changes (RocketMQ's 5000 ms)."""


class AclService:
    """The accounts file of one server and the validator built from it (module rules)."""

    def __init__(self, path: Path, *, now_ms: Callable[[], int] = wall_ms) -> None:
        self.path = path
        self._file = FileWatch([str(path)])
        self.validator = AclValidator(load_acl_config(path), now_ms=now_ms)
        self.reloads = 0
        """Successful reloads since start."""
        self._warn_if_readable()
        log.info("ACL on: %d account(s) from %s", len(self.validator.config.accounts), self.path)

    def _warn_if_readable(self) -> None:
        if readable_by_others(self.path):
            log.warning(
                "ACL file %s may be read by other users (it holds the secret keys): chmod 600 it",
                self.path,
            )

    def reload(self) -> bool:
        """Read the file again now; False (logged, old accounts kept) when it is bad."""
        self._file.changed()  # this read is the file's state from now on
        try:
            config = load_acl_config(self.path)
        except AclConfigError as exc:
            log.error("ACL file not reloaded, the accounts in force stay: %s", exc)
            return False
        self.validator.reload(config)
        self.reloads += 1
        self._warn_if_readable()
        log.info("ACL reloaded: %d account(s) from %s", len(config.accounts), self.path)
        return True

    def reload_if_changed(self) -> bool:
        """Reload when the file changed since it was last read; True if reloaded."""
        if not self._file.changed():
            return False
        return self.reload()

    async def watch(self, interval_s: float = WATCH_INTERVAL_S) -> None:
        """Check the file every ``interval_s``; never returns."""
        while True:
            await trio.sleep(interval_s)
            self.reload_if_changed()
