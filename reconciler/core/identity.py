"""The plan id: a hash of what a plan proposes and of the desired state it came from.

The observation itself is left out: two snapshots a second apart differ in timings, call
counts and CPU jitter, yet propose the same moves, and a rolling pull request must see that
nothing changed. Move sizes and the sentences of details are left out for the same reason
(they quote measured figures); the VM, its hosts, the reason, the rule and the wave are in.

Both hashes are of JSON written by pydantic's serializer (``model_dump_json`` and
``pydantic_core.to_json``): at 5,000 hosts and 15,417 rules the desired state is 3.5 MB of
it, which Python's ``json`` module, with sorted keys, writes two to three times slower. Keys
come in the order the models declare their fields, and what has no meaning in its order
(hosts, rules, labels, the Placement's VMs) is put in name order first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from pydantic_core import to_json

from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Unsatisfiable
from reconciler.model.rules import Rule, Selector

LEFT_OUT: dict[str, Any] = {
    # a rollout acts through the documents it changes for its round (a host out is drained)
    "rollouts": True,
    # notes for people change nothing the reconciler does
    "cluster": {"metadata": {"annotations"}},
    "rules": {"metadata": {"annotations"}},
    "placement": {"metadata": {"annotations"}},
    # nor does how often observations are published: plan ids stay what they were
    "policy": {"metadata": {"annotations"}, "spec": {"record"}},
}
"""What the desired state's digest leaves out."""


def desired_digest(desired: DesiredState) -> str:
    """sha256 of the desired state as canonical JSON: hosts, rules, labels and the
    Placement's VMs in name order, annotations, rollouts and ``record`` left out."""
    text = canonical(desired).model_dump_json(by_alias=True, exclude=LEFT_OUT)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def canonical(desired: DesiredState) -> DesiredState:
    """``desired`` with what has no meaning in its order in name order (copies of the
    documents that change; the rest shared)."""
    cluster, rules, placement = desired.cluster, desired.rules, desired.placement
    hosts = sorted((_host(h) for h in cluster.spec.hosts), key=attrgetter("name"))
    ordered_rules = sorted((_rule(r) for r in rules.spec.rules), key=attrgetter("name", "type"))
    vms = _in_key_order(placement.spec.vms)
    return desired.model_copy(
        update={
            "cluster": cluster.model_copy(
                update={"spec": cluster.spec.model_copy(update={"hosts": hosts})}
            ),
            "rules": rules.model_copy(
                update={"spec": rules.spec.model_copy(update={"rules": ordered_rules})}
            ),
            "placement": placement.model_copy(
                update={"spec": placement.spec.model_copy(update={"vms": vms})}
            ),
        }
    )


def _in_key_order(d: Mapping[str, str]) -> dict[str, str]:
    """``d`` with its keys in order: ``d`` itself when they already are (the common case)."""
    if isinstance(d, dict) and list(d) == sorted(d):
        return d
    return dict(sorted(d.items()))


def _host(host: Host) -> Host:
    labels = _in_key_order(host.labels)
    return host if labels is host.labels else host.model_copy(update={"labels": labels})


def _selector(selector: Selector) -> Selector:
    if selector.labels is None:
        return selector
    labels = _in_key_order(selector.labels)
    if labels is selector.labels:
        return selector
    return selector.model_copy(update={"labels": labels})


def _rule(rule: Rule) -> Rule:
    changed: dict[str, Selector] = {}
    for field in ("vms", "hosts"):
        selector = getattr(rule, field, None)
        if isinstance(selector, Selector) and (ordered := _selector(selector)) is not selector:
            changed[field] = ordered
    return rule.model_copy(update=changed) if changed else rule


def _move_row(m: Move) -> list[Any]:
    return [m.vm, m.source, m.target, m.reason.value, m.rule, m.wave]


def plan_id(
    desired: DesiredState,
    moves: Sequence[Move],
    deferred: Sequence[Move],
    unsatisfiable: Sequence[Unsatisfiable],
    placement: Mapping[str, str],
) -> str:
    """sha256 of the desired state and of the plan's decisions and resulting Placement."""
    decisions = {
        "desired": desired_digest(desired),
        "moves": [_move_row(m) for m in moves],
        "deferred": [_move_row(m) for m in deferred],
        "unsatisfiable": sorted([u.code.value, u.rule or "", sorted(u.vms)] for u in unsatisfiable),
        "placement": _in_key_order(placement),
    }
    return "sha256:" + hashlib.sha256(to_json(decisions)).hexdigest()
