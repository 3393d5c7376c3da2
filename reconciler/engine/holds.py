"""One hold of a cluster made of two leases: the lock of this machine and the hold the cluster
declares (the git lease of its repository, or an etcd lease).

Every acting command takes both, so two actors on one machine meet at the lock whatever they
were given (a folder, ``--repo``), and two actors on different machines meet at the declared
lease. ``JointLease`` takes the machine's lock first (no I/O beyond this machine), then the
declared lease; when the second cannot be taken the first is given back at once, so a standby
``run`` never keeps the machine's lock from a command that could act. ``why`` keeps what the
declared lease last said when it could not be asked (a repository or etcd that does not
answer), for the refusal's message.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.engine.ports import CheckedLease
from reconciler.errors import ReconcilerError


@dataclass
class JointLease:
    """``local`` (this machine's lock) and ``declared``, taken and kept together."""

    local: CheckedLease
    declared: CheckedLease
    label: str
    """The declared lease as messages name it, e.g. "the git lease of https://..."."""
    why: str | None = None
    """Why the declared lease could not be asked at the last try; None when it answered."""
    _blocked_here: bool = False
    _holding: bool = False

    def acquire(self) -> bool:
        """Take both, or renew both; a declared lease that cannot be asked while held keeps
        this machine's lock (the keeper decides when the hold is lost), one that another
        holder has gives it back."""
        if not self.local.acquire():
            self._blocked_here = True
            return False
        self._blocked_here = False
        try:
            taken = self.declared.acquire()
        except ReconcilerError as err:
            self.why = err.message
            if not self._holding:
                self.local.release()
            raise
        self.why = None
        self._holding = taken
        if not taken:
            self.local.release()
        return taken

    def confirm(self) -> bool:
        return self.local.confirm() and self.declared.confirm()

    def holder(self) -> str | None:
        if self._blocked_here:
            who = self.local.holder()
            return f"{who}, through this machine's lock" if who else None
        who = self.declared.holder()
        return f"{who}, through {self.label}" if who else None

    def release(self) -> None:
        self._holding = False
        try:
            self.declared.release()
        finally:
            self.local.release()
