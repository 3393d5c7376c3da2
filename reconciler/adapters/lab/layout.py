"""Where the lab's VMs start, and the package data its files are made from."""

from __future__ import annotations

from importlib import resources
from string import Template
from typing import Final

from reconciler.adapters.lab.state import LabVm

_CATALOGUE: Final = (
    ("web-1", 128, 1, {"app": "web"}),
    ("web-2", 128, 1, {"app": "web"}),
    ("web-3", 96, 1, {"app": "web"}),
    ("db-1", 256, 2, {"role": "db"}),
    ("db-2", 256, 2, {"role": "db"}),
    ("app-1", 192, 2, {"tier": "app"}),
    ("cache-1", 64, 1, {"tier": "cache"}),
    ("erp", 160, 1, {"tier": "erp"}),
)

ASSETS: Final = "assets"
"""The lab's package data, next to this module: every file the lab reads comes from here."""


def host_names(count: int) -> list[str]:
    """``kvm-01``, ``kvm-02``, ... for ``count`` hosts."""
    return [f"kvm-{i:02d}" for i in range(1, count + 1)]


def rack(index: int) -> str:
    return f"r{index % 3 + 1}"


def lab_layout(hosts: int, vms: int) -> list[LabVm]:
    """The lab's VMs and where each starts: unevenly, most of them on the first host.

    The first eight are web-1..3 (``app=web``), db-1 and db-2 (``role=db``, on different
    hosts), app-1, cache-1 (together) and erp (on the last host); then vm-09, vm-10, ...
    with every third one on another host. Memory 64-256 MiB, 1-2 vCPUs.
    """
    if hosts < 1 or vms < 0:
        raise ValueError("a lab needs at least one host and zero or more VMs")
    names = host_names(hosts)
    first, last = names[0], names[-1]
    out: list[LabVm] = []
    for index in range(vms):
        if index < len(_CATALOGUE):
            name, memory, vcpus, labels = _CATALOGUE[index]
            host = first
            if name == "db-2" and hosts > 1:
                host = names[1]
            elif name == "erp":
                host = last
            out.append(LabVm(name, host, memory, vcpus, dict(labels)))
            continue
        number = index + 1
        host = first
        if number % 3 == 0 and hosts > 1:
            host = names[1 + (number // 3) % (hosts - 1)]
        memory = 64 + (number * 32) % 224
        out.append(LabVm(f"vm-{number:02d}", host, memory, 1 + number % 2, {"app": "batch"}))
    return out


def asset_text(*parts: str) -> str:
    """The text of the package-data file ``assets/<parts...>``."""
    return (
        resources.files("reconciler.adapters.lab")
        .joinpath(ASSETS, *parts)
        .read_text(encoding="utf-8")
    )


def asset_bytes(*parts: str) -> bytes:
    """The bytes of the package-data file ``assets/<parts...>``."""
    return resources.files("reconciler.adapters.lab").joinpath(ASSETS, *parts).read_bytes()


def template(name: str) -> Template:
    return Template(asset_text(name))


def indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())
