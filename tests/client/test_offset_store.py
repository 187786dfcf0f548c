"""The broadcasting offset file: kept across restarts, never moved back unless told."""

from __future__ import annotations

from pathlib import Path

from client.message import MessageQueue
from client.offset_store import LocalFileOffsetStore

A = MessageQueue("T", "broker-a", 0)
B = MessageQueue("T", "broker-b", 3)


async def test_offsets_survive_a_restart_and_only_increase(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    assert await store.read(A) is None
    store.update(A, 7)
    store.update(A, 5)  # not backwards
    store.update(B, 2)
    store.update(B, 1, increase_only=False)  # a reset may move back
    await store.persist([A, B])
    assert store.path == tmp_path / "10.0.0.1@DEFAULT" / "g" / "offsets.json"
    again = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    assert (await again.read(A), await again.read(B)) == (7, 1)


async def test_a_corrupt_file_falls_back_to_the_backup(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.update(A, 1)
    await store.persist([A])
    store.update(A, 2)
    await store.persist([A])  # the previous file becomes offsets.json.bak
    store.path.write_text("{not json")
    again = LocalFileOffsetStore("c", "g", tmp_path)
    assert await again.read(A) == 1
