"""Retention: delete commitlog files past their reserved time, then what pointed into them.

RocketMQ's ``CleanCommitLogService`` rules: expired files (modified more than
``fileReservedTime`` hours ago) are deleted at the ``deleteWhen`` hour, or at once when the disk
is fuller than ``diskMaxUsedSpaceRatio``, ``diskSpaceCleanForciblyRatio`` or
``diskSpaceWarningLevelRatio`` (whichever is lowest). Past either of the last two, files go
even if not expired, unless ``cleanFileForciblyEnable`` is false. Past
``diskSpaceWarningLevelRatio`` the store refuses puts until usage is back at or below
``diskSpaceCleanForciblyRatio`` (or the warning level, if lower). The file being
written is never deleted. Consume-queue and index files that only point below the
commitlog's new minimum go next, and on every pass once that minimum moved, at any hour
(RocketMQ's ``CleanConsumeQueueService``): a crash between the two halves of a pass, or a
restart, leaves no queue starting in deleted data until the next delete hour.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from store.config import StoreConfig
    from store.mapped_file import MappedFile
    from store.message_store import MessageStore

log = logging.getLogger(__name__)


def disk_usage_ratio(path: Path) -> float:
    """Fraction of the filesystem holding ``path`` that is used (0.0 to 1.0), as ``df``'s
    Use% and RocketMQ's ``getDiskPartitionSpaceUsedPercent`` count it."""
    st = os.statvfs(path)
    return used_space_ratio(st.f_blocks, st.f_bfree, st.f_bavail)


def used_space_ratio(total: int, free: int, available: int) -> float:
    """``used / (used + available)`` with ``used = total - free`` (any one unit: blocks).

    ``free`` counts every unallocated block, ``available`` only those an unprivileged
    writer may take. Space reserved beyond ``available`` (root's reserve, a quota) is neither
    used nor usable, so it counts on neither side: measured against the whole size, a 252 GB
    file system with 42 GB used and 67 GB available would read 75 %, not 39 %.
    """
    used = total - free
    if used + available <= 0:
        return 0.0
    return max(0.0, used / (used + available))


def is_delete_hour(delete_when: str, now_ms: int) -> bool:
    """True when the local hour of ``now_ms`` is in ``delete_when`` (``"04"`` or ``"04;16"``)."""
    hour = time.localtime(now_ms / 1000).tm_hour
    hours = {int(h) for h in delete_when.split(";") if h.strip().isdigit()}
    return hour in hours


def clean_once(store: MessageStore, *, manual: bool = False) -> int:
    """Run one retention pass over ``store``; return how many files were deleted."""
    cfg = store.config
    now = store.clock_ms()
    ratio = store.disk_usage(
        cfg.commitlog_dir if cfg.commitlog_dir.exists() else cfg.store_path_root_dir
    )
    _update_disk_full(store, ratio)
    space_to_delete, clean_immediately = space_to_delete_and_at_once(cfg, ratio)
    if not (manual or space_to_delete or is_delete_hour(cfg.delete_when, now)):
        return clean_logics_if_moved(store)
    clean_at_once = cfg.clean_file_forcibly_enable and clean_immediately
    reserved_ms = cfg.file_reserved_time * 3600 * 1000

    def expired(mf: MappedFile) -> bool:
        return clean_at_once or mf.last_modified() * 1000 + reserved_ms <= now

    deleted = delete_commitlog_files(store, expired)
    if deleted:
        log.info(
            "retention deleted %d commitlog file(s); commitlog now starts at %d",
            deleted,
            store.commitlog.min_offset,
        )
    return deleted + clean_logics_if_moved(store)


def delete_commitlog_files(store: MessageStore, expired: Callable[[MappedFile], bool]) -> int:
    """Delete leading ``expired`` commitlog files, at most ``deleteFileBatchMax``, one per
    hold of the commitlog lock, pausing ``deleteCommitLogFilesInterval`` before each one
    after the first (RocketMQ's ``deleteExpiredFileByTime``); return how many went. Setting
    ``store.retention_stop`` (the services stopping) ends the pass at its next pause. The
    deletions are durable on return (one directory sync for the pass, even one that failed
    part way), before anything that counts on them (the deleted topics' entries the new
    minimum lets go) is written."""
    cfg = store.config
    queue = store.commitlog.queue
    pause_s = cfg.delete_commit_log_files_interval / 1000
    deleted = 0
    try:
        while deleted < cfg.delete_file_batch_max:
            if deleted:
                if len(queue.files) <= 1 or not expired(queue.files[0]):
                    break
                if pause_s and store.retention_stop.wait(pause_s):
                    break
            with store.commitlog.lock:
                if not queue.delete_first_files(expired, 1):
                    break
            deleted += 1
    finally:
        queue.sync_deletions()
    return deleted


def space_to_delete_and_at_once(cfg: StoreConfig, ratio: float) -> tuple[bool, bool]:
    """RocketMQ's ``isSpaceToDelete`` for a disk ``ratio`` used: whether to delete outside
    the delete hour, and whether the disk is so full that unexpired files may go too
    (``cleanImmediately``: above ``diskSpaceWarningLevelRatio`` or
    ``diskSpaceCleanForciblyRatio``, whatever ``diskMaxUsedSpaceRatio`` says)."""
    percent = ratio * 100
    at_once = percent > min(cfg.disk_space_warning_level_ratio, cfg.disk_space_clean_forcibly_ratio)
    return at_once or percent > cfg.disk_max_used_space_ratio, at_once


def clean_logics_if_moved(store: MessageStore) -> int:
    """Delete what points below the commitlog's minimum when it moved since the last time
    (a restart starts from 0); return how many files went."""
    low = store.commitlog.min_offset
    if low <= store.logics_cleaned_below:
        return 0
    deleted = delete_logics_below(store, low)
    store.deleted_topics.forget_below(low)
    store.logics_cleaned_below = low
    return deleted


def delete_logics_below(store: MessageStore, commitlog_min: int) -> int:
    """Delete consume-queue and index files that only point below ``commitlog_min``."""
    deleted = 0
    for cq in store.consume_queues():
        with store.queues_lock:  # not while a deleted topic's queue is being removed
            if not cq.destroyed:
                deleted += cq.delete_expired(commitlog_min)
    if store.config.message_index_enable:
        deleted += store.index.delete_expired(commitlog_min)
    return deleted


def disk_full_after(cfg: StoreConfig, ratio: float, *, was_full: bool) -> bool:
    """Whether puts are refused at a disk ``ratio`` used (RocketMQ's ``isSpaceToDelete``):
    from above ``diskSpaceWarningLevelRatio`` until usage is back at or below
    ``diskSpaceCleanForciblyRatio`` (or the warning level, if lower). In between the mark stays
    as it was, so a disk around the warning level does not flip with every file written or
    deleted."""
    percent = ratio * 100
    if percent > cfg.disk_space_warning_level_ratio:
        return True
    if percent > min(cfg.disk_space_clean_forcibly_ratio, cfg.disk_space_warning_level_ratio):
        return was_full
    return False


def _update_disk_full(store: MessageStore, ratio: float) -> None:
    full = disk_full_after(store.config, ratio, was_full=store.disk_full)
    if full != store.disk_full:
        if full:
            log.error(
                "disk %.0f%% used, above diskSpaceWarningLevelRatio: refusing puts", ratio * 100
            )
        else:
            log.warning("disk %.0f%% used: accepting puts again", ratio * 100)
    store.disk_full = full
