"""A CPU figure out of range is no measurement: it is unknown, named, and decides nothing.

A VM's CPU figure (its load over the window, or the observation's own short sample, in cores)
is out of range when it is not a number, infinite, below zero, or above what the VM can use:
``vcpus * PER_VCPU + OVER_CORES``. A domain's CPU time counts QEMU's own threads besides its
vCPUs (vhost queues, I/O threads, emulation), so a VM busy with I/O is really seen using more
cores than it has vCPUs, up to about as many again, and a rate over a few seconds jitters; a
million cores for a 1-vCPU VM is a broken exporter, a counter that leapt or an edited file,
and taken as real it would move every other VM away, or overflow the spread.

The same rule holds for every source: ``run``'s samples, Prometheus, a snapshot file.
"""

from __future__ import annotations

import math
from typing import Final

PER_VCPU: Final = 2.0
"""Cores a VM may be seen using per vCPU: the vCPU and as much again of QEMU's threads..."""
OVER_CORES: Final = 2.0
"""...plus this many cores, and still be real."""


def ceiling(vcpus: int) -> float:
    """The most cores a VM of ``vcpus`` vCPUs can be seen using."""
    return vcpus * PER_VCPU + OVER_CORES


def in_range(cores: float, vcpus: int) -> bool:
    """Whether ``cores`` can be what a VM of ``vcpus`` vCPUs used (False for NaN)."""
    return 0.0 <= cores <= vcpus * PER_VCPU + OVER_CORES


def pressure_in_range(points: float) -> bool:
    """Whether a host's pressure, in utilisation points, is a share of time (0 to 100)."""
    return 0.0 <= points <= 100.0


def why(cores: float, vcpus: int, what: str) -> str:
    """Why ``cores`` (``what``: over the window, in the short sample) is out of range."""
    if math.isnan(cores):
        return f"not a number {what}"
    if math.isinf(cores):
        return f"{'minus ' if cores < 0 else ''}infinite {what}"
    if cores < 0:
        return f"{cores:.4g} cores {what}, below zero"
    plural = "" if vcpus == 1 else "s"
    return (
        f"{cores:.4g} cores {what}, more than {vcpus} vCPU{plural} can use, "
        f"{ceiling(vcpus):g} at most"
    )
