"""common.file_watch: which watched files changed, on real files under tmp_path."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from common.file_watch import FileWatch, file_stamp


def write(path: Path, text: str, *, mtime_ns: int | None = None) -> None:
    path.write_text(text)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def test_nothing_changed_reports_nothing(tmp_path: Path) -> None:
    a = tmp_path / "a.pem"
    write(a, "one")
    watch = FileWatch([str(a)])
    assert watch.changed() == []
    assert watch.changed() == []


def test_a_rewrite_in_place_is_reported_once(tmp_path: Path) -> None:
    a, b = tmp_path / "a.pem", tmp_path / "b.pem"
    write(a, "one", mtime_ns=1_000_000_000)
    write(b, "two")
    watch = FileWatch([str(a), str(b)])
    write(a, "ONE", mtime_ns=2_000_000_000)  # same size, new mtime
    assert watch.changed() == [str(a)]
    assert watch.changed() == []


def test_a_same_size_same_mtime_rename_swap_is_reported(tmp_path: Path) -> None:
    """Replacing a file by renaming a new one over it changes the inode, even when size and
    mtime are the same (the way to swap a certificate atomically)."""
    a = tmp_path / "a.pem"
    write(a, "old!", mtime_ns=1_000_000_000)
    watch = FileWatch([str(a)])
    new = tmp_path / "a.pem.new"
    write(new, "new!", mtime_ns=1_000_000_000)
    os.replace(new, a)
    assert watch.changed() == [str(a)]


def test_a_deleted_file_is_ignored_until_it_comes_back(tmp_path: Path) -> None:
    """RocketMQ's FileWatchService ignores deletions: a half-done delete-and-copy swap
    reloads nothing; the new file, once there, is a change."""
    a = tmp_path / "a.pem"
    write(a, "old", mtime_ns=1_000_000_000)
    watch = FileWatch([str(a)])
    a.unlink()
    assert watch.changed() == []
    write(a, "new content", mtime_ns=3_000_000_000)
    assert watch.changed() == [str(a)]


def test_a_file_missing_at_first_is_a_change_when_it_appears(tmp_path: Path) -> None:
    a = tmp_path / "late.pem"
    watch = FileWatch([str(a)])
    assert file_stamp(a) is None
    assert watch.changed() == []
    write(a, "here")
    assert watch.changed() == [str(a)]


def test_paths_are_watched_once_in_the_order_given(tmp_path: Path) -> None:
    paths = [str(tmp_path / name) for name in ("b", "a", "b", "c")]
    for path in paths:
        write(Path(path), "x", mtime_ns=1_000_000_000)
    watch = FileWatch(paths)
    assert watch.paths == (paths[0], paths[1], paths[3])
    for path in paths:
        write(Path(path), "y", mtime_ns=2_000_000_000)
    assert watch.changed() == [paths[0], paths[1], paths[3]]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=8)), max_size=12))
def test_each_write_is_reported_once_and_only_for_its_file(
    writes: list[tuple[int, bytes]],
) -> None:
    """Whatever sequence of writes (each with a fresh mtime), ``changed`` after each write
    names exactly the file written, and a second call names nothing."""
    with tempfile.TemporaryDirectory() as root:
        paths = [Path(root) / f"f{i}" for i in range(3)]
        for path in paths:
            write(path, "", mtime_ns=1_000_000_000)
        watch = FileWatch(str(p) for p in paths)
        for n, (index, data) in enumerate(writes):
            paths[index].write_bytes(data)
            os.utime(paths[index], ns=(2_000_000_000 + n, 2_000_000_000 + n))
            assert watch.changed() == [str(paths[index])]
            assert watch.changed() == []
