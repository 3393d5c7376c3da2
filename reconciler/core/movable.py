"""Whether the planner may move a VM at all, by its migration class and the policy.

- ``shared``: a plain live migration (when nothing else blocks it: ``migratable``).
- ``copy``: live with its local disks copied, only with ``spec.migration.localDisks: copy``.
- ``cold``: shut off; with local disks only with ``localDisks: copy`` (they are copied too),
  without local disks always (only its definition moves).
- ``immovable``: never.

``copy_bytes`` is what a move copies: guest memory when it runs, plus its local disks'
allocation. The planner prefers, among moves of equal effect, the one with less to copy.
"""

from __future__ import annotations

from reconciler.model.policy import BalancePolicySpec, LocalDisks
from reconciler.model.snapshot import MigrationClass, UnmigratableReason, VmState

_NOT_BLOCKING_A_COPY = frozenset({UnmigratableReason.LOCAL_DISK, UnmigratableReason.NOT_RUNNING})


def why_fixed(vm: VmState, spec: BalancePolicySpec) -> str | None:
    """Why ``vm`` may not be moved under ``spec``; None when it may."""
    klass = vm.migration_class
    if klass is MigrationClass.SHARED and vm.migratable:
        return None
    local = [d for d in vm.disks if not d.shared]
    disks = ", ".join(f"{d.target} ({d.source})" for d in local)
    others = [u.detail for u in vm.unmigratable if u.code not in _NOT_BLOCKING_A_COPY]
    copying = spec.migration.local_disks is LocalDisks.COPY
    if klass in (MigrationClass.COPY, MigrationClass.COLD) and not others:
        if not local or copying:
            return None
        how = "live" if klass is MigrationClass.COPY else "shut off"
        return (
            f"{vm.name} has local disks {disks} and spec.migration.localDisks is block "
            f"(copy would move it {how} with its disks)"
        )
    reasons = others or vm.migration_reasons or [u.detail for u in vm.unmigratable]
    what = "cannot be moved" if klass is MigrationClass.IMMOVABLE else "cannot be live-migrated"
    return f"{vm.name} {what}: {'; '.join(reasons) or klass.value}"


def copy_bytes(vm: VmState, memory: int) -> int:
    """Bytes a move of ``vm`` copies: ``memory`` (0 for a shut-off VM) plus its disk bytes."""
    return memory + vm.disk_bytes
