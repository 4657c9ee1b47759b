"""The state as an object you keep (issue 33): snapshots of a model's whole state, saved, loaded, forked and
continued, and a model's cached paths checked against its full forward (:mod:`.cache_check`).

:func:`snapshot` takes it, :func:`snapshot_bytes` states its size before, :func:`load_snapshot`
reads it back; :class:`Snapshot` continues, forks and generates.
"""

from hiddenstate.keep.api import load_snapshot, snapshot, snapshot_bytes
from hiddenstate.keep.snapshot import Snapshot

__all__ = ["Snapshot", "load_snapshot", "snapshot", "snapshot_bytes"]
