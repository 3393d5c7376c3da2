"""A live move that copies the VM's local disks (class copy), verified before the source is
cleaned.

The local disks the plan names are copied over NBD (``VIR_MIGRATE_NON_SHARED_DISK``;
``VIR_MIGRATE_PARAM_MIGRATE_DISKS`` lists them, so disks on shared storage are never copied);
for a storage-pool volume the target daemon precreates the volume in its pool of the same name.
Before it starts, a target pool that already holds a volume of that name refuses the move
(``volumes.prepare_copy``: libvirt would copy over it). After libvirt's move is verified (the
VM runs on the target only, ``live_move``), each target volume must be present with the
source's capacity; only then are the source volumes deleted. A failed move deletes the target
volumes it created (``leftovers``), so a failed copy leaves nothing behind and the source as it
was. The source volumes are noted before libvirt starts, as to go once the VM runs on the
target with its copies: a reconciler stopped while libvirt ended the move has them deleted by
a later one, after the same check. Shut-off VMs move cold instead (``cold_move``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from reconciler.adapters.libvirt.leftovers import Leftovers
from reconciler.adapters.libvirt.live_move import LiveMove
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.adapters.libvirt.results import failed_before_start
from reconciler.adapters.libvirt.volumes import NOT_STARTED, prepare_copy, verify_volumes
from reconciler.errors import HostTimeout, HostUnreachable
from reconciler.model.cluster import Host
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move


def live_copy(
    pool: ConnectionPool,
    leftovers: Leftovers,
    live: LiveMove,
    move: Move,
    target: Host,
    *,
    on_progress: Callable[[MigrationProgress], None],
    abort: threading.Event,
    uuid: str | None,
) -> MigrationResult:
    """Migrate ``move.vm`` live to ``target`` by ``live`` with its local disks copied; verified,
    then the source volumes deleted. Never raises for the move: the result says what happened."""
    began = time.monotonic()
    try:
        setup = prepare_copy(pool, move, uuid, shut_off=False)
    except NOT_STARTED as err:
        return failed_before_start(move, began, f"not started: {err}")
    found, volumes = setup.uuid, setup.volumes
    leftovers.expect(move.target, volumes, found)  # libvirt may precreate them
    # libvirt undefines the source as the move ends: a reconciler stopped from then on still
    # has these noted, deleted once the VM runs on the target with its copies
    leftovers.expect(move.source, volumes, found, after=move.target)
    result = live.migrate(move, target, on_progress=on_progress, abort=abort, uuid=found)
    if not result.succeeded:
        notes: list[str] = []
        if move.target not in (*result.running_on, *result.paused_on):
            notes = leftovers.remove(pool, move.target, found)  # libvirt precreated
            leftovers.forget(move.source, volumes, found)  # the source's, in use
        else:  # split or on both: the source's go only once it runs on the target alone
            leftovers.forget(move.target, volumes, found)
        return result.model_copy(update={"error": "; ".join([result.error or "", *notes])})
    leftovers.forget(move.target, volumes, found)
    try:
        problem = verify_volumes(pool.get(move.target), volumes)
    except (HostUnreachable, HostTimeout) as err:
        problem = f"the target's volumes could not be checked: {err}"
    if problem is not None:  # the VM runs there; keep every copy and say so
        leftovers.forget(move.source, volumes, found)
        return result.model_copy(
            update={"error": f"moved, but {problem}; the source volumes are kept"}
        )
    cleaned = leftovers.remove(pool, move.source, found)
    return result.model_copy(update={"error": "; ".join(cleaned) or result.error})
