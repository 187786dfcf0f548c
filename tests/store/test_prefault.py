"""Tests for prefaulting the commitlog ahead of the writer (store/prefault.py and its users)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import store.services as services_module
from store import FlushDiskType, MessageStore, StoreConfig
from store.mapped_file import MappedFile
from store.prefault import PAGE_SIZE, mapping_address, populate_write
from store.services import StoreServices
from tests.conftest import make_msg
from tests.store.test_services import DEADLINE_S, open_store, wait_until

MIB = 1 << 20


def _supported(tmp_path: Path) -> bool:
    """Whether this kernel populates a shared file mapping (Linux 5.14+)."""
    path = tmp_path / "probe"
    path.write_bytes(bytes(PAGE_SIZE))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), PAGE_SIZE) as mm:
        return populate_write(mapping_address(mm), PAGE_SIZE)


def test_prefaulted_pages_read_as_zeros_and_take_writes(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / f"{0:020d}", 4 * MIB, create=True)
    try:
        assert mf.prefault(100, 2 * MIB) == _supported(tmp_path)  # start rounds down to a page
        assert mf.mm[: 2 * MIB] == bytes(2 * MIB)
        data = os.urandom(MIB + 123)
        mf.append(data)
        assert mf.read(0, len(data)) == data
        assert mf.prefault(3 * MIB, 5 * MIB) == _supported(tmp_path)  # clipped to the file
    finally:
        mf.close()
    assert mf.prefault(0, MIB)  # closed: nothing to do, never touches the unmapped memory


def test_warm_ahead_stays_inside_the_file_being_written(
    small_config: Callable[..., StoreConfig], tmp_path: Path
) -> None:
    if not _supported(tmp_path):
        return  # nothing to observe on a kernel without MADV_POPULATE_WRITE
    store = open_store(small_config(mapped_file_size_commit_log=MIB))
    log = store.commitlog
    try:
        assert not log.needs_warming(256 * 1024)  # no file yet
        store.put_message(make_msg("TopicTest", b"x" * 100))
        assert log.needs_warming(256 * 1024)
        assert log.warm_ahead(256 * 1024)
        assert log.warmed_offset == log.max_offset + 256 * 1024
        assert not log.needs_warming(256 * 1024)
        assert log.warm_ahead(4 * MIB)
        assert log.warmed_offset == MIB  # never past the file's end
        assert not log.needs_warming(4 * MIB)  # the file is done: wait for the next one
        for _ in range(40):  # roll into the second file: warming follows the writer there
            store.put_messages([make_msg("TopicTest", b"y" * 1000) for _ in range(32)])
        assert log.queue.files[-1].file_from_offset == MIB
        assert log.needs_warming(256 * 1024)
        assert log.warm_ahead(256 * 1024)
        assert log.warmed_offset == log.max_offset + 256 * 1024
    finally:
        store.close()


async def _warmed_after_a_put(config: StoreConfig, *, supported: bool) -> int:
    """The commitlog's warmed offset once the services' warm loop has done its part.

    Where warming is on and the kernel can do it, the loop runs under ``services.run`` until
    it has warmed; otherwise the loop must return by itself at once (off, SYNC_FLUSH, or
    refused by the kernel), which is awaited directly, so nothing waits on the clock.
    """
    store = open_store(config)
    services = StoreServices(store)
    enabled = config.warm_ahead_size_commit_log > 0 and (
        config.flush_disk_type is not FlushDiskType.SYNC_FLUSH
    )
    try:
        if enabled and supported:
            async with trio.open_nursery() as nursery:
                await nursery.start(services.run)
                await services.put_message(make_msg("TopicTest", b"z"))
                await wait_until(lambda: store.commitlog.warmed_offset > 0)
                nursery.cancel_scope.cancel()
        else:
            store.put_message(make_msg("TopicTest", b"z"))
            with trio.fail_after(DEADLINE_S):
                await services._warm_loop()
    finally:
        store.close()
    return store.commitlog.warmed_offset


async def test_services_warm_under_async_flush_only(
    small_config: Callable[..., StoreConfig], tmp_path: Path
) -> None:
    supported = _supported(tmp_path)
    warmed = await _warmed_after_a_put(small_config(root=tmp_path / "a"), supported=supported)
    assert (warmed > 0) == supported
    sync = small_config(root=tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert await _warmed_after_a_put(sync, supported=supported) == 0
    off = small_config(root=tmp_path / "o", warm_ahead_size_commit_log=0)
    assert await _warmed_after_a_put(off, supported=supported) == 0


def test_store_with_warming_reads_back_every_message(
    small_config: Callable[..., StoreConfig],
) -> None:
    """Appends over prefaulted pages keep every byte (the pages were zero, now hold records)."""
    store = MessageStore(small_config(mapped_file_size_commit_log=MIB)).open()
    try:
        bodies = [os.urandom(200) for _ in range(3000)]
        for i, body in enumerate(bodies):
            store.put_message(make_msg("TopicTest", body))
            if i % 500 == 0:
                store.commitlog.warm_ahead(128 * 1024)
        while store.dispatch_pending():
            pass
        got = store.get_messages("TopicTest", 0, 0, 3000)
        assert len(got.records) == 32  # a read is capped at 32 records; check them all below
        offset = 0
        seen = 0
        while offset < 3000:
            res = store.get_messages("TopicTest", 0, offset, 32)
            for raw in res.records:
                assert bodies[seen] in raw
                seen += 1
            offset = res.next_begin_offset
        assert seen == 3000
    finally:
        store.close()


async def test_warming_follows_the_writer_without_a_timer(
    small_config: Callable[..., StoreConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the warm loop's safety timer out of reach, the reput loop alone keeps waking it
    whenever the writer comes within half a window of the warmed end."""
    if not _supported(tmp_path):
        pytest.skip("this kernel cannot prefault a shared file mapping")
    monkeypatch.setattr(services_module, "WARM_SAFETY_S", 3600.0)
    window = 256 * 1024
    config = small_config(
        root=tmp_path / "w",
        mapped_file_size_commit_log=8 * MIB,
        warm_ahead_size_commit_log=window,
    )
    store = open_store(config)
    services = StoreServices(store)
    log = store.commitlog
    body = os.urandom(8 * 1024)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            for _ in range(6):  # each round writes about one window, crossing its half
                await services.put_messages([make_msg("TopicTest", body) for _ in range(32)])
                await wait_until(lambda: log.warmed_offset >= log.max_offset + window // 2)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert log.max_offset > 5 * window
