"""Lost index files other than the newest are rebuilt with every key of every record, including
the records whose keys straddled the lost file and a surviving neighbour."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.record import decode_record
from store import MessageStore, StoreConfig
from tests.conftest import ManualClock, drain_dispatch, make_msg, small_store_config

TOPIC = "T"
RECORDS = 18


def keys_of(i: int) -> list[str]:
    """The KEYS of record ``i``: with its UNIQ_KEY, 3, 2, 2, 3, ... entries, so that with 9
    entries per index file the first four file boundaries each split a record's keys; every
    third record also has the key ``hot``, which some records share."""
    return [f"k{i}", "hot"] if i % 3 == 0 else [f"k{i}"]


def every_key(store: MessageStore) -> dict[str, set[int]]:
    """Each key (UNIQ_KEYs too) -> the commitlog offsets a query for it returns."""
    found: dict[str, set[int]] = {}
    for i in range(RECORDS):
        for key in (f"U{i:04d}", *keys_of(i)):
            result = store.query_messages(TOPIC, key, 64, 0, 2**62)
            found[key] = {
                decode_record(raw, with_body=False).physical_offset for raw in result.records
            }
    return found


def entry_count(store: MessageStore) -> int:
    """Index entries in all files (entry 0 of each file is unused)."""
    return sum(f.index_count - 1 for f in store.index.files)


def filled_store(root: Path, clock: ManualClock) -> tuple[StoreConfig, dict[str, set[int]], int]:
    """A closed store of :data:`RECORDS` keyed records in 9-entry index files; its config,
    what every key finds and its entry count."""
    cfg = small_store_config(
        root, mapped_file_size_commit_log=1 << 20, max_hash_slot_num=7, max_index_num=10
    )
    with MessageStore(cfg, clock_ms=clock) as store:
        for i in range(RECORDS):
            store.put_message(make_msg(TOPIC, keys=keys_of(i), uniq_key=f"U{i:04d}"))
            clock.advance(10)
        drain_dispatch(store)
        found, count = every_key(store), entry_count(store)
    assert len(sorted(cfg.index_dir.iterdir())) == 5
    return cfg, found, count


@pytest.mark.parametrize("which", [0, 2, 3], ids=["first", "middle", "last_but_one"])
def test_lost_index_file_is_rebuilt_with_the_boundary_records_keys(
    tmp_path: Path, which: int
) -> None:
    clock = ManualClock()
    cfg, before, entries = filled_store(tmp_path / "store", clock)
    assert all(len(offsets) == (6 if key == "hot" else 1) for key, offsets in before.items())
    with MessageStore(cfg, clock_ms=clock) as store:
        files = store.index.files
        doomed = files[which]
        # the lost file shares a record with each neighbour: their keys straddle it
        assert doomed.end_phy_offset == files[which + 1].begin_phy_offset
        assert which == 0 or doomed.begin_phy_offset == files[which - 1].end_phy_offset
        name = doomed.path.name
    (cfg.index_dir / name).unlink()
    with MessageStore(cfg, clock_ms=clock) as store:
        assert every_key(store) == before
        assert entry_count(store) == entries  # only the lost keys, none twice
        assert len(store.index.files) == 5
    with MessageStore(cfg, clock_ms=clock) as store:  # nothing left to rebuild
        assert entry_count(store) == entries
