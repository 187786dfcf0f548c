"""ConsumerOffsetManager: committed consume offsets (RocketMQ's ``ConsumerOffsetManager``).

Rules:

- Offsets are keyed ``"topic@group"`` -> ``{queue_id: offset}``; ``@`` never occurs in a valid
  topic or group name, so the key splits unambiguously at its last ``@``.
- :meth:`ConsumerOffsetManager.persist` writes ``<config_dir>/consumerOffset.json`` atomically
  (via :mod:`broker.json_store`, previous file kept as ``.bak``) in RocketMQ's shape
  ``{"offsetTable": {"topic@group": {"0": 12, ...}}}``; :meth:`load` falls back to the ``.bak``.
- :attr:`dirty` is set by every change and cleared by persist, so the periodic flush
  (``flushConsumerOffsetInterval``) can skip unchanged state.
- Pull offsets (RocketMQ's ``pullOffsetTable``): the ``nextBeginOffset`` of the last pull the
  broker answered for a group's queue, in memory only (never persisted, not :attr:`dirty`);
  dropped with the group's or topic's committed offsets. ``pullOffset - consumerOffset`` is the
  queue's ``#Inflight`` in ``mqadmin consumerProgress``: pulled, not yet committed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.json_store import load_json, write_json_atomic
from common.digits import parse_uint

TOPIC_GROUP_SEPARATOR = "@"
OFFSETS_FILE = "consumerOffset.json"


def _key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def check_key_parts(topic: str, group: str) -> None:
    """ValueError when ``topic`` or ``group`` holds the ``@`` that separates them in a key
    (the offset would be read back under another topic and group)."""
    if TOPIC_GROUP_SEPARATOR in topic or TOPIC_GROUP_SEPARATOR in group:
        raise ValueError("topic and group must not contain '@'")


def _split(key: str) -> tuple[str, str]:
    topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
    return topic, group


class ConsumerOffsetManager:
    """``topic@group`` -> ``{queue_id: offset}``, persisted to ``consumerOffset.json``."""

    def __init__(self, config_dir: Path) -> None:
        self.config_dir = Path(config_dir)
        self._table: dict[str, dict[int, int]] = {}
        self._pulled: dict[str, dict[int, int]] = {}
        self.dirty = False
        self.load()

    @property
    def path(self) -> Path:
        """``<config_dir>/consumerOffset.json``."""
        return self.config_dir / OFFSETS_FILE

    # ------------------------------------------------------------------ offsets

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the group's next offset to consume in ``topic``/``queue_id``."""
        if queue_id < 0:
            raise ValueError(f"queue_id must be >= 0, got {queue_id}")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        check_key_parts(topic, group)
        queues = self._table.setdefault(_key(topic, group), {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when there is none."""
        return self._table.get(_key(topic, group), {}).get(queue_id, -1)

    def commit_pull_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` (a pull's ``nextBeginOffset``) as where the group's pulls of
        ``topic``/``queue_id`` got to (RocketMQ's ``commitPullOffset``); in memory only."""
        self._pulled.setdefault(_key(topic, group), {})[queue_id] = offset

    def query_pull_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group's pulls of the queue got to; the committed offset (-1 when none)
        when the broker answered no pull of it since it started (RocketMQ's
        ``queryPullOffset``)."""
        pulled = self._pulled.get(_key(topic, group), {}).get(queue_id)
        return self.query_offset(group, topic, queue_id) if pulled is None else pulled

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """A copy of ``{queue_id: offset}`` for the group on the topic (empty when none)."""
        return dict(self._table.get(_key(topic, group), {}))

    def which_topics_by_group(self, group: str) -> set[str]:
        """Topics the group has committed offsets for."""
        return {t for t, g in map(_split, self._table) if g == group}

    def which_groups_by_topic(self, topic: str) -> set[str]:
        """Groups that have committed offsets for the topic."""
        return {g for t, g in map(_split, self._table) if t == topic}

    def remove_group(self, group: str, topic: str | None = None) -> int:
        """Drop the group's offsets (on ``topic`` only, if given); the number of keys removed."""
        doomed = [
            key
            for key in self._table
            if _split(key)[1] == group and (topic is None or _split(key)[0] == topic)
        ]
        for key in doomed:
            del self._table[key]
        self._forget_pulls(lambda t, g: g == group and (topic is None or t == topic))
        if doomed:
            self.dirty = True
        return len(doomed)

    def remove_topic(self, topic: str) -> int:
        """Drop every group's offsets on ``topic`` (RocketMQ's ``cleanOffsetByTopic``); the
        number of keys removed."""
        doomed = [key for key in self._table if _split(key)[0] == topic]
        for key in doomed:
            del self._table[key]
        self._forget_pulls(lambda t, _: t == topic)
        if doomed:
            self.dirty = True
        return len(doomed)

    def _forget_pulls(self, matches: Callable[[str, str], bool]) -> None:
        """Drop the pull offsets of every ``topic@group`` key that ``matches(topic, group)``."""
        for key in [k for k in self._pulled if matches(*_split(k))]:
            del self._pulled[key]

    def clone_offset(self, src_group: str, dst_group: str, topic: str) -> bool:
        """Copy ``src_group``'s offsets on ``topic`` to ``dst_group``; False if it had none.
        ValueError (nothing copied) for a ``dst_group`` or ``topic`` holding ``@``."""
        check_key_parts(topic, dst_group)
        src = self._table.get(_key(topic, src_group))
        if src is None:
            return False
        self._table[_key(topic, dst_group)] = dict(src)
        self.dirty = True
        return True

    # ------------------------------------------------------------------ persistence

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's ``consumerOffset.json`` document (queue ids as string keys)."""
        return {
            "offsetTable": {
                key: {str(q): off for q, off in sorted(queues.items())}
                for key, queues in sorted(self._table.items())
            }
        }

    def persist(self) -> None:
        """Write ``consumerOffset.json`` atomically and clear :attr:`dirty`."""
        self.write_snapshot(self.to_wire())
        self.dirty = False

    def write_snapshot(self, doc: dict[str, Any]) -> None:
        """Write ``doc`` (from :meth:`take_dirty_snapshot`) to ``consumerOffset.json``; the
        previous file becomes the ``.bak`` only if it still loads. Blocking: fsyncs."""
        write_json_atomic(self.path, doc, self._decode)

    def take_dirty_snapshot(self) -> dict[str, Any] | None:
        """The document to persist if something changed (clearing :attr:`dirty`), else None.

        Lets the caller write it in a worker thread while the table keeps changing; on a
        failed write it sets :attr:`dirty` again.
        """
        if not self.dirty:
            return None
        self.dirty = False
        return self.to_wire()

    def persist_if_dirty(self) -> bool:
        """:meth:`persist` when something changed since the last persist; True if it wrote."""
        if not self.dirty:
            return False
        self.persist()
        return True

    def load(self) -> bool:
        """Replace the table with ``consumerOffset.json``; False when neither it nor its
        ``.bak`` exists.

        A file that does not parse or has the wrong shape is skipped for its ``.bak``;
        ValueError when neither loads.
        """
        loaded = load_json(self.path, self._decode)
        if loaded is None:
            return False
        self._table = loaded
        self.dirty = False
        return True

    @staticmethod
    def _decode(doc: object) -> dict[str, dict[int, int]]:
        """An offsets document -> its table; ValueError if it has the wrong shape."""
        table = doc.get("offsetTable") if isinstance(doc, dict) else None
        if not isinstance(table, dict):
            raise ValueError("expected a map with an 'offsetTable' map")
        loaded: dict[str, dict[int, int]] = {}
        for key, queues in table.items():
            if TOPIC_GROUP_SEPARATOR not in key or not isinstance(queues, dict):
                raise ValueError(f"bad offsetTable entry {key!r}")
            entry: dict[int, int] = {}
            for qid, offset in queues.items():
                queue_id = parse_uint(str(qid), max_digits=9)
                if queue_id is None or not isinstance(offset, int) or isinstance(offset, bool):
                    raise ValueError(f"bad offset {qid!r}: {offset!r} in {key!r}")
                entry[queue_id] = offset
            loaded[key] = entry
        return loaded
