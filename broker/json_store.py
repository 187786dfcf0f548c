"""The broker's crash-safe JSON files: :mod:`common.json_store` (shared with the client's
broadcasting offset store)."""

from common.json_store import backup_path, load_json, temp_path, write_json_atomic

__all__ = ["backup_path", "load_json", "temp_path", "write_json_atomic"]
