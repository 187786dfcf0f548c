"""KVConfigManager: the name server's key-value settings by namespace (RocketMQ's
``KVConfigManager``), changed by PUT_KV_CONFIG / DELETE_KV_CONFIG and read by GET_KV_CONFIG.

Rules:

- The table maps a namespace to a ``{key: value}`` map of strings.
- It is saved to ``kvConfigPath`` (RocketMQ: ``~/namesrv/kvConfig.json``) in RocketMQ's shape
  ``{"configTable": {namespace: {key: value}}}`` by :func:`common.json_store.write_json_atomic`
  and loaded from it (or its ``.bak``) at start by :func:`common.json_store.load_json`.
- A change is written before it is made in memory: when the file cannot be written, the change
  raises :class:`OSError` and the table stays as it was (RocketMQ logs the failure and answers
  success with the change made in memory only, lost at the next restart).
- Deleting a key that is absent writes nothing; a namespace left empty is dropped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from common.json_store import load_json, write_json_atomic

log = logging.getLogger(__name__)

KVTable = dict[str, dict[str, str]]
"""Namespace -> key -> value."""


def decode_kv_file(doc: Any) -> KVTable:
    """The table of a ``kvConfig.json`` document; TypeError or KeyError for another shape."""
    table = doc["configTable"]
    if not isinstance(table, dict):
        raise TypeError("configTable is not a map")
    out: KVTable = {}
    for namespace, entries in table.items():
        if not isinstance(entries, dict):
            raise TypeError(f"namespace {namespace!r} is not a map")
        if not all(isinstance(v, str) for v in entries.values()):
            raise TypeError(f"namespace {namespace!r} has a value that is not a string")
        out[str(namespace)] = dict(entries)
    return out


def encode_kv_file(table: KVTable) -> dict[str, Any]:
    """The ``kvConfig.json`` document of ``table``."""
    return {"configTable": table}


class KVConfigManager:
    """Namespaced key-value settings saved in ``path``; see the module docstring."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._table: KVTable = {}

    def load(self) -> None:
        """Read the file (or its backup); nothing when neither exists. ValueError naming the
        file when it and its backup are both corrupt."""
        table = load_json(self.path, decode_kv_file)
        if table is not None:
            self._table = table
            log.info("loaded KV config from %s: %d namespace(s)", self.path, len(table))

    def get(self, namespace: str, key: str) -> str | None:
        """The value of ``key`` in ``namespace``, or None."""
        return self._table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str]:
        """A copy of ``namespace``'s entries (empty when there is none)."""
        return dict(self._table.get(namespace, {}))

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set ``key`` of ``namespace`` to ``value``, saved before it takes effect."""
        table = self._copy()
        table.setdefault(namespace, {})[key] = value
        self._save(table)
        log.info("put KV config, Namespace: %s Key: %s Value: %s", namespace, key, value)

    def delete(self, namespace: str, key: str) -> None:
        """Remove ``key`` of ``namespace`` (nothing when absent), saved before it takes
        effect."""
        if key not in self._table.get(namespace, {}):
            return
        table = self._copy()
        del table[namespace][key]
        if not table[namespace]:
            del table[namespace]
        self._save(table)
        log.info("deleted KV config, Namespace: %s Key: %s", namespace, key)

    def _copy(self) -> KVTable:
        return {namespace: dict(entries) for namespace, entries in self._table.items()}

    def _save(self, table: KVTable) -> None:
        write_json_atomic(self.path, encode_kv_file(table), decode_kv_file)
        self._table = table
