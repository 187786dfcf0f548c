"""Tag hash codes for consume-queue units, cached (tags have few distinct values)."""

from __future__ import annotations

from common.hashing import java_string_hash

TAGS_CODE_CACHE: dict[str, int] = {}
TAGS_CODE_CACHE_MAX = 65_536


def tags_code(tags: str | None) -> int:
    """RocketMQ's ``tagsString2tagsCode``: Java ``hashCode`` of the tag, 0 without one."""
    if not tags:
        return 0
    code = TAGS_CODE_CACHE.get(tags)
    if code is None:
        if len(TAGS_CODE_CACHE) >= TAGS_CODE_CACHE_MAX:
            TAGS_CODE_CACHE.clear()
        code = TAGS_CODE_CACHE[tags] = java_string_hash(tags)
    return code
