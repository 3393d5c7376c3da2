"""What a placement rule means, said once: whether it is required, which topology domain a host
is in, and which names a selector picks.

The planner and validation (``reconciler.config``) both read rules through these, so ``validate``
never accepts a folder the planner counts as broken, nor rejects one the planner satisfies.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.core.selectors import matches
from reconciler.model.rules import (
    AffinityRule,
    DisruptionBudgetRule,
    Enforcement,
    ExcludeRule,
    PinRule,
    Rule,
    Selector,
)


def is_required(rule: Rule) -> bool:
    """A pin always is; exclude and disruption budgets are not constraints on hosts at all."""
    if isinstance(rule, PinRule):
        return True
    if isinstance(rule, ExcludeRule | DisruptionBudgetRule):
        return False
    return rule.enforcement is Enforcement.REQUIRED


def topology_key(rule: Rule) -> str | None:
    """The host label a group rule counts domains by; None: every host is its own domain."""
    if isinstance(rule, AffinityRule):
        return None
    return getattr(rule, "topology_key", None)


def topology_domain(
    host: str, labels: Mapping[str, str], key: str | None, *, spread: bool = False
) -> str | None:
    """The domain ``host`` counts in for a group rule over ``key``; None: it takes no part.

    Without ``key`` every host is its own domain. A host without the ``key`` label takes no
    part in a spread, and is its own domain for an antiAffinity (two members on it are together).
    """
    if key is None:
        return host
    if key in labels:
        return f"{key}={labels[key]}"
    return None if spread else f"host={host}"


def selects_name(selector: Selector, name: str) -> bool:
    """Whether the ``names`` part of ``selector`` picks ``name`` (its labels are not looked at)."""
    return matches(selector, name, selector.labels or {})


__all__ = ["is_required", "selects_name", "topology_domain", "topology_key"]
