"""The power plan in a proposal: a "Power" section of the pull-request body, lines of the
commit message, and the key that says whether an open proposal already shows it.

What power saving would do this round (``core.power.power_next`` in ``mode: propose``): the
hosts to empty, to power off and to power on, each with why, the demand it decided on, and
the energy a power-off saves per day where the host's idle draw is known (``idleWatts``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from reconciler.core.power import HostFacts, PowerNext

ACTIONS = (("empty", "empty"), ("power_off", "power off"), ("power_on", "power on"))


def _rows(decided: PowerNext) -> list[tuple[str, str]]:
    """(action, host) of every step of the plan, in the order they come."""
    out: list[tuple[str, str]] = []
    for attr, name in ACTIONS:
        out += [(name, host) for host in getattr(decided, attr)]
    return out


def has_plan(decided: PowerNext | None) -> bool:
    return decided is not None and bool(_rows(decided))


def power_key(decided: PowerNext) -> str:
    """What identifies the plan (its steps, not the figures that change every round)."""
    text = ";".join(f"{a}:{h}" for a, h in _rows(decided))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _saved(watts: float | None) -> str:
    return "unknown (no idleWatts)" if watts is None else f"{watts * 24 / 1000:.1f} kWh"


def commit_lines(decided: PowerNext) -> list[str]:
    """``- power off kvm-07: why`` per step."""
    return [f"- {a} {h}: {decided.why.get(h, '')}" for a, h in _rows(decided)]


def power_section(decided: PowerNext, facts: Mapping[str, HostFacts]) -> str:
    """The "Power" section of the pull-request body."""
    lines = [
        "### Power",
        "",
        "Power saving is in `mode: propose`: this is what it would do now; nothing is switched "
        "or emptied until `power.mode` is `apply`. Demand of the hosts in service: "
        f"{100 * decided.demand:.0f}% of their CPUs.",
        "",
        "| host | action | energy saved per day | why |",
        "|---|---|---|---|",
    ]
    total = 0.0
    known = True
    for action, host in _rows(decided):
        watts = facts.get(host, HostFacts()).idle_watts
        saving = action != "power on"
        if saving:
            if watts is None:
                known = False
            else:
                total += watts * 24 / 1000
        cell = _saved(watts) if saving else "-"
        why = decided.why.get(host, "").replace("|", "\\|")
        lines.append(f"| `{host}` | {action} | {cell} | {why} |")
    if total and known:
        lines += ["", f"Energy saved per day once powered off: about {total:.1f} kWh (idle draw)."]
    elif total:
        lines += [
            "",
            f"Energy saved per day, of the hosts whose idleWatts is known: {total:.1f} kWh.",
        ]
    return "\n".join(lines)
