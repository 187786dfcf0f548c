"""The broadcasting offset file: kept across restarts, never moved back unless told."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from client.aio import ConsumeFrom, Message, Producer, PullConsumer, PushConsumer
from client.config import ClientConfig
from client.errors import MQClientError
from client.instance import ClientInstance
from client.message import MessageQueue
from client.offset_store import LocalFileOffsetStore, RemoteOffsetStore
from tests.client.inproc_cluster import TOPIC, cluster

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
    store.open()
    store.update(A, 1)
    await store.persist([A])
    store.update(A, 2)
    await store.persist([A])  # the previous file becomes offsets.json.bak
    store.path.write_text("{not json")
    again = LocalFileOffsetStore("c", "g", tmp_path)
    assert await again.read(A) == 1
    store.path.write_text('{"offsetTable": {"T@broker-a@0": "one"}}')  # JSON, wrong shape
    assert await LocalFileOffsetStore("c", "g", tmp_path).read(A) == 1


async def test_a_store_never_loaded_writes_nothing(tmp_path: Path) -> None:
    """A restarted member that has no queue yet when the periodic persist runs must not
    replace its offsets (and then their backup) with an empty table."""
    first = LocalFileOffsetStore("c", "g", tmp_path)
    first.open()
    first.update(A, 7)
    await first.persist([A])
    first.close()
    restarted = LocalFileOffsetStore("c", "g", tmp_path)
    await restarted.persist([])
    await restarted.persist([])
    assert await LocalFileOffsetStore("c", "g", tmp_path).read(A) == 7
    restarted.open()
    await restarted.persist([])  # loaded: the table it writes holds what it read
    assert await LocalFileOffsetStore("c", "g", tmp_path).read(A) == 7


async def test_a_failed_write_is_logged_and_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.open()
    store.update(A, 3)
    directory = store.path.parent
    directory.rename(tmp_path / "moved")
    directory.write_text("a file where the directory was")  # mkdir and writes fail
    await store.persist([A])  # logged, not raised: the consumer keeps consuming
    assert "persisting broadcasting offsets" in caplog.text
    directory.unlink()
    await store.persist([A])  # the same table: written now
    assert await LocalFileOffsetStore("c", "g", tmp_path).read(A) == 3


def test_a_second_live_store_on_one_directory_is_refused(tmp_path: Path) -> None:
    first = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    first.open()
    second = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    with pytest.raises(MQClientError, match=r"in use by another consumer.*instance_name"):
        second.open()
    LocalFileOffsetStore("10.0.0.1@other", "g", tmp_path).open()  # another instance name
    first.close()
    second.open()
    second.close()


def test_open_fails_when_neither_the_file_nor_its_backup_loads(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_text('{"offsetTable": {"T@broker-a@0": 1')
    with pytest.raises(MQClientError, match=r"cannot load the broadcasting offsets.*no backup"):
        store.open()
    store.path.write_text("{}")  # JSON of the wrong shape, and still no backup
    with pytest.raises(MQClientError, match="offsetTable"):
        LocalFileOffsetStore("c", "g", tmp_path).open()
    store.path.unlink()
    fresh = LocalFileOffsetStore("c", "g", tmp_path)
    fresh.open()  # the failed opens released the directory
    fresh.close()


async def test_a_local_offset_is_overtaken_only_by_a_higher_committed_one(tmp_path: Path) -> None:
    async with (
        cluster(tmp_path, brokers=("broker-a",)) as c,
        ClientInstance(ClientConfig.create(c.namesrv)) as instance,
    ):
        await instance.topic_route(TOPIC)
        mq = MessageQueue(TOPIC, "broker-a", 0)
        async with Producer("pg", instance=instance) as producer:  # offsets up to 12 exist
            for i in range(12):
                await producer.send(Message(TOPIC, b"%d" % i), queue=mq)
        ours = RemoteOffsetStore(instance, "cg")
        theirs = RemoteOffsetStore(instance, "cg")  # another member of the group
        assert not await ours.overtaken(mq)  # nothing recorded here, nothing committed there
        ours.update(mq, 5)
        assert not await ours.overtaken(mq)  # nothing committed
        theirs.update(mq, 10)
        await theirs.persist([mq])
        assert await ours.overtaken(mq)
        assert ours.table[mq] == 5  # asking changes nothing here
        ours.update(mq, 10)
        assert not await ours.overtaken(mq)  # equal is not past
        ours.update(mq, 12)
        assert not await ours.overtaken(mq)
    broadcasting = LocalFileOffsetStore("127.0.0.1@x", "cg", tmp_path / "offsets")
    broadcasting.update(mq, 1)
    assert not await broadcasting.overtaken(mq)


async def test_overlapping_persists_write_one_at_a_time_and_the_newest_last(
    tmp_path: Path,
) -> None:
    """A periodic persist, a dropped queue's and the closing one may overlap: they must not
    share the temporary files (FileNotFoundError), and the file ends with the newest table."""
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.open()
    mq = MessageQueue("T", "broker-a", 0)
    async with trio.open_nursery() as nursery:
        for offset in range(1, 41):
            store.update(mq, offset)
            nursery.start_soon(store.persist, [mq])
    again = LocalFileOffsetStore("c", "g", tmp_path)
    assert await again.read(mq) == 40


def test_consume_from_timestamp_defaults_to_half_an_hour_ago() -> None:
    """RocketMQ's default consumeTimestamp: a group new to a queue starts half an hour back,
    not at the queue's first message."""
    half_hour = 30 * 60 * 1000
    for make in (PushConsumer, PullConsumer):
        before = time.time_ns() // 1_000_000
        consumer = make("g", "127.0.0.1:9876", consume_from=ConsumeFrom.TIMESTAMP)
        after = time.time_ns() // 1_000_000
        assert before - half_hour <= consumer.consume_timestamp_ms <= after - half_hour
    given = PushConsumer("g", "127.0.0.1:9876", consume_timestamp_ms=1234)
    assert given.consume_timestamp_ms == 1234


def test_a_forked_child_does_not_keep_the_directory_locked(tmp_path: Path) -> None:
    """flock belongs to the open file description, which a fork shares: the child closes its
    copy, so the parent's close() releases the directory while the child lives on."""
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.open()
    read, write = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait until the parent is done, never return into pytest
        try:
            os.write(ready_write, b"r")  # past os.fork(): its at-fork handlers have run
            os.read(read, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_read, 1) == b"r"
        store.close()
        again = LocalFileOffsetStore("c", "g", tmp_path)
        again.open()  # refused while the child held the lock
        again.close()
    finally:
        os.write(write, b"x")
        os.waitpid(pid, 0)
        for fd in (read, write, ready_read, ready_write):
            os.close(fd)


def _fork_without_python_hooks() -> int:
    """``fork()`` called from C, as a C extension would: the child runs none of Python's
    at-fork handlers (and is the same as any forked child before it has run them). The GIL
    stays held (``PyDLL``), so the child, which only pauses, needs no other thread."""
    libc = ctypes.PyDLL(None)
    pid: int = libc.fork()
    if pid == 0:
        libc.pause()
        os._exit(0)
    return pid


def test_a_child_forked_outside_pythons_hooks_does_not_keep_the_directory_locked(
    tmp_path: Path,
) -> None:
    """The lock used to be an flock, shared by a forked child until its at-fork handler closed
    its copy: a close and reopen right after ``Process.start()`` (the child not past its
    handlers yet), or a fork while another thread opened a store, left the directory locked
    for the child's life. The lock belongs to the process now: a child never holds it."""
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.open()
    pid = _fork_without_python_hooks()
    try:
        store.close()
        again = LocalFileOffsetStore("c", "g", tmp_path)
        again.open()  # refused while the child's copy held the flock
        again.close()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_fork_pool_child_does_not_hold_the_directory_after_the_parent_closes(
    tmp_path: Path,
) -> None:
    """A worker of a ``multiprocessing`` fork pool, started while the consumer runs."""
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.open()
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    try:
        store.close()
        again = LocalFileOffsetStore("c", "g", tmp_path)
        again.open()
        again.close()
    finally:
        child.kill()
        child.join(10)


def _open_in_another_process(directory: Path) -> str:
    """Try to open the store ``c``/``g`` of ``directory`` in a new interpreter."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from client.errors import MQClientError\n"
        "from client.offset_store import LocalFileOffsetStore\n"
        "try:\n"
        "    LocalFileOffsetStore('c', 'g', Path(sys.argv[1])).open()\n"
        "except MQClientError as exc:\n"
        "    print('refused', exc)\n"
        "else:\n"
        "    print('opened')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return done.stdout


def test_a_refused_second_store_in_the_process_leaves_the_first_ones_lock(
    tmp_path: Path,
) -> None:
    """A POSIX lock is released when the process closes any descriptor of the file: the
    second store here is refused before it opens the lock file, so another process is still
    kept out."""
    first = LocalFileOffsetStore("c", "g", tmp_path)
    first.open()
    try:
        with pytest.raises(MQClientError, match=r"in this process.*instance_name"):
            LocalFileOffsetStore("c", "g", tmp_path).open()
        assert _open_in_another_process(tmp_path).startswith("refused")
        assert "on this host" in _open_in_another_process(tmp_path)
    finally:
        first.close()
    assert _open_in_another_process(tmp_path) == "opened\n"
