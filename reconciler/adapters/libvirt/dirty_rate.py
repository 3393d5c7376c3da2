"""How fast each running VM writes its memory, as libvirt measures it (libvirt 7.2+, QEMU 5.2+).

``virDomainStartDirtyRateCalc`` starts a calculation of ``PERIOD`` seconds inside QEMU (page
sampling: a few hundred pages per GiB hashed twice, cheap for the guest); its result stays in
QEMU until the next one and comes with ``getAllDomainStats`` under ``VIR_DOMAIN_STATS_DIRTYRATE``
(``dirtyrate.calc_status``, ``dirtyrate.megabytes_per_second``). The observer (``observe_host``)
asks for these fields with the stats it takes anyway, starts a calculation for every running VM
in its first sweep, for all of them at once, and reads the results in its second sweep, which
then comes ``WAIT`` seconds after the first at the earliest. Where a calculation cannot be
started (an older libvirt or QEMU, libvirt's test driver) the VM's dirty rate is whatever an
earlier calculation left, else unknown; nothing else of the host is affected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

import libvirt

from reconciler.errors import HostUnreachable

T = TypeVar("T")


class Calls(Protocol):
    """What starting calculations needs of a host's observation (``observe_host.Probe``): its
    timed call, libvirt's errors mapped to ours."""

    def call(
        self, name: str, fn: Callable[..., T], *args: Any, limit: float | None = None
    ) -> T: ...


STATS: Final = libvirt.VIR_DOMAIN_STATS_DIRTYRATE
PERIOD: Final = 1
"""Seconds one calculation measures (libvirt's least)."""
WAIT: Final = PERIOD + 0.25
"""Seconds from the first sweep to the second when calculations were started."""
MIB: Final = 1024**2
_MEASURED: Final = 2  # virDomainDirtyRateStatus: VIR_DOMAIN_DIRTYRATE_MEASURED
_MEASURING: Final = 1
_UNSUPPORTED: Final = frozenset({libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_ERR_OPERATION_UNSUPPORTED})


def reading(stats: Mapping[str, Any]) -> int | None:
    """Bytes per second of the last finished calculation in ``stats``, else None."""
    if stats.get("dirtyrate.calc_status") != _MEASURED:
        return None
    rate = stats.get("dirtyrate.megabytes_per_second")  # libvirt's "megabytes" are MiB
    if isinstance(rate, int) and not isinstance(rate, bool) and rate >= 0:
        return rate * MIB
    return None


def start(probe: Calls, records: list[tuple[Any, dict[str, Any]]]) -> bool:
    """Start a calculation for every running VM of ``records`` not measuring already, each
    through ``probe.call`` (so under the host's call timeout); whether any started. The first
    refusal for want of support ends the attempt on this host; a VM gone meanwhile is passed."""
    started = False
    for dom, stats in records:
        if stats.get("state.state") != libvirt.VIR_DOMAIN_RUNNING:
            continue
        if stats.get("dirtyrate.calc_status") == _MEASURING:
            continue
        try:
            probe.call("startDirtyRateCalc", dom.startDirtyRateCalc, PERIOD, 0)
        except HostUnreachable as err:
            cause = err.__cause__
            if isinstance(cause, libvirt.libvirtError) and cause.get_error_code() in _UNSUPPORTED:
                return started
            continue
        started = True
    return started
