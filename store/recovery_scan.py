"""Fast verification of a long commitlog stretch that needs no dispatch, in numpy.

Recovery must verify every record it walks (magic, lengths, CRC, physical offset) but only
re-dispatch records that consume queues or the index lack. Below the lowest point they all
cover, this module verifies records in bulk: a tight loop follows the TOTALSIZE chain, numpy
checks the fixed fields of a chunk of records at once, and zlib checks the body CRCs (and the
whole-record CRC of the few records that carry one, see :mod:`store.commitlog`).
It stops at the first record that fails, exactly where the per-record walk would stop.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from common.message import MessageSysFlag
from common.record import (
    BLANK_MAGIC_CODE,
    CRC32_PROPERTY_PREFIX,
    CRC32_RESERVED_LEN,
    HEADER_V4,
    MAGIC_CODE_V1,
    record_crc_ok,
)
from common.topic import NAME_CHARS

if TYPE_CHECKING:
    from store.commitlog import CommitLog
    from store.mapped_file import MappedFile

CHUNK = 1 << 18  # records validated per numpy pass (bounds the temporary arrays)
_INT = struct.Struct(">i")
_HOST_V6 = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_BODY_LEN_POS = HEADER_V4.size - 4  # 84: BODY length field with IPv4 hosts
_CRC_PREFIX_FIRST = CRC32_PROPERTY_PREFIX[0]
_NAME_BYTE = np.zeros(256, dtype=np.bool_)
_NAME_BYTE[list(NAME_CHARS)] = True


def verify_until(log: CommitLog, start: int, stop: int, *, check_crc: bool) -> int:
    """Verify records from ``start`` (a record boundary) until the first boundary >= ``stop``.

    Returns that boundary, or the offset of the first record that is not valid (or that this
    fast path does not handle, such as IPv6 hosts) when it comes before ``stop``: the caller
    continues from there with the per-record walk.
    """
    offset = start
    while offset < stop:
        mf = log.queue.find(offset)
        if mf is None:
            return offset
        pos = offset - mf.file_from_offset
        offs, walked_to = _walk_sizes(mf, pos, stop - mf.file_from_offset)
        valid = _count_valid(mf, offs, check_crc)
        if valid < len(offs):
            bad = int(offs[valid])
            if _is_blank_marker(mf, bad) and valid == len(offs) - 1:
                offset = mf.file_from_offset + mf.file_size
                continue
            return mf.file_from_offset + bad
        offset = mf.file_from_offset + walked_to
        if walked_to < mf.file_size and offset < stop:
            return offset  # the size chain broke: let the per-record walk judge it
    return offset


def _walk_sizes(mf: MappedFile, pos: int, stop_pos: int) -> tuple[npt.NDArray[np.int64], int]:
    """Record start positions following TOTALSIZE from ``pos`` while below ``stop_pos``."""
    mm, limit = mf.mm, mf.file_size
    starts = array("q")
    add = starts.append
    unpack = _INT.unpack_from
    while pos < stop_pos and pos + 8 <= limit:
        (size,) = unpack(mm, pos)
        if size <= 0 or pos + size > limit:
            break
        add(pos)
        pos += size
    return np.frombuffer(starts, dtype=np.int64), pos


def _count_valid(mf: MappedFile, offs: npt.NDArray[np.int64], check_crc: bool) -> int:
    """How many leading records of ``offs`` are valid."""
    for first in range(0, len(offs), CHUNK):
        chunk = offs[first : first + CHUNK]
        ok, body_len, crc, sizes, props_at = _field_checks(mf, chunk)
        bad = np.flatnonzero(~ok)
        n = int(bad[0]) if len(bad) else len(chunk)
        if check_crc:
            n = _crc_prefix(mf, chunk[:n], body_len[:n], crc[:n])
            n = _record_crc_prefix(mf, chunk[:n], sizes[:n], props_at[:n])
        if n < len(chunk):
            return first + n
    return len(offs)


def _record_crc_prefix(
    mf: MappedFile,
    offs: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    props_at: npt.NDArray[np.int64],
) -> int:
    """How many leading records pass the ``__CRC32#`` property check (the few records that
    end with one: long properties), checked one by one."""
    buf = np.frombuffer(mf.mm, dtype=np.uint8)
    ends = offs + sizes
    tail = np.maximum(ends - CRC32_RESERVED_LEN, 0)
    maybe = np.flatnonzero((sizes > CRC32_RESERVED_LEN) & (buf[tail] == _CRC_PREFIX_FIRST))
    del buf
    if not len(maybe):
        return len(offs)
    with memoryview(mf.mm) as view:
        for i in maybe.tolist():
            start = int(offs[i])
            if not record_crc_ok(view[start : int(ends[i])], int(props_at[i]) - start):
                return int(i)
    return len(offs)


def _field_checks(
    mf: MappedFile, offs: npt.NDArray[np.int64]
) -> tuple[
    npt.NDArray[np.bool_],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]:
    """Per record: valid so far, body length, body CRC, size, where its properties start."""
    buf = np.frombuffer(mf.mm, dtype=np.uint8)
    size = _gather(buf, offs, 0, 4, ">i4")
    magic = _gather(buf, offs, 4, 4, ">i4")
    crc = _gather(buf, offs, 8, 4, ">i4")
    phys = _gather(buf, offs, 28, 8, ">i8")
    sys_flag = _gather(buf, offs, 36, 4, ">i4")
    body_len = _gather(buf, offs, _BODY_LEN_POS, 4, ">i4")
    ends = offs + size
    ok = (magic == MAGIC_CODE_V1) & (phys == offs + mf.file_from_offset)
    ok &= (sys_flag & _HOST_V6) == 0
    ok &= (body_len >= 0) & (HEADER_V4.size + body_len + 3 <= size)
    topic_pos = np.where(ok, offs + HEADER_V4.size + body_len, offs)
    props_pos = topic_pos + 1 + buf[topic_pos].astype(np.int64)
    props_pos = np.where(ok & (props_pos + 2 <= ends), props_pos, offs)
    props_len = (buf[props_pos].astype(np.int64) << 8) | buf[props_pos + 1]
    ok &= props_pos + 2 + props_len == ends
    ok &= (props_len == 0) | (buf[np.maximum(ends - 1, 0)] == 0x02)
    # a write torn inside the topic leaves zeros from the tear to the page's end, so its last
    # byte (the CRC does not cover it) is no legal name character
    ok &= (props_pos > topic_pos + 1) & _NAME_BYTE[buf[np.maximum(props_pos - 1, 0)]]
    del buf
    return ok, body_len, crc, size, props_pos + 2


def _gather(
    buf: npt.NDArray[np.uint8], offs: npt.NDArray[np.int64], at: int, width: int, dtype: str
) -> npt.NDArray[np.int64]:
    # clipped: a short entry (a blank marker near the file's end) fails the magic check anyway
    idx = np.minimum(offs[:, None] + np.arange(at, at + width), len(buf) - 1)
    out: npt.NDArray[np.int64] = buf[idx].copy().view(dtype).ravel().astype(np.int64)
    return out


def _crc_prefix(
    mf: MappedFile,
    offs: npt.NDArray[np.int64],
    body_len: npt.NDArray[np.int64],
    crc: npt.NDArray[np.int64],
) -> int:
    view = memoryview(mf.mm)
    try:
        crc32 = zlib.crc32
        starts = (offs + HEADER_V4.size).tolist()
        for i, (s, n, c) in enumerate(zip(starts, body_len.tolist(), crc.tolist(), strict=True)):
            if crc32(view[s : s + n]) & 0x7FFFFFFF != c:
                return i
        return len(starts)
    finally:
        view.release()


def _is_blank_marker(mf: MappedFile, pos: int) -> bool:
    size, magic = struct.unpack_from(">ii", mf.mm, pos)
    return bool(magic == BLANK_MAGIC_CODE and size == mf.file_size - pos)
