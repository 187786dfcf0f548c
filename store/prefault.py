"""Prefaulting mapped pages before the writer reaches them (``MADV_POPULATE_WRITE``).

The first write to each page of a fresh, fallocated mapping takes a page fault in which the
kernel finds the page, marks the file range written and maps it: a few microseconds per 4 KiB,
which the appending event loop pays every 13 records or so. Asking the kernel to populate the
pages ahead of the write position (Linux 5.14+) moves that work to a worker thread: libc's
``madvise`` is called through ctypes, which releases the GIL (``mmap.madvise`` keeps it), so the
event loop keeps appending meanwhile.

Where the call is not available (another OS, an older kernel) :func:`populate_write` reports
False once and the caller stops asking.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap

MADV_POPULATE_WRITE = 23  # <linux/mman.h>; Python 3.11's mmap module does not name it
PAGE_SIZE = mmap.PAGESIZE


@functools.cache
def _load_madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's ``madvise`` (looked up once), or None where there is no libc to load."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def mapping_address(mm: mmap.mmap) -> int:
    """The address of ``mm``'s first byte (the buffer export is released at once)."""
    view = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def populate_write(address: int, length: int) -> bool:
    """Prefault ``length`` bytes at page-aligned ``address`` for writing; False if unsupported.

    The caller must keep the mapping alive during the call. Runs without the GIL.
    """
    fn = _load_madvise()
    return fn is not None and fn(address, length, MADV_POPULATE_WRITE) == 0
