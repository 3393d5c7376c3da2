"""The CPU samples ``run`` keeps between rounds: a bounded window per VM.

Pure: the store goes in, the store with a new sample comes out, time passed in as seconds since
the epoch. A VM's readings follow it by name across hosts (the rate is not taken across a move,
see :mod:`reconciler.core.load_window`); another domain with the same name (a new UUID) starts
a new series. What is older than the window, plus room for the reading before it, is dropped,
and so is a VM no longer sampled within it; at most ``MAX_SAMPLES`` + ``MAX_GAP_SAMPLES``
readings stay per VM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.core import load_history
from reconciler.core.load_view import MAX_GAP_SAMPLES, max_gap
from reconciler.core.load_window import Reading
from reconciler.model.load import MAX_SAMPLES, LoadSamples, LoadSpec, Statistic, VmSamples
from reconciler.model.quantity import format_duration


@dataclass(frozen=True, slots=True)
class HostSample:
    """One host's CPU reading of its running VMs, or why it gave none."""

    host: str
    at: float
    """When the host answered, seconds since the epoch."""
    vms: Sequence[tuple[str, str, int, int]] = field(default_factory=tuple)
    """(VM name, UUID, libvirt's domain ID, cumulative CPU time in ns) of each running VM."""
    error: str | None = None


def keep_seconds(spec: LoadSpec) -> float:
    """How far back readings are kept: the window and the longest gap before it; with
    ``statistic: forecast`` at least a bucket of the history and the gap before it, so that
    each bucket is folded whole (:mod:`reconciler.core.load_history`)."""
    if spec.statistic is Statistic.FORECAST:
        return load_history.keep_seconds(spec)
    return spec.window.total_seconds() + max_gap(spec)


def added(
    store: LoadSamples | None,
    cluster: str,
    spec: LoadSpec,
    samples: Sequence[HostSample],
    taken: float,
) -> LoadSamples:
    """``store`` with ``samples`` (taken at ``taken``) added and what is too old dropped."""
    vms: dict[str, VmSamples] = dict(store.vms) if store is not None else {}
    # built without validation (model_construct): every value here is made by this function
    # or was validated when read; at 1,000 VMs validating again would cost half a second
    for sample in samples:
        if sample.error is not None:
            continue
        for name, uuid, domain_id, cpu_ns in sample.vms:
            old = vms.get(name)
            reading = (sample.at, int(cpu_ns), sample.host, domain_id)
            if old is None or old.uuid != uuid:
                vms[name] = VmSamples.model_construct(uuid=uuid, readings=[reading])
            elif old.readings[-1][0] < sample.at:  # not a repeat, nor a clock gone back
                vms[name] = VmSamples.model_construct(uuid=uuid, readings=[*old.readings, reading])
    horizon = taken - keep_seconds(spec)
    cap = MAX_SAMPLES + MAX_GAP_SAMPLES
    kept: dict[str, VmSamples] = {}
    for name in sorted(vms):
        series = vms[name]
        readings = series.readings
        if readings[0][0] < horizon or len(readings) > cap:
            readings = [r for r in readings if r[0] >= horizon][-cap:]
            if not readings:
                continue
            series = VmSamples.model_construct(uuid=series.uuid, readings=readings)
        kept[name] = series
    last = taken if store is None or store.last is None else max(store.last, taken)
    every = spec.sample_every.total_seconds()
    return LoadSamples.model_construct(cluster=cluster, every=every, last=last, vms=kept)


def readings(store: LoadSamples) -> dict[str, list[Reading]]:
    """VM name -> its readings, for :func:`reconciler.core.load_view.from_readings`."""
    return {
        name: [Reading(at, cpu, host, series.uuid, d) for at, cpu, host, d in series.readings]
        for name, series in store.vms.items()
    }


def stale(store: LoadSamples | None, spec: LoadSpec, now: datetime, where: str) -> str | None:
    """Why ``store`` is not a window ``plan`` or ``apply`` may use at ``now``, else None.

    Fresh means ``run`` sampled within the longest gap a rate bridges, so the window ends now.
    """
    if store is None or store.last is None:
        return f"run keeps no samples in {where}"
    age = now.timestamp() - store.last
    if age > max_gap(spec):
        ago = format_duration(timedelta(seconds=round(age)))
        return f"run's last sample in {where} is {ago} old"
    if age < -max_gap(spec):
        return f"run's last sample in {where} is dated in the future"
    return None
