"""Body compression as RocketMQ's producer does it (``tryToCompressMessage``).

A non-batch body of at least ``compressMsgBodyOverHowmuch`` (4096) bytes is zlib-compressed at
level 5 and the record's SYSFLAG gets ``COMPRESSED_FLAG | COMPRESSION_ZLIB`` (0x1 | 0x300), as
RocketMQ 5 sets. Consumers decompress when ``COMPRESSED_FLAG`` is set; the type bits 0 (a 4.x
producer) also mean zlib. LZ4 and ZSTD bodies are refused with a ValueError.
"""

from __future__ import annotations

import zlib
from typing import Final

from common.message import MessageSysFlag

COMPRESS_MSG_BODY_OVER_HOWMUCH: Final = 4096
DEFAULT_COMPRESS_LEVEL: Final = 5
ZLIB_SYS_FLAG: Final = MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB


def maybe_compress(
    body: bytes,
    threshold: int = COMPRESS_MSG_BODY_OVER_HOWMUCH,
    level: int = DEFAULT_COMPRESS_LEVEL,
) -> tuple[bytes, int]:
    """Return ``(body, sys_flag_bits)``: compressed with its bits when ``len(body) >= threshold``
    and compressing makes it smaller.

    RocketMQ uses the compressed body even when it is larger; minimq sends such a body (random
    or already compressed data) as it is, so a body the size check let through never grows
    past the broker's message size limit on the wire.
    """
    if len(body) < threshold:
        return body, 0
    compressed = zlib.compress(body, level)
    if len(compressed) >= len(body):
        return body, 0
    return compressed, ZLIB_SYS_FLAG


def is_compressed(sys_flag: int) -> bool:
    """True when ``sys_flag`` marks a compressed body."""
    return bool(sys_flag & MessageSysFlag.COMPRESSED_FLAG)


def decompress_if_needed(body: bytes, sys_flag: int) -> bytes:
    """Return the original body of a record with this ``sys_flag``."""
    if not is_compressed(sys_flag):
        return body
    kind = sys_flag & MessageSysFlag.COMPRESSION_MASK
    if kind not in (0, MessageSysFlag.COMPRESSION_ZLIB):
        raise ValueError(f"unsupported compression type bits 0x{kind:x}")
    try:
        return zlib.decompress(body)
    except zlib.error as e:
        raise ValueError(f"corrupt zlib body: {e}") from e
