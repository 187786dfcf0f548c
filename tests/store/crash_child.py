"""A producer process for crash tests: puts messages into a SYNC_FLUSH store until killed.

Run from the repository root::

    python -m tests.store.crash_child STORE_DIR ROUND [RECORD_DIR] [async]

It opens (and so recovers) the store under ``STORE_DIR`` with tiny files, starts
:class:`store.services.StoreServices` under trio, prints ``READY`` and then runs a few producer
tasks that put messages forever: single puts and batches, over several topics and queues, with
tags, keys and a UNIQ_KEY. After each acknowledged put (``PUT_OK``: the bytes are flushed) it
writes one JSON line per message to stdout with one ``os.write`` (atomic on a pipe)::

    {"r": round, "k": put number, "j": index in the batch, "t": topic, "q": queue id,
     "o": queue offset, "p": commitlog offset}

Every message is a pure function of ``(round, put number)`` (see :func:`make_batch`), and its
UNIQ_KEY names both, so a test can regenerate any record it reads back and compare it byte for
byte. The test kills this process with SIGKILL; it never exits on its own.

With ``RECORD_DIR`` it first installs :mod:`tests.store.flush_recorder`, which logs what each
flush made durable to ``RECORD_DIR/log`` (snapshots under ``RECORD_DIR/snapshots``), so the test
can simulate a power failure. ``async`` runs the store with ASYNC_FLUSH instead (then an
acknowledged put is only in the page cache, which a SIGKILL does not lose).
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from common.record import MessageRecord
from store.config import FlushDiskType, StoreConfig

if TYPE_CHECKING:
    from store.services import StoreServices

TOPICS = ("CrashOrders", "CrashPay", "CrashLog")
QUEUES = 4
PRODUCERS = 4
GROUP_SIZE = 16  # messages sharing a group key: well under the index query cap of 64


def child_config(root: Path, flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> StoreConfig:
    """The store settings the child uses (the test opens the store with the same ones)."""
    return StoreConfig(
        store_path_root_dir=Path(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 50,
        max_hash_slot_num=100,
        max_index_num=400,
        flush_disk_type=flush,
        flush_interval_commit_log=200,
        flush_interval_consume_queue=30,
        clean_resource_interval=3_600_000,
        sync_flush_timeout=30_000,
    )


def uniq_key(round_no: int, put_no: int, index: int) -> str:
    """The UNIQ_KEY of message ``index`` of put ``put_no`` in ``round_no``."""
    return f"R{round_no}P{put_no}M{index}"


def parse_uniq_key(key: str) -> tuple[int, int, int]:
    """Inverse of :func:`uniq_key`."""
    r, rest = key[1:].split("P")
    p, m = rest.split("M")
    return int(r), int(p), int(m)


def make_batch(round_no: int, put_no: int) -> list[MessageRecord]:
    """The messages of put ``put_no`` in ``round_no``: one queue, 1 to 8 messages."""
    rng = random.Random(f"crash-{round_no}-{put_no}")
    topic = TOPICS[rng.randrange(len(TOPICS))]
    queue_id = rng.randrange(QUEUES)
    count = 1 if rng.random() < 0.6 else rng.randint(2, 8)
    out = []
    for i in range(count):
        size = rng.randint(3000, 6000) if rng.random() < 0.05 else rng.randint(1, 400)
        props = {
            "KEYS": f"K{round_no}-{put_no}-{i} G{round_no}-{put_no // GROUP_SIZE}",
            "UNIQ_KEY": uniq_key(round_no, put_no, i),
            "ROUND": str(round_no),
        }
        if rng.random() < 0.8:
            props["TAGS"] = f"Tag{rng.randrange(5)}"
        if rng.random() < 0.2:
            props["NOTE"] = "grüße-漢字"
        out.append(
            MessageRecord(
                topic,
                rng.randbytes(size),
                queue_id=queue_id,
                flag=rng.randrange(4),
                properties=props,
                born_timestamp=1_700_000_000_000 + put_no,
            )
        )
    return out


def message_for(key: str) -> MessageRecord:
    """The message a UNIQ_KEY names."""
    r, p, m = parse_uniq_key(key)
    return make_batch(r, p)[m]


async def _produce(services: StoreServices, round_no: int, counter: list[int]) -> None:
    from store.status import PutStatus

    while True:
        put_no = counter[0]
        counter[0] += 1
        msgs = make_batch(round_no, put_no)
        result = await services.put_messages(msgs)
        if result.status is not PutStatus.PUT_OK:
            os.write(2, f"put {put_no}: {result.status.name} {result.remark}\n".encode())
            continue
        lines = [
            json.dumps(
                {
                    "r": round_no,
                    "k": put_no,
                    "j": j,
                    "t": m.topic,
                    "q": m.queue_id,
                    "o": qoff,
                    "p": phys,
                },
                separators=(",", ":"),
            )
            + "\n"
            for j, (m, qoff, phys) in enumerate(
                zip(msgs, result.queue_offsets, result.phys_offsets, strict=True)
            )
        ]
        os.write(1, "".join(lines).encode())


async def _run(root: Path, round_no: int, flush: FlushDiskType) -> None:
    import trio

    from store.message_store import MessageStore
    from store.services import StoreServices

    store = MessageStore(child_config(root, flush)).open()
    services = StoreServices(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        os.write(1, b"READY\n")
        counter = [0]
        for _ in range(PRODUCERS):
            nursery.start_soon(_produce, services, round_no, counter)


def main(argv: list[str]) -> int:
    """Entry point: ``crash_child STORE_DIR ROUND [RECORD_DIR] [async]``."""
    import trio

    root, round_no, rest = Path(argv[0]), int(argv[1]), argv[2:]
    if rest and rest[0] != "async":
        from tests.store.flush_recorder import install

        record_dir = Path(rest.pop(0))
        install(record_dir / "log", record_dir / "snapshots")
    flush = FlushDiskType.ASYNC_FLUSH if rest == ["async"] else FlushDiskType.SYNC_FLUSH
    trio.run(_run, root, round_no, flush)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
