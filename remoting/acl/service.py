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
- :meth:`AclService.update_account`, :meth:`~AclService.delete_account` and
  :meth:`~AclService.update_global_white_addrs` (the broker's ACL admin requests) change the
  file (:mod:`remoting.acl.edit`) and take effect at once: the document in force, as first
  re-read from the file when it changed since it was last read (a hand edit is kept, not
  overwritten), is changed, checked with the loader, written atomically with mode 0600
  (:mod:`remoting.acl.acl_file`) and handed to the validator; the file watch then takes the
  new file for seen (no second reload). Each runs start to end without an await, so changes
  from concurrent requests on the one trio loop never lose one another. While the file on
  disk does not load (a bad hand edit), every change is refused: it would overwrite the file
  the operator is fixing.
- :attr:`AclService.document` carries the file's data version (RocketMQ's ``dataVersion``,
  kept in the file), which each change moves on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import trio

from common.file_watch import FileWatch
from common.route import DataVersion
from remoting.acl.acl_file import mtime_ms, write_atomic
from remoting.acl.config import AclConfigError, readable_by_others
from remoting.acl.edit import (
    AccountChange,
    AclDocument,
    AclEditError,
    checked,
    delete_account,
    masked_view,
    next_version,
    parse_document,
    replace_global_white_addrs,
    upsert_account,
)
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
        self.document = self._read()
        """The file in force: its data, accounts and data version."""
        self.now_ms = now_ms
        self.validator = AclValidator(self.document.config, now_ms=now_ms)
        self.reloads = 0
        """Successful reloads since start."""
        self.changes = 0
        """Changes written by ACL admin requests since start."""
        self._file_loads = True
        """False while the file on disk does not load (a reload of it failed)."""
        self._warn_if_readable()
        log.info("ACL on: %d account(s) from %s", len(self.validator.config.accounts), self.path)

    def _warn_if_readable(self) -> None:
        if readable_by_others(self.path):
            log.warning(
                "ACL file %s may be read by other users (it holds the secret keys): chmod 600 it",
                self.path,
            )

    def _read(self) -> AclDocument:
        """The file's document; AclConfigError naming the file when it cannot be used."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AclConfigError(f"cannot read ACL file {self.path}: {exc}") from None
        try:
            return parse_document(text, mtime_ms(self.path))
        except AclConfigError as exc:
            raise AclConfigError(f"bad ACL file {self.path}: {exc}") from None

    def _use(self, document: AclDocument) -> None:
        self.document = document
        self.validator.reload(document.config)
        self._file_loads = True

    def reload(self) -> bool:
        """Read the file again now; False (logged, old accounts kept) when it is bad."""
        self._file.changed()  # this read is the file's state from now on
        try:
            document = self._read()
        except AclConfigError as exc:
            self._file_loads = False
            log.error("ACL file not reloaded, the accounts in force stay: %s", exc)
            return False
        self._use(document)
        self.reloads += 1
        self._warn_if_readable()
        log.info("ACL reloaded: %d account(s) from %s", len(document.config.accounts), self.path)
        return True

    def reload_if_changed(self) -> bool:
        """Reload when the file changed since it was last read; True if reloaded."""
        if not self._file.changed():
            return False
        return self.reload()

    @property
    def data_version(self) -> DataVersion:
        """The data version of the file in force."""
        return self.document.version

    def update_account(self, change: AccountChange) -> DataVersion:
        """Add the account ``change`` names or change it (:func:`remoting.acl.edit.upsert_account`);
        the new data version. AclEditError (nothing changed) when refused."""
        return self._commit(upsert_account(self._editable(), change))

    def delete_account(self, access_key: str, requester: str) -> DataVersion:
        """Delete account ``access_key`` (not ``requester``'s own); the new data version.
        AclEditError (nothing changed) when refused."""
        return self._commit(delete_account(self._editable(), access_key, requester))

    def update_global_white_addrs(self, addrs: list[str], requester_ip: str) -> DataVersion:
        """Replace ``globalWhiteRemoteAddresses`` (empty: none) unless the list leaves out
        ``requester_ip``; the new data version. AclEditError (nothing changed) when refused."""
        return self._commit(replace_global_white_addrs(self._editable(), addrs, requester_ip))

    def masked_config(self) -> dict[str, Any]:
        """The accounts and global address list in force, secrets masked
        (:func:`remoting.acl.edit.masked_view`)."""
        return masked_view(self.document)

    def _editable(self) -> AclDocument:
        """The document to change: the file, re-read when it changed since it was last read;
        AclEditError while it does not load."""
        self.reload_if_changed()
        if not self._file_loads:
            raise AclEditError(
                f"the ACL file {self.path} does not load (see the broker's log): fix it first; "
                "nothing was changed"
            )
        return self.document

    def _commit(self, data: dict[str, Any]) -> DataVersion:
        """Check ``data``, write it as the file and put it in force; its data version."""
        version = next_version(self.document.version, self.now_ms())
        text, document = checked(data, version)
        try:
            write_atomic(self.path, text)
        except OSError as exc:
            raise AclEditError(
                f"cannot write the ACL file {self.path}: {exc.strerror or exc}; nothing was changed"
            ) from None
        self._file.changed()  # the file written is the one in force: no reload of it
        self._use(document)
        self.changes += 1
        log.info(
            "ACL file %s rewritten: %d account(s), data version %d",
            self.path,
            len(document.config.accounts),
            version.counter,
        )
        return version

    async def watch(self, interval_s: float = WATCH_INTERVAL_S) -> None:
        """Check the file every ``interval_s``; never returns."""
        while True:
            await trio.sleep(interval_s)
            self.reload_if_changed()
