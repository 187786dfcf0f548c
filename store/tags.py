"""Tag hash codes for consume-queue units, cached (tags have few distinct values)."""

from __future__ import annotations

from common.hashing import java_string_hash

_CACHE: dict[str, int] = {}
_CACHE_MAX = 65_536


def tags_code(tags: str | None) -> int:
    """RocketMQ's ``tagsString2tagsCode``: Java ``hashCode`` of the tag, 0 without one."""
    if not tags:
        return 0
    code = _CACHE.get(tags)
    if code is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        code = _CACHE[tags] = java_string_hash(tags)
    return code
