"""Where a migrated VM is after its migration, and what follows a post-copy that failed.

``look``/``look_on`` read one host's view of the VM (exists, active, state and reason,
persistent). The rest is about post-copy: once a migration has switched to post-copy the VM
runs on the target while its source still holds the memory not fetched yet, so neither copy can
run alone. When the migration call fails then (a daemon killed, the link lost), libvirt 8.5+
keeps both halves: the source paused (``post-copy failed``), the target running or paused.
``split`` tells such a state apart; ``resume`` asks libvirt to carry on where it stopped
(``VIR_MIGRATE_POSTCOPY_RESUME``, the flags of the first call); ``what_to_do`` says what a
person must do when the reconciler could not settle it. The source is never resumed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.connection import is_no_domain
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.errors import ReconcilerError

RUNNING: Final = frozenset({libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_BLOCKED})
PAUSES: Final = frozenset(
    {libvirt.VIR_DOMAIN_PAUSED_POSTCOPY, libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED}
)
"""Paused with memory already on the target: resuming the source would run it twice."""
RUNS: Final = frozenset(
    {libvirt.VIR_DOMAIN_RUNNING_POSTCOPY, libvirt.VIR_DOMAIN_RUNNING_POSTCOPY_FAILED}
)
"""Running on the target while memory is still fetched from the source."""


@dataclass(frozen=True)
class Seen:
    """One host's view of the VM after the migration; ``error`` when it could not be asked."""

    exists: bool = False
    active: bool = False
    state: int = libvirt.VIR_DOMAIN_NOSTATE
    reason: int = 0
    persistent: bool = False
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.active and self.state in RUNNING

    @property
    def paused(self) -> bool:
        return self.active and self.state == libvirt.VIR_DOMAIN_PAUSED

    @property
    def post_copy(self) -> bool:
        """Holding one half of a post-copy migration (going on, or failed)."""
        if self.paused:
            return self.reason in PAUSES
        return self.running and self.reason in RUNS

    @property
    def failed(self) -> bool:
        """Holding one half of a post-copy migration that libvirt reports failed."""
        return self.post_copy and self.reason in (
            libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED,
            libvirt.VIR_DOMAIN_RUNNING_POSTCOPY_FAILED,
        )


def look(conn: Any, uuid: str) -> Seen:
    try:
        dom = conn.lookupByUUIDString(uuid)
        state, reason = dom.state()
        return Seen(
            exists=True,
            active=bool(dom.isActive()),
            state=state,
            reason=reason,
            persistent=bool(dom.isPersistent()),
        )
    except libvirt.libvirtError as err:
        if is_no_domain(err):
            return Seen()
        return Seen(error=str(err))


def look_on(pool: ConnectionPool, host: str, uuid: str) -> Seen:
    """``look`` over the host's pooled connection, on a new one if that one broke."""
    for _ in range(2):
        try:
            conn = pool.get(host)
        except ReconcilerError as err:
            return Seen(error=str(err))
        seen = look(conn, uuid)
        if seen.error is None or pool.alive(conn):
            return seen
        pool.broken(host, conn)
    return seen


def split(source: Seen, target: Seen) -> bool:
    """Whether the VM is held by a post-copy migration, going on or failed: its source paused
    by post-copy, or its target running or paused by it."""
    return source.post_copy or target.post_copy


def resume(
    pool: ConnectionPool,
    host: str,
    uuid: str,
    dest_uri: str,
    params: dict[str, Any],
    flags: int,
    timeout: float,
) -> str:
    """Resume the failed post-copy of ``uuid`` from its source ``host`` (the first call's
    destination, parameters and flags, with ``VIR_MIGRATE_POSTCOPY_RESUME``); a note of what
    came of it. The call blocks until the migration ends: after ``timeout`` seconds it is left
    to run and the hosts are looked at again."""
    outcome: list[str] = []

    def work() -> None:
        try:
            dom = pool.get(host).lookupByUUIDString(uuid)
            dom.migrateToURI3(
                dest_uri,
                params,
                flags | libvirt.VIR_MIGRATE_POSTCOPY | libvirt.VIR_MIGRATE_POSTCOPY_RESUME,
            )
            outcome.append("resumed the failed post-copy")
        except (libvirt.libvirtError, ReconcilerError) as err:
            outcome.append(f"resuming the failed post-copy failed: {err}")

    worker = threading.Thread(target=work, name="resume post-copy", daemon=True)
    worker.start()
    worker.join(timeout)
    return outcome[0] if outcome else f"the resumed post-copy had not ended after {timeout:g}s"


def what_to_do(
    vm: str, source: str, target: str, source_uri: str, target_uri: str, target_has_it: bool
) -> str:
    """What a person must do with ``vm`` left split by a failed post-copy."""
    if not target_has_it:
        return (
            f"post-copy failed and {target} no longer holds {vm}: the memory it had fetched "
            f"is lost, so the paused copy on {source} cannot run on; restart it there "
            f"(virsh -c {source_uri} destroy {vm}; virsh -c {source_uri} start {vm}), it boots "
            "afresh; never resume it"
        )
    return (
        f"post-copy failed: {vm}'s memory is split between {source} (paused) and {target}; "
        f"do not resume or start it on {source}; once both hosts answer, resume the migration: "
        f"virsh -c {source_uri} migrate --live --p2p --persistent --undefinesource --postcopy "
        f"--postcopy-resume {vm} {target_uri}"
    )
