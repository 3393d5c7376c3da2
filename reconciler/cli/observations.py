"""What ``run`` keeps of its observations: a compact snapshot per round that changed beyond
noise, in the state directory, and with ``--repo`` the latest one pushed to
``reconciler/observed/<cluster>`` at most every ``spec.record.every`` (see docs/review.md).

Recording never fails a round: a problem is logged and the next round tries again.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from reconciler.adapters.git.observations import ObservationStore, push_snapshot, pushed_at
from reconciler.adapters.git.repo import GitStateRepo
from reconciler.errors import ReconcilerError
from reconciler.model.policy import BalancePolicy
from reconciler.model.snapshot import Snapshot

log = logging.getLogger(__name__)


class Recorder:
    """Records the rounds of one cluster; ``repo`` set: also publishes them."""

    def __init__(self, state_dir: Path, cluster: str, repo: GitStateRepo | None) -> None:
        self.store = ObservationStore(state_dir, cluster)
        self.cluster = cluster
        self.repo = repo
        self.pushed: datetime | None = None
        self._looked = False
        self.unpushed: Snapshot | None = None
        """The newest recorded snapshot not on the branch yet."""

    @classmethod
    def of(cls, source: object, state_dir: Path, cluster: str) -> Recorder:
        """The recorder of ``run``'s desired-state source: publishing when it is a repository."""
        repo = getattr(source, "repo", None)
        return cls(state_dir, cluster, repo if isinstance(repo, GitStateRepo) else None)

    def after_round(self, snapshot: Snapshot | None, policy: BalancePolicy, now: datetime) -> None:
        """Keep what the round observed; push when due. Logs instead of raising."""
        if snapshot is None or not any(h.reachable for h in snapshot.hosts):
            return
        try:
            if self.store.record(snapshot, now):
                self.unpushed = snapshot
            if self.repo is not None and self.unpushed is not None:
                self._push(self.repo, self.unpushed, policy, now)
        except (ReconcilerError, OSError) as err:
            log.warning("recording the observation failed: %s", err)

    def _push(
        self, repo: GitStateRepo, snapshot: Snapshot, policy: BalancePolicy, now: datetime
    ) -> None:
        if not self._looked:  # another instance may have pushed recently: respect its time
            self.pushed = pushed_at(repo, self.cluster)
            self._looked = True
        if self.pushed is not None and now - self.pushed < policy.spec.record.every:
            return
        commit = push_snapshot(repo, snapshot)
        self.pushed = now
        if commit is None:
            log.info("observed branch moved meanwhile; the next push follows it")
            self._looked = False
            return
        log.info("pushed the observation to reconciler/observed/%s (%s)", self.cluster, commit[:12])
        self.unpushed = None
