"""The plan id: a hash of what a plan proposes and of the desired state it came from.

The observation itself is left out: two snapshots a second apart differ in timings, call
counts and CPU jitter, yet propose the same moves, and a rolling pull request must see that
nothing changed. Move sizes and the sentences of details are left out for the same reason
(they quote measured figures); the VM, its hosts, the reason, the rule and the wave are in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Unsatisfiable


def desired_digest(desired: DesiredState) -> str:
    """sha256 of the desired state as canonical JSON (lists without meaning in order sorted)."""
    d = desired.model_dump(mode="json", by_alias=True)
    # a rollout acts through the documents it changes for its round (a host out is drained)
    d.pop("rollouts", None)
    d["cluster"]["spec"]["hosts"].sort(key=lambda h: h["name"])
    d["rules"]["spec"]["rules"].sort(key=lambda r: (r["name"], r["type"]))
    for doc in d.values():  # notes for people change nothing the reconciler does
        doc.get("metadata", {}).pop("annotations", None)
    # nor does how often observations are published: plan ids stay what they were
    d["policy"]["spec"].pop("record", None)
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


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
        "placement": sorted(placement.items()),
    }
    text = json.dumps(decisions, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
