"""Moves as the planner builds them, before waves and batch are assigned."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reconciler.core.feasibility import Refusal
from reconciler.model.plan import Reason, Unsatisfiable, UnsatisfiableCode


@dataclass(frozen=True, slots=True)
class Step:
    """One planned migration, in the order it was simulated."""

    vm: int
    source: int
    target: int
    reason: Reason
    rule: str | None
    detail: str
    mandatory: bool
    unit: int | None = None
    """Steps sharing a unit id move in one wave (a required affinity group moving together)."""


def unsatisfiable(
    code: UnsatisfiableCode, message: str, vms: Iterable[str] = (), rule: str | None = None
) -> Unsatisfiable:
    return Unsatisfiable(code=code, rule=rule, vms=sorted(set(vms)), message=message)


def summarise(refusals: Sequence[Refusal], limit: int = 3) -> str:
    """'kvm-02 has 1GiB free, the VM needs 4GiB; ... (+2 more)' grouped by category."""
    if not refusals:
        return "no host of its architecture is known and out of maintenance"
    by_cat: dict[str, list[Refusal]] = {}
    for r in refusals:
        by_cat.setdefault(r.category, []).append(r)
    parts = []
    for refs in sorted(by_cat.values(), key=lambda rs: (-len(rs), rs[0].category)):
        more = f" (+{len(refs) - 1} more like it)" if len(refs) > 1 else ""
        parts.append(refs[0].text + more)
    extra = len(parts) - limit
    text = "; ".join(parts[:limit])
    return text + (f"; and {extra} other reasons" if extra > 0 else "")
