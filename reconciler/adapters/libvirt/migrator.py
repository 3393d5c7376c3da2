"""The ``Migrator`` port over libvirt: each move goes the way its class says, and nothing else.

- ``shared``: a verified peer-to-peer live migration (``live_move``);
- ``copy``: the same with the local disks copied, then the source volumes deleted
  (``copy_move``);
- ``cold``: a shut-off VM's volumes streamed and its definition moved (``cold_move``).

The adapter's modules import one way, checked by ``lint-imports``: this dispatcher on top; the
copy and cold moves below it; the live move and the ledger of leftover volumes (``leftovers``)
below them; the volumes (``volumes``) below those; the pure call-building (``calls``) and the
result of a move that never started (``results``) at the bottom.

``migrate`` never raises for a move: a host not in the cluster, a source that does not answer,
a VM not found or a target that cannot take it are results with ``succeeded=False`` and the VM
where it was; what failed later is what both hosts show. Before each move, volumes an earlier
failed move left on a host that did not answer then are deleted (``Leftovers.sweep``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from reconciler.adapters.libvirt import cold_move, copy_move
from reconciler.adapters.libvirt.calls import copy_time_limit
from reconciler.adapters.libvirt.connection import ConnectionSettings
from reconciler.adapters.libvirt.leftovers import Leftovers
from reconciler.adapters.libvirt.live_move import LiveMove, Watch
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.adapters.libvirt.results import failed_before_start
from reconciler.errors import ConfigError
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move
from reconciler.model.snapshot import MigrationClass

log = logging.getLogger(__name__)


class LibvirtMigrator:
    """``Migrator`` for libvirt: one verified move per ``migrate``, by its class.

    Over the command's open connections (``pool``); built without a pool, each migration
    opens its own connections (one to each host, and one to the source for the migration and
    its watcher) and closes them afterwards. ``shared_paths`` adds to ``spec.sharedStorage``
    (``--shared-path``) for ``VIR_MIGRATE_UNSAFE`` (``calls.declared_shared``).
    """

    def __init__(
        self,
        desired: DesiredState,
        *,
        connection: ConnectionSettings | None = None,
        poll_interval: float = 0.2,
        settle_timeout: float = 60.0,
        pool: ConnectionPool | None = None,
        leftovers: Leftovers | None = None,
        clock: Callable[[], float] = time.monotonic,
        shared_paths: Sequence[str] = (),
    ) -> None:
        self.desired = desired
        self.leftovers = leftovers or Leftovers()
        """Target volumes of failed disk moves not yet deleted (their host did not answer)."""
        self.watch = Watch(poll_interval=poll_interval, settle_timeout=settle_timeout, clock=clock)
        self.connection = connection or ConnectionSettings()
        self.pool = pool
        self.shared_paths = tuple(
            dict.fromkeys([*desired.cluster.spec.shared_storage, *shared_paths])
        )
        self._hosts = {h.name: h for h in desired.cluster.spec.hosts}

    def host_of(self, name: str) -> Host:
        """The Cluster's host ``name`` (ConfigError when the Cluster has none)."""
        try:
            return self._hosts[name]
        except KeyError:
            raise ConfigError(
                f"host {name} is not in cluster {self.desired.cluster.metadata.name}",
                hint="plan again against the current cluster.yaml",
            ) from None

    def migrate(
        self,
        move: Move,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        """Move ``move.vm`` by its class and report where it runs afterwards (the module doc).

        With ``uuid`` the domain is found by it (a name can be reused by another domain)."""
        began = time.monotonic()
        try:
            source, target = self.host_of(move.source), self.host_of(move.target)
        except ConfigError as err:
            return failed_before_start(move, began, f"not started: {err}")
        pool = self.pool or ConnectionPool(
            {source.name: source.uri, target.name: target.uri}, self.connection
        )
        try:
            self.leftovers.sweep(pool)
            live = LiveMove(self.desired, pool, self.watch, shared_paths=self.shared_paths)
            kind = move.migration_class
            if kind is MigrationClass.COPY:
                return copy_move.live_copy(
                    pool,
                    self.leftovers,
                    live,
                    move,
                    target,
                    on_progress=on_progress,
                    abort=abort,
                    uuid=uuid,
                )
            if kind is MigrationClass.COLD:
                limit, _ = copy_time_limit(self.desired, move, 0)
                return cold_move.cold_move(
                    pool,
                    self.leftovers,
                    move,
                    limit=limit,
                    on_progress=on_progress,
                    abort=abort,
                    uuid=uuid,
                )
            return live.migrate(move, target, on_progress=on_progress, abort=abort, uuid=uuid)
        finally:
            if pool is not self.pool:
                pool.close()

    def discard_copy(self, host: str, vm: str, *, uuid: str) -> None:
        """Remove the shut-off copy of ``vm`` a stopped move left on ``host`` (a cold move's,
        or a lost post-copy's that the target's daemon left defined);
        ReconcilerError when it cannot be removed (ConfigError: no such host)."""
        pool = self.pool or ConnectionPool({host: self.host_of(host).uri}, self.connection)
        try:
            cold_move.discard_copy(pool, self.leftovers, host, uuid)
            log.warning("%s: removed the shut-off copy a stopped move left on %s", vm, host)
        finally:
            if pool is not self.pool:
                pool.close()
