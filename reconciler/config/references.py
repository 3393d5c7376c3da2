"""Names in the rules that refer to nothing: likely typos, so warnings with the closest name.

A VM named without globs that the Placement does not list may still exist (the Placement lists
only the VMs given a desired host, the example folder's ``app-1`` among them), so it is warned
about only when a placed VM has a close name (``db-01`` when ``db-1`` is placed). A label key
may be added to hosts later: a ``topologyKey`` no host has is a warning too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from reconciler.config.findings import Finding, Severity, finding_at
from reconciler.config.selectors import is_glob
from reconciler.config.semantic import Sources, _rule_path
from reconciler.model.desired import DesiredState
from reconciler.model.rules import AntiAffinityRule, SpreadRule

MAX_SEARCHES: Final = 10
"""Closest-name searches per folder: each scans every placed VM (about 70 ms for 27,000), so a
folder naming thousands of unplaced VMs stays fast; names past these are not checked."""


def _closest(name: str, candidates: Iterable[str]) -> str | None:
    import difflib  # only for the hint of a dangling name: off every valid run's path

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return close[0] if close else None


def unplaced_vm_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """A VM name without globs in a rule's ``vms`` that the Placement does not list, when a
    placed VM has a close name."""
    placed = desired.placement.spec.vms
    out: list[Finding] = []
    budget = MAX_SEARCHES
    for i, rule in enumerate(desired.rules.spec.rules):
        for j, name in enumerate(rule.vms.names or ()):
            if is_glob(name) or name in placed or budget <= 0:
                continue
            budget -= 1
            close = _closest(name, placed)
            if close is None:
                continue
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "vms", "names", j),
                    Severity.WARNING,
                    f"{rule.type} {rule.name} names {name!r}, which matches no VM in the Placement",
                    f"did you mean {close!r}? ignore this if {name} is a VM the Placement "
                    "does not list",
                )
            )
    return out


def topology_key_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """A ``topologyKey`` that no host has as a label: every host becomes its own domain
    (antiAffinity) or the spread has no domain at all."""
    keys = sorted({k for h in desired.cluster.spec.hosts for k in h.labels})
    out = []
    for i, rule in enumerate(desired.rules.spec.rules):
        if not isinstance(rule, AntiAffinityRule | SpreadRule) or rule.topology_key is None:
            continue
        key = rule.topology_key
        if key in keys:
            continue
        close = _closest(key, keys)
        listed = ", ".join(keys) or "none"
        effect = (
            "every host counts as its own domain"
            if isinstance(rule, AntiAffinityRule)
            else "no host takes part in the spread"
        )
        hint = f"did you mean {close!r}? " if close else ""
        out.append(
            finding_at(
                src.rules,
                _rule_path(i, "topologyKey"),
                Severity.WARNING,
                f"no host has the label {key!r}, so for {rule.name} {effect}",
                f"{hint}host label keys: {listed}",
            )
        )
    return out


CHECKS = (unplaced_vm_findings, topology_key_findings)


def reference_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Every warning about a name in the rules that refers to nothing."""
    return [finding for check in CHECKS for finding in check(desired, src)]
