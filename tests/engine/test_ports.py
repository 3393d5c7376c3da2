"""Every port the engine reaches the world through is declared once, in ``engine/ports.py``.

A port declared beside the code that uses it (or copied by an adapter that cannot import the
engine) is one a reader does not find with the others, and a copy drifts from its original.
The source is read, not imported: a Protocol anywhere in the engine or the adapters is found
wherever it is written.
"""

from __future__ import annotations

import ast
from pathlib import Path

import reconciler
from reconciler.engine import ports

PACKAGE = Path(reconciler.__file__).parent
PORTS = "reconciler.engine.ports"

SEAMS = {
    "reconciler.engine.loop.Sleep": "the loop's wait, a function passed in by tests",
    "reconciler.engine.loop.Leadership": "the loop's view of the engine's own lease keeper",
    "reconciler.adapters.libvirt.dirty_rate.Calls": "an adapter's own view of libvirt calls",
    "reconciler.adapters.power.switches.Driver": "the drivers one adapter (PowerSwitches, the "
    "engine's PowerSwitch) chooses from by the host's power.driver",
}
"""Protocols that are no way to the world: seams inside the engine, or inside one adapter."""


def protocols(package: str) -> set[str]:
    """``module.Class`` of every class of ``package`` (its source) that derives Protocol."""
    found = set()
    for path in sorted((PACKAGE / package).rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).split("[")[0].endswith("Protocol") for base in node.bases
            ):
                found.add(f"{module}.{node.name}")
    return found


def test_every_port_of_the_engine_and_the_adapters_is_in_engine_ports() -> None:
    declared = protocols("engine") | protocols("adapters")
    elsewhere = sorted(p for p in declared if not p.startswith(f"{PORTS}.") and p not in SEAMS)
    assert not elsewhere, (
        f"ports declared outside {PORTS} (move them there, or name them in SEAMS with why they "
        f"are no way to the world): {elsewhere}"
    )


def test_the_ports_module_exports_every_port_it_declares() -> None:
    names = {p.removeprefix(f"{PORTS}.") for p in protocols("engine") if p.startswith(PORTS)}
    assert names <= set(ports.__all__)
    assert {"Worker", "Membership", "HostControl", "RolloutRecords", "LoadReader"} <= names


def test_the_seams_named_are_still_there() -> None:
    assert set(SEAMS) <= protocols("engine") | protocols("adapters")
