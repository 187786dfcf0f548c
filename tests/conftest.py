"""Shared fixtures and helpers for minimq's tests.

Fixtures (all built on pytest's ``tmp_path``):

- ``small_config``: a factory ``small_config(root=None, **overrides) -> StoreConfig`` with tiny
  file sizes (commitlog 64 KiB, consume queue 50 units, index 100 slots / 400 entries) so tests
  cross file boundaries quickly. ``root`` defaults to ``tmp_path / "store"``.
- ``store_config``: one such ``StoreConfig`` (the factory with no overrides).
- ``store``: an opened :class:`MessageStore` on ``store_config``, closed at teardown (if still
  running); it uses a :class:`ManualClock` available as ``store.clock_ms``.
- ``manual_clock``: a fresh :class:`ManualClock`.

Helpers (import them with ``from tests.conftest import ...``):

- :func:`make_msg` builds a :class:`MessageRecord` with tags / keys / uniq key shortcuts.
- :func:`put_and_dispatch` puts one message or a batch and dispatches everything pending.
- :func:`drain_dispatch` dispatches until nothing is pending.
- :func:`small_store_config` is the function behind the ``small_config`` fixture.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from common.compiled import build_description
from common.record import MessageRecord
from store import MessageStore, PutResult, StoreConfig
from store.retention import disk_usage_ratio
from tests.compiled import compiled_build_problem

SMALL_COMMITLOG_SIZE = 64 * 1024
SMALL_CQ_UNITS = 50
SMALL_CQ_SIZE = 20 * SMALL_CQ_UNITS
SMALL_HASH_SLOTS = 100
SMALL_INDEX_NUM = 400
CLOCK_START_MS = 1_700_000_000_000

DISK_HEADROOM_WARNING_RATIO = 0.80


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``make test-compiled``, stop before any test unless the compiled build is the one
    imported (a run that silently tested the pure modules would prove nothing)."""
    problem = compiled_build_problem(session.config.rootpath / "pyproject.toml")
    if problem is not None:
        pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """How full the disk under the test brokers' files is: a broker refuses puts above
    ``diskSpaceWarningLevelRatio`` (90 %), so a disk near that fails tests that send."""
    base = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir()))
    ratio = disk_usage_ratio(base)
    line = f"disk under {base}: {ratio:.0%} used (brokers refuse puts above 90 %)"
    if ratio > DISK_HEADROOM_WARNING_RATIO:
        line += " -- WARNING: too little headroom, sends in tests may fail with 'the disk is full'"
    return [line, f"minimq build: {build_description()}"]


class ManualClock:
    """A clock for ``clock_ms=``: returns ``now``, which only moves when a test moves it."""

    def __init__(self, start_ms: int = CLOCK_START_MS) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` and return the new time."""
        self.now += ms
        return self.now


def small_store_config(root: Path, **overrides: object) -> StoreConfig:
    """A :class:`StoreConfig` under ``root`` with tiny files; keyword arguments override."""
    settings: dict[str, object] = {
        "store_path_root_dir": root,
        "mapped_file_size_commit_log": SMALL_COMMITLOG_SIZE,
        "mapped_file_size_consume_queue": SMALL_CQ_SIZE,
        "max_hash_slot_num": SMALL_HASH_SLOTS,
        "max_index_num": SMALL_INDEX_NUM,
    }
    settings.update(overrides)
    return StoreConfig(**settings)  # type: ignore[arg-type]


TINY_CQ_UNITS = 4


def tiny_store_config(root: Path) -> StoreConfig:
    """Files so small that a short run crosses every kind of file boundary: an 8 KiB
    commitlog, consume-queue files of :data:`TINY_CQ_UNITS` units, 16-entry index files."""
    return small_store_config(
        root,
        mapped_file_size_commit_log=8192,
        mapped_file_size_consume_queue=20 * TINY_CQ_UNITS,
        max_hash_slot_num=7,
        max_index_num=16,
    )


@pytest.fixture
def small_config(tmp_path: Path) -> Callable[..., StoreConfig]:
    """Factory: ``small_config(root=None, **overrides)``; see :func:`small_store_config`."""

    def make(root: Path | None = None, **overrides: object) -> StoreConfig:
        return small_store_config(root if root is not None else tmp_path / "store", **overrides)

    return make


@pytest.fixture
def store_config(small_config: Callable[..., StoreConfig]) -> StoreConfig:
    """A small :class:`StoreConfig` under ``tmp_path / "store"``."""
    return small_config()


@pytest.fixture
def manual_clock() -> ManualClock:
    """A :class:`ManualClock` starting at ``CLOCK_START_MS``."""
    return ManualClock()


@pytest.fixture
def store(store_config: StoreConfig, manual_clock: ManualClock) -> Iterator[MessageStore]:
    """An open :class:`MessageStore` on ``store_config`` driven by ``manual_clock``."""
    s = MessageStore(store_config, clock_ms=manual_clock)
    s.open()
    try:
        yield s
    finally:
        s.close()


def make_msg(
    topic: str = "TopicTest",
    body: bytes = b"hello",
    queue_id: int = 0,
    *,
    tags: str | None = None,
    keys: str | Sequence[str] | None = None,
    uniq_key: str | None = None,
    properties: dict[str, str] | None = None,
    **fields: object,
) -> MessageRecord:
    """A :class:`MessageRecord` with the TAGS / KEYS / UNIQ_KEY properties filled in."""
    props = dict(properties or {})
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        props["KEYS"] = keys if isinstance(keys, str) else " ".join(keys)
    if uniq_key is not None:
        props["UNIQ_KEY"] = uniq_key
    return MessageRecord(topic, body, queue_id=queue_id, properties=props, **fields)  # type: ignore[arg-type]


def drain_dispatch(store: MessageStore) -> int:
    """Dispatch until nothing is pending; return how many records were dispatched."""
    total = 0
    while n := store.dispatch_pending():
        total += n
    return total


def put_and_dispatch(
    store: MessageStore, msgs: MessageRecord | Sequence[MessageRecord]
) -> PutResult:
    """Put one message (or a batch) and dispatch everything pending; return the put result."""
    if isinstance(msgs, MessageRecord):
        result = store.put_message(msgs)
    else:
        result = store.put_messages(msgs)
    drain_dispatch(store)
    return result


def properties_at(raw: bytes) -> int:
    """Where the properties of a whole v1 record (IPv4 hosts) start."""
    (body_len,) = struct.unpack_from(">i", raw, 84)
    topic_len = raw[88 + body_len]
    return 88 + body_len + 1 + topic_len + 2
