"""StoreConfig: every knob of the message store, with Apache RocketMQ's names and defaults."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from store.batch_consume_queue import effective_batch_consume_queue_file_size
from store.consume_queue import CQ_STORE_UNIT_SIZE

DISK_RATIO_BOUNDS: Final = {
    "disk_max_used_space_ratio": (10, 95),
    "disk_space_warning_level_ratio": (35, 90),
    "disk_space_clean_forcibly_ratio": (30, 85),
}
"""RocketMQ's clamps of the disk ratios (``MessageStoreConfig#getDiskMaxUsedSpaceRatio``,
``CleanCommitLogService#getDiskSpaceWarningLevelRatio`` / ``getDiskSpaceCleanForciblyRatio``),
in percent: a stray small value can neither delete live files nor refuse every put."""


def effective_disk_ratio(name: str, value: int) -> int:
    """``value`` of the disk ratio ``name`` (a StoreConfig field) clamped to its bounds."""
    low, high = DISK_RATIO_BOUNDS[name]
    return min(max(value, low), high)


def effective_consume_queue_file_size(configured: int) -> int:
    """``configured`` rounded up to a whole number of consume queue units (20 bytes), as
    RocketMQ's ``MessageStoreConfig#getMappedFileSizeConsumeQueue`` does."""
    return -(-configured // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE


class FlushDiskType(enum.Enum):
    """When a put is acknowledged: after the page cache (ASYNC) or after the disk (SYNC)."""

    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


@dataclass(slots=True)
class StoreConfig:
    """Store settings (RocketMQ's ``MessageStoreConfig``); sizes in bytes, intervals in ms.

    The disk ratios hold their effective values: a percentage outside 0..100 is refused, one
    outside :data:`DISK_RATIO_BOUNDS` is clamped into them. So does
    ``mapped_file_size_consume_queue``: rounded up to a multiple of the 20-byte unit
    (:func:`effective_consume_queue_file_size`).
    """

    store_path_root_dir: Path = field(default_factory=lambda: Path.home() / "store")
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    mapper_file_size_batch_consume_queue: int = 300_000 * 46
    """Bytes per batch consume queue file (BatchCQ topics, :mod:`store.batch_consume_queue`):
    RocketMQ's ``mapperFileSizeBatchConsumeQueue``, 300,000 units of 46 bytes; rounded up to
    whole units."""
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    message_index_enable: bool = True
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_interval_consume_queue: int = 1000
    warm_ahead_size_commit_log: int = 4 * 1024 * 1024
    """ASYNC_FLUSH only: bytes of the commitlog kept prefaulted ahead of the write position
    (0 = off). See :mod:`store.prefault`; costs at most this much extra disk writing per flush."""
    sync_flush_timeout: int = 5000
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    clean_file_forcibly_enable: bool = True
    """Past ``disk_space_clean_forcibly_ratio`` (or ``disk_space_warning_level_ratio``),
    delete commitlog files even before ``file_reserved_time`` (RocketMQ's
    ``cleanFileForciblyEnable``). False: only expired files go, at any hour, and puts stay
    refused above the warning level until they free enough space."""
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    """Pause between two commitlog files deleted by one retention pass (RocketMQ's
    ``deleteCommitLogFilesInterval``), taken without the commitlog lock: spreads the unlinks
    of big files while puts go on. 0 = none."""
    destroy_maped_file_interval_forcibly: int = 120_000
    """RocketMQ's ``destroyMapedFileIntervalForcibly``: how long a mapped file still referenced
    by readers may put off its destruction. Accepted for RocketMQ's ``broker.conf`` and has no
    effect: minimq's readers copy what they read out of a mapping and hold no reference on the
    file, so retention never waits on one (it unlinks at once; the mapping goes with the last
    Python reference to it, when the read in progress ends)."""
    redelete_hanged_file_interval: int = 120_000
    """RocketMQ's ``redeleteHangedFileInterval``: how often the first commitlog file, whose
    deletion readers held up, is deleted again. Accepted for RocketMQ's ``broker.conf`` and has
    no effect: no reader holds up a deletion (see ``destroy_maped_file_interval_forcibly``),
    and a file whose unlink failed is deleted again by the next retention pass
    (``clean_resource_interval``)."""
    delete_file_batch_max: int = 10
    max_message_size: int = 4 * 1024 * 1024
    max_topic_length: int = 127
    check_crc_on_recover: bool = True
    enabled_append_prop_crc: bool = False
    """End every record with RocketMQ's ``__CRC32#`` property (a CRC of the whole record,
    checked by recovery); records with long properties get it anyway (store.commitlog)."""
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    store_host: tuple[str, int] = ("127.0.0.1", 10911)

    def __post_init__(self) -> None:
        """Validate (ValueError naming the field and its value), clamp the disk ratios to
        :data:`DISK_RATIO_BOUNDS` and round the consume queue file size up to whole units, as
        RocketMQ's getters do."""
        self.store_path_root_dir = Path(self.store_path_root_dir)
        if isinstance(self.flush_disk_type, str):
            self.flush_disk_type = FlushDiskType(self.flush_disk_type)
        self._check_geometry()
        self._check_ranges()
        for name in DISK_RATIO_BOUNDS:
            setattr(self, name, effective_disk_ratio(name, getattr(self, name)))
        self.mapped_file_size_consume_queue = effective_consume_queue_file_size(
            self.mapped_file_size_consume_queue
        )
        self.mapper_file_size_batch_consume_queue = effective_batch_consume_queue_file_size(
            self.mapper_file_size_batch_consume_queue
        )

    def _check_geometry(self) -> None:
        """File sizes and index geometry, one check per field."""
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError(
                "mapped_file_size_commit_log must be at least 4096 bytes, "
                f"got {self.mapped_file_size_commit_log}"
            )
        if self.max_index_num < 2:
            raise ValueError(f"max_index_num must be >= 2, got {self.max_index_num}")
        if self.max_hash_slot_num < 1:
            raise ValueError(f"max_hash_slot_num must be >= 1, got {self.max_hash_slot_num}")

    def _check_ranges(self) -> None:
        """Values that would crash a put, answer every send with an error or spin a loop
        are refused here, at startup, with the setting's name."""
        positive = (
            "mapped_file_size_consume_queue",
            "mapper_file_size_batch_consume_queue",
            "flush_interval_commit_log",
            "flush_interval_consume_queue",
            "clean_resource_interval",
            "max_message_size",
            "max_topic_length",
            "delete_file_batch_max",
            "max_msgs_num_batch",
            "default_query_max_num",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "sync_flush_timeout",
            "file_reserved_time",
            "warm_ahead_size_commit_log",
            "delete_commit_log_files_interval",
            "destroy_maped_file_interval_forcibly",
            "redelete_hanged_file_interval",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in DISK_RATIO_BOUNDS:
            if not 0 <= getattr(self, name) <= 100:
                raise ValueError(
                    f"{name} must be a percentage in 0..100, got {getattr(self, name)}"
                )
        hours = self.delete_when.split(";")
        if not all(re.fullmatch(r"\s*([01]?\d|2[0-3])\s*", h, re.ASCII) for h in hours):
            raise ValueError(
                f"delete_when must be hours 00..23 like 04 or 04;16, got {self.delete_when!r}"
            )

    @property
    def commitlog_dir(self) -> Path:
        """``<root>/commitlog``."""
        return self.store_path_root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        """``<root>/consumequeue``."""
        return self.store_path_root_dir / "consumequeue"

    @property
    def batch_consume_queue_dir(self) -> Path:
        """``<root>/batchconsumequeue``: the queues of BatchCQ topics."""
        return self.store_path_root_dir / "batchconsumequeue"

    @property
    def index_dir(self) -> Path:
        """``<root>/index``."""
        return self.store_path_root_dir / "index"

    @property
    def checkpoint_path(self) -> Path:
        """``<root>/checkpoint``."""
        return self.store_path_root_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        """``<root>/abort``: exists while the store is open."""
        return self.store_path_root_dir / "abort"

    @property
    def lock_path(self) -> Path:
        """``<root>/lock``: held with flock while the store is open."""
        return self.store_path_root_dir / "lock"

    @property
    def config_dir(self) -> Path:
        """``<root>/config``: the broker's JSON state."""
        return self.store_path_root_dir / "config"
