"""Tests for MappedFile and MappedFileQueue (store/mapped_file.py, store/mapped_file_queue.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from store.errors import CorruptFileError, MappedFileCreateError
from store.mapped_file import MappedFile, is_mapped_file_name, offset_to_name
from store.mapped_file_queue import MappedFileQueue

SIZE = 4096


def names(directory: Path) -> list[str]:
    """Sorted file names in ``directory``."""
    return sorted(p.name for p in directory.iterdir())


# -- MappedFile ------------------------------------------------------------------------------


def test_offset_to_name() -> None:
    assert offset_to_name(0) == "00000000000000000000"
    assert offset_to_name(1073741824) == "00000000001073741824"
    assert offset_to_name(6_000_000) == "00000000000006000000"
    assert is_mapped_file_name("00000000000006000000")
    assert not is_mapped_file_name("00000000000006000000.tmp")
    assert not is_mapped_file_name("1234")


def test_create_allocates_whole_file(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_to_name(8192), SIZE, create=True)
    try:
        st = os.stat(mf.path)
        assert st.st_size == SIZE
        assert st.st_blocks * 512 >= SIZE  # allocated, not sparse
        assert names(tmp_path) == [offset_to_name(8192)]  # no .tmp left behind
        assert mf.file_from_offset == 8192
        assert (mf.wrote_position, mf.flushed_position) == (0, 0)
        assert mf.free_space == SIZE
        assert not mf.is_full
    finally:
        mf.close()


def test_create_failure_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_bytes(b"")
    with pytest.raises(MappedFileCreateError) as exc:
        MappedFile(tmp_path / "not-a-dir" / offset_to_name(0), SIZE, create=True)
    assert exc.value.size == SIZE
    assert exc.value.errno is not None


def test_append_read_flush_positions(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_to_name(0), SIZE, create=True)
    assert mf.append(b"abc") == 0
    assert mf.append(b"defg") == 3
    assert mf.wrote_position == 7
    assert mf.read(0, 7) == b"abcdefg"
    assert mf.flushed_position == 0
    assert mf.flush() == 7
    assert mf.flushed_position == 7
    assert mf.flush() == 7  # nothing new
    mf.write_at(100, b"zz")
    assert mf.wrote_position == 7
    assert mf.read(100, 2) == b"zz"
    assert mf.read(7, 2) == b"\x00\x00"
    with pytest.raises(ValueError, match="do not fit"):
        mf.append(b"x" * (SIZE - 6))
    assert mf.wrote_position == 7
    mf.append(b"x" * (SIZE - 7))
    assert mf.is_full
    assert mf.free_space == 0
    mf.close()
    mf.close()  # idempotent
    assert mf.closed
    assert mf.flush() == 7  # a closed file does not flush
    # the bytes are in the file
    data = (tmp_path / offset_to_name(0)).read_bytes()
    assert data[:7] == b"abcdefg"
    assert data[7:] == b"x" * (SIZE - 7)


def test_reopen_existing(tmp_path: Path) -> None:
    path = tmp_path / offset_to_name(0)
    mf = MappedFile(path, SIZE, create=True)
    mf.append(b"persisted")
    mf.flush()
    mf.close()
    again = MappedFile(path, SIZE, create=False)
    try:
        assert again.read(0, 9) == b"persisted"
        assert again.wrote_position == 0  # positions are the caller's business
    finally:
        again.close()


def test_zero_from(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_to_name(0), SIZE, create=True)
    try:
        mf.append(b"\xff" * SIZE)
        mf.zero_from(1000, chunk=256)
        assert mf.read(0, 1000) == b"\xff" * 1000
        assert mf.read(1000, SIZE - 1000) == bytes(SIZE - 1000)
    finally:
        mf.close()


def test_zero_from_finds_data_past_untouched_pages(tmp_path: Path) -> None:
    """Bytes far past ``pos``, behind pages never written (as write-back can leave a file after
    a power cut), are zeroed too; a file already clean reports no change."""
    size = 1 << 24
    mf = MappedFile(tmp_path / offset_to_name(0), size, create=True)
    try:
        mf.append(b"\xab" * 5000)
        for at in (1 << 16, (1 << 23) + 3, size - 7):
            mf.mm[at : at + 7] = b"\x01" * 7
        assert mf.zero_from(4096)
        assert mf.read(0, 4096) == b"\xab" * 4096
        assert bytes(mf.mm[4096:]) == bytes(size - 4096)
        assert not mf.zero_from(4096)
    finally:
        mf.close()


def test_destroy_deletes(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_to_name(0), SIZE, create=True)
    mf.destroy()
    assert mf.closed
    assert names(tmp_path) == []
    mf.destroy()  # twice is fine


# -- MappedFileQueue -------------------------------------------------------------------------


@pytest.fixture
def queue(tmp_path: Path) -> MappedFileQueue:
    """An empty queue of 4 KiB files under tmp_path/q."""
    q = MappedFileQueue(tmp_path / "q", SIZE)
    yield q
    q.close()


def fill(q: MappedFileQueue, nbytes: int, byte: int = 0xAB) -> None:
    """Append ``nbytes`` of ``byte`` across files, rolling as needed."""
    while nbytes:
        mf = q.writable_file()
        n = min(nbytes, mf.free_space)
        mf.append(bytes([byte]) * n)
        nbytes -= n


def test_empty_queue(queue: MappedFileQueue) -> None:
    assert queue.min_offset == queue.max_offset == queue.flushed_offset == 0
    assert queue.last_file() is None
    assert queue.find(0) is None
    assert queue.load()  # no directory yet: fine and empty
    assert queue.files == []


def test_create_names_and_roll(queue: MappedFileQueue) -> None:
    fill(queue, 2 * SIZE + 100)
    assert names(queue.directory) == [offset_to_name(i * SIZE) for i in range(3)]
    assert queue.max_offset == 2 * SIZE + 100
    assert queue.min_offset == 0
    last = queue.last_file()
    assert last is not None
    assert last.file_from_offset == 2 * SIZE
    assert queue.writable_file() is last  # not full: no roll


def test_create_file_checks(queue: MappedFileQueue) -> None:
    with pytest.raises(ValueError, match="multiple"):
        queue.create_file(100)
    queue.create_file(SIZE * 5)
    with pytest.raises(ValueError, match="follow"):
        queue.create_file(SIZE * 7)
    assert queue.writable_file().file_from_offset == SIZE * 5


def test_writable_file_starts_where_asked(queue: MappedFileQueue) -> None:
    mf = queue.writable_file(start_if_empty=SIZE * 3 + 10)
    assert mf.file_from_offset == SIZE * 3
    assert queue.file_start(SIZE * 3 + 10) == SIZE * 3


def test_find_by_offset(queue: MappedFileQueue) -> None:
    fill(queue, 3 * SIZE)
    for offset in (0, 1, SIZE - 1, SIZE, 2 * SIZE + 5, 3 * SIZE - 1):
        mf = queue.find(offset)
        assert mf is not None
        assert mf.file_from_offset == offset - offset % SIZE
    assert queue.find(3 * SIZE) is None
    assert queue.find(-1) is None


def test_flushed_offset(queue: MappedFileQueue) -> None:
    fill(queue, SIZE + 10)
    assert queue.flushed_offset == 0
    assert queue.flush() == SIZE + 10
    fill(queue, 5)
    assert queue.flushed_offset == SIZE + 10
    assert queue.flush() == SIZE + 15


def test_truncate_dirty(queue: MappedFileQueue) -> None:
    fill(queue, 3 * SIZE)
    queue.flush()
    cut = SIZE + 100
    queue.truncate_dirty(cut)
    assert names(queue.directory) == [offset_to_name(0), offset_to_name(SIZE)]
    assert queue.max_offset == cut
    second = queue.files[1]
    assert second.wrote_position == 100
    assert second.flushed_position == 100
    assert second.read(0, 100) == b"\xab" * 100
    assert second.read(100, SIZE - 100) == bytes(SIZE - 100)  # tail zeroed
    assert queue.files[0].wrote_position == SIZE


def test_truncate_dirty_at_a_file_boundary(queue: MappedFileQueue) -> None:
    fill(queue, 2 * SIZE + 1)
    queue.truncate_dirty(SIZE)
    assert names(queue.directory) == [offset_to_name(0), offset_to_name(SIZE)]
    assert queue.files[1].wrote_position == 0
    queue.truncate_dirty(0)
    assert len(queue.files) == 1
    assert queue.max_offset == 0


def test_delete_first_files_never_deletes_the_last(queue: MappedFileQueue) -> None:
    fill(queue, 4 * SIZE)
    assert queue.delete_first_files(lambda mf: True, 2) == 2
    assert queue.min_offset == 2 * SIZE
    assert queue.delete_first_files(lambda mf: True, 100) == 1
    assert len(queue.files) == 1
    assert names(queue.directory) == [offset_to_name(3 * SIZE)]
    assert queue.delete_first_files(lambda mf: True, 100) == 0


def test_delete_first_files_stops_at_first_kept(queue: MappedFileQueue) -> None:
    fill(queue, 4 * SIZE)
    deleted = queue.delete_first_files(lambda mf: mf.file_from_offset != SIZE, 100)
    assert deleted == 1
    assert queue.min_offset == SIZE
    assert queue.find(0) is None
    assert queue.find(SIZE) is queue.files[0]


def test_load_round_trip(tmp_path: Path, queue: MappedFileQueue) -> None:
    fill(queue, 2 * SIZE + 10)
    queue.close()
    again = MappedFileQueue(tmp_path / "q", SIZE)
    try:
        assert again.load()
        assert len(again.files) == 3
        # loaded files count as full until recovery says otherwise
        assert all(mf.wrote_position == SIZE for mf in again.files)
        assert again.files[2].read(0, 10) == b"\xab" * 10
    finally:
        again.close()


def test_load_drops_short_last_file_and_tmp_files(tmp_path: Path, queue: MappedFileQueue) -> None:
    fill(queue, 2 * SIZE)
    queue.close()
    d = tmp_path / "q"
    (d / offset_to_name(2 * SIZE)).write_bytes(b"\x00" * 100)  # a short last file
    (d / (offset_to_name(3 * SIZE) + ".tmp")).write_bytes(b"\x00" * SIZE)
    (d / "README").write_text("not a store file")
    again = MappedFileQueue(d, SIZE)
    try:
        assert again.load()
        assert [mf.file_from_offset for mf in again.files] == [0, SIZE]
        assert names(d) == [offset_to_name(0), offset_to_name(SIZE), "README"]
    finally:
        again.close()


def test_load_rejects_wrong_size_middle_file(tmp_path: Path, queue: MappedFileQueue) -> None:
    fill(queue, 3 * SIZE)
    queue.close()
    middle = tmp_path / "q" / offset_to_name(SIZE)
    os.truncate(middle, SIZE - 1)
    again = MappedFileQueue(tmp_path / "q", SIZE)
    with pytest.raises(CorruptFileError) as exc:
        again.load()
    assert exc.value.path == middle
    again.close()


def test_load_rejects_oversized_last_file(tmp_path: Path, queue: MappedFileQueue) -> None:
    fill(queue, SIZE)
    queue.close()
    os.truncate(tmp_path / "q" / offset_to_name(0), SIZE + 1)
    again = MappedFileQueue(tmp_path / "q", SIZE)
    with pytest.raises(CorruptFileError):
        again.load()
    again.close()


def test_load_reports_gap(tmp_path: Path, queue: MappedFileQueue) -> None:
    fill(queue, 4 * SIZE)
    queue.close()
    (tmp_path / "q" / offset_to_name(2 * SIZE)).unlink()
    again = MappedFileQueue(tmp_path / "q", SIZE)
    try:
        assert again.load() is False
        assert [mf.file_from_offset for mf in again.files] == [0, SIZE]
    finally:
        again.close()


def test_destroy_queue(queue: MappedFileQueue) -> None:
    fill(queue, 2 * SIZE)
    queue.destroy()
    assert queue.files == []
    assert names(queue.directory) == []


class _AppendedRightAfterRead(MappedFile):
    """A file another thread appends to right after its write position is read once."""

    @property  # type: ignore[override]
    def wrote_position(self) -> int:
        value: int = self.__dict__["wrote_position"]
        if self.__dict__.pop("append_after_read", False):
            self.__dict__["wrote_position"] = value + 100
        return value

    @wrote_position.setter
    def wrote_position(self, value: int) -> None:
        self.__dict__["wrote_position"] = value


def test_flushed_offset_never_counts_an_append_that_came_after_the_flush(
    queue: MappedFileQueue,
) -> None:
    """The flusher reports what it synced: an append landing while it reads the positions
    must not count as flushed (the checkpoint would vouch for bytes never synced)."""
    fill(queue, SIZE + 200)
    for mf in queue.files:
        mf.flush()
    last = queue.files[-1]
    last.__class__ = _AppendedRightAfterRead
    last.__dict__["append_after_read"] = True
    assert queue.flushed_offset == SIZE + 200
    assert queue.max_offset == SIZE + 300


def test_no_descriptor_for_the_directory_sync_is_tried_again_at_the_next_flush(
    tmp_path: Path,
) -> None:
    """With every descriptor taken (clients at a low ``ulimit -n``), a new file's first flush
    cannot open its directory: that is EMFILE, not a failed flush that would refuse writes
    until a restart. Real limits, in a child process: RLIMIT_NOFILE at the open count."""
    code = (
        "import os, resource, sys\n"
        "from pathlib import Path\n"
        "from store.mapped_file import MappedFile\n"
        "(Path(sys.argv[1]) / 'q').mkdir()\n"
        "f = MappedFile(Path(sys.argv[1]) / 'q' / '00000000000000000000', 4096, create=True)\n"
        "f.append(b'x' * 100)\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
        "held = []\n"
        "try:\n"
        "    while True:\n"
        "        held.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError:\n"
        "    pass\n"
        "f.flush()\n"
        "print(f._entry_synced)\n"
        "for fd in held:\n"
        "    os.close(fd)\n"
        "f.append(b'y')\n"
        "f.flush()\n"
        "print(f._entry_synced)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["False", "True"], out.stderr
