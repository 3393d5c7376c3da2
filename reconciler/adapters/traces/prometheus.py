"""A load trace read from Prometheus over a past period (``simulate --prometheus``).

The policy's ``spec.load.prometheus.vmCpu`` (each VM's CPU in cores, labelled ``domain`` and,
where the exporter gives it, ``uuid``) is asked over ``[start, end]`` at ``step``, in pages of
at most ``PAGE_POINTS`` points per series (Prometheus refuses more than 11,000), each page a
query bounded by the policy's ``timeout`` and ``maxAnswer``; a month at five minutes is a few
pages. Each VM's series are joined as the load source joins them (by name and UUID, a VM seen
in several series at once counted once). A step a VM has no point for repeats its last figure
(its first, before it); a VM with no point at all is left out, named.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from reconciler.adapters.prometheus.client import PrometheusClient
from reconciler.core import load_series
from reconciler.core.load_range import in_range
from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.errors import ConfigError
from reconciler.model.load import PrometheusSpec
from reconciler.model.snapshot import VmState

PAGE_POINTS = 10_000
"""Points per series in one query, at most (Prometheus's own limit is 11,000)."""


def read_prometheus(
    spec: PrometheusSpec,
    *,
    start: datetime,
    end: datetime,
    step: float,
    vms: Sequence[VmState],
    default_memory: int,
    client: Callable[[PrometheusSpec], PrometheusClient] | None = None,
) -> tuple[Trace, list[str]]:
    """The trace of ``vms`` (as a snapshot saw them: names, UUIDs, sizes) from ``start`` to
    ``end`` every ``step`` seconds, and the VMs Prometheus had nothing of."""
    first, last = start.timestamp(), end.timestamp()
    if last <= first:
        raise ConfigError("the period is empty", hint="give --since, e.g. 7d")
    steps = int((last - first) // step)
    if steps < 1:
        raise ConfigError(
            f"--since covers less than one step of {step:g}s", hint="a longer --since"
        )
    make = client or PrometheusClient
    series: list[load_series.Series] = []
    with make(spec) as prometheus:
        page = 0
        while page < steps:
            upto = min(steps, page + PAGE_POINTS - 1)
            series += prometheus.range_query(
                spec.vm_cpu, start=first + page * step, end=first + upto * step, step=step
            )
            page = upto + 1
    joined = load_series.by_vm(series, vms)
    rows: list[tuple[float, ...]] = []
    kept: list[TraceVm] = []
    missing: list[str] = []
    for vm in vms:
        points = joined.points.get(vm.name)
        if not points:
            missing.append(vm.name)
            continue
        at = {
            round((t - first) / step): v
            for t, v in points
            if math.isfinite(v) and in_range(v, vm.vcpus)
        }
        if not at:
            missing.append(vm.name)
            continue
        value = at[min(at)]
        row = []
        for k in range(steps):
            value = at.get(k, value)
            row.append(value)
        rows.append(tuple(row))
        kept.append(
            TraceVm(
                name=vm.name,
                vcpus=vm.vcpus,
                memory=vm.memory_max or default_memory,
                dirty=float(vm.dirty_rate or 0),
                labels=tuple(sorted(vm.labels.items())),
            )
        )
    return (
        Trace(
            source=f"Prometheus at {spec.url.rstrip('/')}",
            start=datetime.fromtimestamp(first, tz=UTC),
            step=step,
            vms=tuple(kept),
            demand=tuple(rows),
        ),
        missing,
    )
