"""The descriptors the store's files hold (store/mapped_file.py, module rule "Descriptors").

CPython 3.11's ``mmap`` keeps a private duplicate of the descriptor it maps: a mapped file
holds that one, plus ours while it may still be written (RocketMQ holds one ``FileChannel`` per
file). The counts are read from ``/proc/self/fd`` of this process, per file the descriptors
point at; the store runs no threads of its own here.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from store import GetStatus, MessageStore, StoreConfig
from store.mapped_file_queue import MappedFileQueue
from tests.conftest import drain_dispatch, make_msg, small_store_config

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")

TOPIC = "TopicFd"
QUEUES = 4
MESSAGES = 1010  # 253 or 252 a queue: no queue's last file (50 units) is full
SIZE = 4096


def fd_config(root: Path) -> StoreConfig:
    """8 KiB commitlog files, consume-queue files of 50 units, index files of 99 entries."""
    return small_store_config(
        root,
        mapped_file_size_commit_log=8192,
        mapped_file_size_consume_queue=20 * 50,
        max_hash_slot_num=7,
        max_index_num=100,
    )


def descriptors_under(root: Path) -> Counter[Path]:
    """How many of this process's descriptors name each file under ``root``."""
    counts: Counter[Path] = Counter()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            continue  # the descriptor listdir itself used, closed by now
        if target.is_relative_to(root):
            counts[target] += 1
    return counts


def expected_descriptors(store: MessageStore) -> Counter[Path]:
    """One per mapped file (the mapping's), one more per file still being written (the last
    of the commitlog, of each consume queue and of the index), one for the lock and two for
    the checkpoint (its mapping's, and the one its flush ``fdatasync``s: ``mmap.flush`` would
    hold the GIL through the disk sync)."""
    cqs = store.consume_queues()
    files = [mf.path for mf in store.commitlog.queue.files]
    files += [mf.path for cq in cqs for mf in cq.queue.files]
    files += [f.path for f in store.index.files]
    writing = [store.commitlog.queue.files[-1].path, store.index.files[-1].path]
    writing += [cq.queue.files[-1].path for cq in cqs]
    config = store.config
    return Counter([*files, *writing, config.lock_path, *[config.checkpoint_path] * 2])


def put_flushed(store: MessageStore, count: int) -> None:
    """Put ``count`` keyed messages over the queues, dispatch them and flush everything."""
    for i in range(count):
        store.put_message(make_msg(TOPIC, b"x" * 20, i % QUEUES, keys=f"k{i}"))
    drain_dispatch(store)
    store.flush_commitlog()
    store.flush_logics()


def assert_every_message_readable(store: MessageStore, count: int) -> None:
    """Every queue serves all its messages (reads through the mappings)."""
    for queue_id in range(QUEUES):
        expected = len(range(queue_id, count, QUEUES))
        offset = read = 0
        while offset < expected:
            got = store.get_messages(TOPIC, queue_id, offset, expected - offset)
            assert got.status is GetStatus.FOUND, got
            read += len(got.records)
            offset = got.next_begin_offset
        assert read == expected


def test_a_store_holds_one_descriptor_per_full_file(tmp_path: Path) -> None:
    """Several full files of every kind, all flushed: each holds only its mapping's
    descriptor; the files being written hold ours too."""
    root = (tmp_path / "store").resolve()
    store = MessageStore(fd_config(root)).open()
    try:
        put_flushed(store, MESSAGES)
        assert len(store.commitlog.queue.files) > 5
        assert len(store.index.files) > 5
        assert descriptors_under(root) == expected_descriptors(store)
        assert_every_message_readable(store, MESSAGES)
    finally:
        store.close()
    assert descriptors_under(root) == Counter()


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
def test_a_restart_holds_one_descriptor_per_full_file(tmp_path: Path, crash: bool) -> None:
    """Recovery maps every file again: those before the last of their queue are complete and
    hold only the mapping's descriptor. After a crash recovery also cuts each queue's last
    file at its end (zeroing through a reopened descriptor); the store then serves every
    message and takes new ones."""
    root = (tmp_path / "store").resolve()
    store = MessageStore(fd_config(root)).open()
    try:
        put_flushed(store, MESSAGES)
        if crash:
            shutil.copytree(root, tmp_path / "crashed")  # with its abort file
            root = (tmp_path / "crashed").resolve()
    finally:
        store.close()
    store = MessageStore(fd_config(root)).open()
    try:
        assert store.last_exit_ok is not crash
        assert descriptors_under(root) == expected_descriptors(store)
        assert_every_message_readable(store, MESSAGES)
        put_flushed(store, QUEUES * 60)  # over file ends: each queue rolls
        assert descriptors_under(root) == expected_descriptors(store)
        assert_every_message_readable(store, MESSAGES + QUEUES * 60)
    finally:
        store.close()


def test_a_released_file_cut_back_is_written_and_flushed_again(tmp_path: Path) -> None:
    """Recovery cuts into a full file that holds only its mapping's descriptor: the cut is
    zeroed and synced, and the file, now the last, is written and flushed to disk again."""
    queue = MappedFileQueue(tmp_path / "q", SIZE)
    try:
        queue.writable_file().append(b"\xab" * SIZE)
        queue.writable_file().append(b"\xab" * SIZE)
        queue.writable_file().append(b"\xab" * 100)
        queue.flush()
        first = queue.files[0]
        assert [mf.fd is None for mf in queue.files] == [True, True, False]
        assert first.last_modified() == os.stat(first.path).st_mtime
        queue.truncate_dirty(SIZE // 2)
        assert queue.files == [first]
        first.append(b"\xcd" * 100)
        queue.flush()
        on_disk = first.path.read_bytes()
        assert on_disk == b"\xab" * (SIZE // 2) + b"\xcd" * 100 + bytes(SIZE // 2 - 100)
        queue.writable_file().append(b"\xef" * (SIZE // 2 - 100))
        queue.flush()
        assert first.fd is None  # full and flushed again
        queue.destroy()
        assert list((tmp_path / "q").iterdir()) == []
    finally:
        queue.close()
