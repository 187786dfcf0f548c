"""Deleted topics: where each was deleted in the commitlog, kept until retention passes it.

Deleting a topic drops its consume queues at once, but its records stay in the commitlog until
retention removes their files. A record of a deleted topic that lies below the commitlog
offset where the topic was deleted is *dead*: dispatch and recovery skip it, so it never comes
back into a consume queue (not after a crash, not when a topic of the same name is created
again, whose queues then start from offset 0). The map lives in ``deletedTopics.json`` under
the store root, written atomically and durably (:mod:`common.json_store`) before any queue file
is removed; an entry goes once the commitlog starts past it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from common.json_store import load_json, write_json_atomic

FILE_NAME = "deletedTopics.json"


class DeletedTopics:
    """``topic -> commitlog offset it was deleted at``; see the module docstring.

    Changes (a deletion on the event loop, retention's pass in its worker thread) hold a lock;
    :meth:`is_dead` reads without one.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.cuts: dict[str, int] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read the file (or its backup) if there is one."""
        cuts = load_json(self.path, _decode_cuts)
        if cuts is not None:
            self.cuts = cuts

    def is_dead(self, topic: str, phys_offset: int) -> bool:
        """True for a record of a deleted topic written before the deletion."""
        cut = self.cuts.get(topic)
        return cut is not None and phys_offset < cut

    def add(self, topic: str, cut: int) -> None:
        """Record that ``topic`` was deleted when the commitlog ended at ``cut``; durable on
        return."""
        with self._lock:
            cuts = {**self.cuts, topic: max(cut, self.cuts.get(topic, 0))}
            self._save(cuts)  # raises (a full disk) with nothing changed
            self.cuts = cuts

    def clamp_to(self, commitlog_end: int) -> int:
        """Recovery cut the commitlog at ``commitlog_end``: no cut may lie past it. Records of
        the topic from there on are written after its deletion (the ones between were lost),
        and are alive. Returns how many cuts moved; durable on return."""
        with self._lock:
            moved = [t for t, cut in self.cuts.items() if cut > commitlog_end]
            for topic in moved:
                self.cuts[topic] = commitlog_end
            if moved:
                self._save(self.cuts)
        return len(moved)

    def forget_below(self, commitlog_min_offset: int) -> int:
        """Drop the entries no record below them is left for; return how many went."""
        with self._lock:
            gone = [t for t, cut in self.cuts.items() if cut <= commitlog_min_offset]
            for topic in gone:
                del self.cuts[topic]
            if gone:
                self._save(self.cuts)
        return len(gone)

    def _save(self, cuts: dict[str, int]) -> None:
        # fsynced, then renamed; a file that does not decode never becomes the backup
        write_json_atomic(self.path, dict(sorted(cuts.items())), _decode_cuts)


def _decode_cuts(doc: object) -> dict[str, int]:
    """``{topic: commitlog offset}``; ValueError for anything else."""
    if not isinstance(doc, dict):
        raise ValueError("expected a map of topic to commitlog offset")
    cuts: dict[str, int] = {}
    for topic, cut in doc.items():
        if not isinstance(cut, int) or isinstance(cut, bool) or cut < 0:
            raise ValueError(f"bad offset for {topic!r}: {cut!r}")
        cuts[str(topic)] = cut
    return cuts
