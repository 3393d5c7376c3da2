"""The one check that a cluster was observed at all, for the round and for every command that
plans: nothing is planned when no host answered."""

from __future__ import annotations

from reconciler.errors import TerminalError
from reconciler.model.snapshot import Snapshot


def require_observed(snapshot: Snapshot) -> None:
    """TerminalError naming each host's error when no host of ``snapshot`` answered."""
    if snapshot.hosts and not any(h.reachable for h in snapshot.hosts):
        lines = "; ".join(f"{h.name}: {h.error or 'unreachable'}" for h in snapshot.hosts)
        raise TerminalError(
            f"no host of cluster {snapshot.cluster!r} could be observed ({lines})",
            hint="check that libvirtd runs on the hosts and that their URIs are reachable",
        )
