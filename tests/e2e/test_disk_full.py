"""A broker process whose disk fills up (the reliability plan's R6, variant B), with real
``mqnamesrv`` and ``mqbroker`` processes and the trio-native client.

The test lowers the running broker's ``RLIMIT_FSIZE`` below the size of a commitlog file, so
allocating the next one fails with EFBIG exactly where a full disk fails with ENOSPC (CPython
ignores SIGXFSZ, so the broker is told, not killed). Then:

- sends are refused with a clear error (``SYSTEM_ERROR``, as RocketMQ answers
  ``CREATE_MAPPED_FILE_FAILED``, saying why but not naming the server's files, which go to its
  log), never acknowledged and never left hanging;
- reads and offset commits go on, and every message acknowledged before is there;
- once the limit is raised again the broker takes sends again, without a restart;
- stopped with SIGTERM, its store passes the consistency check (the plan's R4 invariant).
"""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from client.aio import ConsumeFromWhere, Producer, PullConsumer
from client.errors import MQClientError
from client.message import Message, ReceivedMessage, SendStatus
from store import MessageStore
from store.invariants import check_store
from tests.broker.inprocess import SMALL_STORE
from tests.e2e.cluster import create_topic, running_cluster
from tests.processes import BROKER_BOOT_ANY, read_log, start_command

TOPIC = "DiskFullTopic"
GROUP = "cg_disk_full"
FILE_SIZE = int(SMALL_STORE["mappedFileSizeCommitLog"])
BODY = bytes(range(256)) * 11  # 2,816 bytes: not compressed, about 370 records a file
MAX_SENDS = 3 * FILE_SIZE // len(BODY)


def limit_file_size(pid: int, size: int) -> None:
    """Set another process's soft RLIMIT_FSIZE (the hard limit stays, so it can be raised)."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, hard))


async def read_all(namesrv: str, count: int) -> list[ReceivedMessage]:
    """Every message of TOPIC from the first offset, committing as it goes."""
    got: list[ReceivedMessage] = []
    async with PullConsumer(
        GROUP, namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    ) as consumer:
        consumer.assign(await consumer.fetch_queues(TOPIC))
        with trio.fail_after(30):
            while len(got) < count:
                got += await consumer.poll()
                await consumer.commit()
    return got


async def send_until_refused(producer: Producer, acked: list[bytes]) -> str:
    """Send numbered messages (from 50) until the broker refuses one, adding each acknowledged
    body to ``acked``; return the refusal's text."""
    for i in range(50, MAX_SENDS):  # until the log needs a new file
        body = b"%05d" % i + BODY
        try:
            await producer.send(Message(TOPIC, body))
        except MQClientError as exc:
            return str(exc)
        acked.append(body)
    raise AssertionError("every send acknowledged past the end of the file")


async def test_a_full_disk_refuses_sends_clearly_and_recovers_without_restart(
    tmp_path: Path,
) -> None:
    with trio.fail_after(120):
        async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
            broker = cluster.brokers["broker-a"]
            await create_topic(broker.addr, TOPIC, 1)
            acked: list[bytes] = []
            async with Producer("pg_disk_full", cluster.namesrv_addr) as producer:
                for i in range(50):
                    body = b"%05d" % i + BODY
                    assert (await producer.send(Message(TOPIC, body))).status is SendStatus.SEND_OK
                    acked.append(body)
                limit_file_size(broker.proc.pid, FILE_SIZE - 1)  # the disk is now "full"
                refusal = await send_until_refused(producer, acked)
                assert "CODE: 1 " in refusal, refusal  # SYSTEM_ERROR
                assert "EFBIG" in refusal, refusal
                assert str(broker.store) not in refusal  # the broker's paths stay in its log
                # refused again, at once (a smaller message could still fit in the file)
                with (
                    trio.fail_after(producer.send_timeout + 1),
                    pytest.raises(MQClientError, match="EFBIG"),
                ):
                    await producer.send(Message(TOPIC, b"again" + BODY))
                # reads and offset commits go on
                got = await read_all(cluster.namesrv_addr, len(acked))
                assert [m.body for m in got] == acked
                # space is back: sends succeed again, no restart
                limit_file_size(broker.proc.pid, resource.RLIM_INFINITY)
                for i in range(3):
                    body = b"after-%d" % i
                    assert (await producer.send(Message(TOPIC, body))).status is SendStatus.SEND_OK
                    acked.append(body)
            assert await cluster.terminate(broker) == 0
            assert "refusing puts: cannot create" in read_log(broker.log)
            assert broker.proc.returncode == 0
        settings = {"storePathRootDir": str(broker.store), **SMALL_STORE}
        with MessageStore(BrokerConfig.from_properties(settings).store_config()) as store:
            assert check_store(store) == []
            assert store.get_max_offset_in_queue(TOPIC, 0) == len(acked)  # nothing else stored


# --------------------------------------------------------------------------- variant A: tmpfs

TMPFS_SIZE = 4 * FILE_SIZE
"""The store's file system: small enough that leaving less than a commitlog file free keeps
the used ratio (about 77 %) under ``diskSpaceCleanForciblyRatio`` (85 %), so retention never
deletes an acknowledged message to make room and the refusal comes from the allocation."""
LEFT_FREE = FILE_SIZE - 64 * 1024
"""What the filler leaves free: room for small files, not for a new commitlog file."""


def tmpfs_unavailable(probe_dir: Path) -> str | None:
    """Why a store cannot go on a tmpfs in a private mount namespace here, or None if it can."""
    if os.geteuid() != 0:
        return "variant A needs root (mount in a private mount namespace)"
    if shutil.which("unshare") is None:
        return "variant A needs unshare(1)"
    probe_dir.mkdir()
    probe = ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe_dir}"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        return f"`unshare -m` + tmpfs mount failed here: {done.stderr.strip()[:200]}"
    return None


def on_tmpfs(argv: list[str], store: Path) -> list[str]:
    """``argv`` run in a new private mount namespace with a ``TMPFS_SIZE`` tmpfs on ``store``
    (the mount goes away with the process; nothing is mounted on the host)."""
    mount = f"mount -t tmpfs -o size={TMPFS_SIZE} tmpfs {shlex.quote(str(store))}"
    return ["unshare", "-m", "sh", "-c", f'{mount} && exec "$0" "$@"', *argv]


def fill(store_seen: Path) -> Path:
    """Write a filler file on the broker's tmpfs (through ``/proc/<pid>/root``) until only
    ``LEFT_FREE`` bytes are free; returns its path."""
    stat = os.statvfs(store_seen)
    filler = store_seen / "filler"
    with filler.open("wb") as out:
        out.write(b"\0" * (stat.f_bavail * stat.f_frsize - LEFT_FREE))
    return filler


async def test_a_full_tmpfs_refuses_sends_clearly_and_recovers_when_space_is_freed(
    tmp_path: Path,
) -> None:
    """Variant A: the broker's store on a small tmpfs of its own; a filler file takes the
    space a new commitlog file needs. Sends are refused with ENOSPC, reads and commits go on,
    and once the filler is deleted sends are taken again, without a restart."""
    reason = tmpfs_unavailable(tmp_path / "probe")
    if reason is not None:
        pytest.skip(reason)
    with trio.fail_after(120):
        async with running_cluster(tmp_path, {}) as cluster:
            store, log = tmp_path / "broker-a", tmp_path / "broker-a.log"
            store.mkdir()
            argv = on_tmpfs(cluster.broker_argv("broker-a", store, 0, {}), store)
            proc, boot = await start_command(argv, log, BROKER_BOOT_ANY)
            cluster.procs.append(proc)
            addr = f"127.0.0.1:{boot[2]}"
            seen = Path(f"/proc/{proc.pid}/root") / store.relative_to("/")
            await create_topic(addr, TOPIC, 1)
            acked: list[bytes] = []
            async with Producer("pg_disk_full", cluster.namesrv_addr) as producer:
                for i in range(50):
                    body = b"%05d" % i + BODY
                    assert (await producer.send(Message(TOPIC, body))).status is SendStatus.SEND_OK
                    acked.append(body)
                filler = fill(seen)
                refusal = await send_until_refused(producer, acked)
                assert "CODE: 1 " in refusal, refusal  # SYSTEM_ERROR
                assert "ENOSPC" in refusal, refusal
                assert str(store) not in refusal  # the broker's paths stay in its log
                got = await read_all(cluster.namesrv_addr, len(acked))  # reads and commits
                assert [m.body for m in got] == acked
                filler.unlink()  # space is back: sends succeed again, no restart
                for i in range(3):
                    body = b"after-%d" % i
                    assert (await producer.send(Message(TOPIC, body))).status is SendStatus.SEND_OK
                    acked.append(body)
            got = await read_all(cluster.namesrv_addr, 3)  # from the offset committed above
            assert [m.body for m in got] == acked[-3:]
            assert proc.returncode is None, read_log(log)[-3000:]
            text = read_log(log)
            assert "refusing puts: cannot create" in text
            assert "Traceback" not in text, text[-3000:]
