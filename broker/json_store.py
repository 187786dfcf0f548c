"""The broker's crash-safe JSON files: :mod:`common.json_store` (shared with the client's
broadcasting offset store), and changes of a persisted table that count only once on disk."""

from __future__ import annotations

from typing import Protocol, TypeVar

from common.clock import wall_clock_ms
from common.json_store import backup_path, load_json, temp_path, write_json_atomic

__all__ = [
    "backup_path",
    "change_durably",
    "load_json",
    "next_version_timestamp_ms",
    "temp_path",
    "write_json_atomic",
]

V = TypeVar("V")


class VersionedFile(Protocol):
    """A table kept in a JSON file with RocketMQ's ``dataVersion``."""

    data_version: int
    data_version_timestamp_ms: int

    def persist(self) -> None:
        """Write the whole table."""


def next_version_timestamp_ms(previous_ms: int) -> int:
    """The timestamp of a table's next data version: the wall clock, but never earlier than
    ``previous_ms``, the current version's. A clock stepped back (NTP, a resumed VM) would
    otherwise stamp a newer version earlier than an older one, and the name server, which
    takes a version for older when its counter is smaller and its timestamp no later, would
    apply the older table delivered late (:meth:`common.route.DataVersion.is_older_than`)."""
    return max(wall_clock_ms(), previous_ms)


def change_durably(owner: VersionedFile, table: dict[str, V], key: str, value: V | None) -> None:
    """Set (None: remove) ``table[key]``, bump ``owner``'s data version and persist. A failed
    write (a full disk) restores the entry and the version and re-raises: a change is in effect
    only once it is on disk, so it can neither vanish at the next restart nor make a retry of
    it a no-op that writes nothing."""
    before = table.get(key)
    version = (owner.data_version, owner.data_version_timestamp_ms)
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
    owner.data_version += 1
    owner.data_version_timestamp_ms = next_version_timestamp_ms(owner.data_version_timestamp_ms)
    try:
        owner.persist()
    except BaseException:
        if before is None:
            table.pop(key, None)
        else:
            table[key] = before
        owner.data_version, owner.data_version_timestamp_ms = version
        raise
