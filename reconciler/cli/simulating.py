"""What ``simulate`` runs once its request (``SimulateRequest``) is parsed: the trace read,
the cluster made (a what-if shape, or PATH's hosts as a snapshot saw them), every policy
replayed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.errors import ConfigError
from reconciler.model.desired import DesiredState
from reconciler.model.simulation import HostKind, SimulationReport

if TYPE_CHECKING:
    from reconciler.core.simulation.trace import Trace
    from reconciler.model.snapshot import Snapshot


@dataclass(frozen=True)
class SimulateRequest:
    path: Path | None
    trace: Path | None
    prometheus: str | None
    """--prometheus: "" for the policy's own server, else another URL."""
    recorded: bool
    since: timedelta | None
    step: timedelta | None
    policies: tuple[Path, ...]
    repo: str | None
    branch: str
    cache_dir: Path | None
    base: str | None
    head: str | None
    hosts: str | None
    kinds: Path | None
    snapshot: Path | None
    period: timedelta | None
    literature: bool
    format: str
    chart: Path | None
    rollouts: tuple[Path, ...] = ()
    """--rollout FILE: rollouts not merged yet, played with the cluster folder's own."""
    rollout_step: timedelta = timedelta(minutes=10)
    """--rollout-step: what a rollout's step that runs a command takes."""


TRACE_HELP = (
    "a folder in the PlanetLab format (one file per VM, a CPU percentage per line per 300 s) "
    "or a CSV of time,vm,cpu[,memory,dirty] (cpu in cores)"
)
CHART_HELP = "write the chart (spread, hot hosts, migrations per round) here, as SVG"

GIB = 1024**3
DEFAULT_MEMORY = GIB
"""A trace VM whose memory nothing gives (no snapshot, no memory column): 1 GiB."""


def _kinds(path: Path | None) -> dict[str, HostKind]:
    if path is None:
        return {}
    from reconciler.config.variants import load_host_kinds

    return {k.name: k for k in load_host_kinds(path).kinds}


def _trace(path: Path, snapshot: Snapshot | None) -> Trace:
    from reconciler.adapters.traces import read_csv, read_planetlab
    from reconciler.core.simulation.trace import TraceVm

    vcpus: dict[str, int] = {v.name: v.vcpus for v in snapshot.vms} if snapshot is not None else {}
    if path.is_dir():
        return read_planetlab(
            path,
            lambda i, name: TraceVm(name=name, vcpus=vcpus.get(name, 1), memory=DEFAULT_MEMORY),
            lambda i: 1.0,
        )
    if not path.is_file():
        raise ConfigError(
            f"{path}: no such trace", hint="give a PlanetLab folder or a CSV of time,vm,cpu"
        )
    return read_csv(path, default_memory=DEFAULT_MEMORY, vcpus=lambda n: vcpus.get(n, 1))


def _from_prometheus(request: SimulateRequest, desired: DesiredState, snapshot: Snapshot) -> Trace:
    """The load Prometheus recorded of the snapshot's VMs over ``--since``, ending now."""
    import logging
    from datetime import UTC, datetime

    from reconciler.adapters.traces.prometheus import read_prometheus

    spec = desired.policy.spec.load.prometheus
    if request.prometheus:
        spec = spec.model_copy(update={"url": request.prometheus})
    if request.since is None:
        raise ConfigError("a period to replay", hint="give --since, e.g. 7d")
    end = datetime.now(UTC)
    step = (request.step or timedelta(minutes=5)).total_seconds()
    trace, missing = read_prometheus(
        spec,
        start=end - request.since,
        end=end,
        step=step,
        vms=snapshot.vms,
        default_memory=DEFAULT_MEMORY,
    )
    if missing:
        logging.getLogger(__name__).warning(
            "Prometheus has no load of %d VM(s), left out: %s",
            len(missing),
            ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""),
        )
    return trace


def simulate(
    request: SimulateRequest,
    policies: Sequence[tuple[str, DesiredState]],
    observed: Snapshot | None = None,
    *,
    recorded: Sequence[Snapshot] | None = None,
) -> SimulationReport:
    """Every policy of ``policies`` on the request's load and cluster; ``observed``: the
    cluster as observed, when the caller has it already (else ``--snapshot``)."""
    from reconciler.core.simulation import setup

    snapshot = observed
    if snapshot is None and request.snapshot is not None:
        from reconciler.adapters.files.snapshot import load_snapshot

        snapshot = load_snapshot(request.snapshot)
    first = policies[0][1]
    if recorded:
        from datetime import UTC, datetime

        from reconciler.core.simulation.trace import trace_of_snapshots

        assert request.since is not None
        end = datetime.now(UTC)
        step = (request.step or first.policy.spec.record.every).total_seconds()
        snapshot = snapshot or max(recorded, key=lambda s: s.taken_at)
        trace = trace_of_snapshots(
            recorded, start=end - request.since, end=end, step=step, source="recorded snapshots"
        )
    elif request.trace is not None:
        trace = _trace(request.trace, snapshot)
        if request.step is not None:
            from reconciler.core.simulation.trace import resampled

            try:
                trace = resampled(trace, request.step.total_seconds())
            except ValueError as err:
                raise ConfigError(f"--step: {err}", hint="e.g. --step 10m for 5m figures") from None
    else:
        if snapshot is None:
            raise ConfigError(
                "--prometheus replays the VMs of an observed cluster",
                hint="give --snapshot FILE (observe --format json > FILE)",
            )
        trace = _from_prometheus(request, first, snapshot)
    trace, where = setup.sized(trace, snapshot)
    if request.period is not None:
        from dataclasses import replace

        steps = max(1, int(request.period.total_seconds() // trace.step))
        trace = replace(trace, demand=tuple(row[:steps] for row in trace.demand))
    if trace.steps == 0:
        raise ConfigError(f"{trace.source}: no step of load in it", hint="a longer trace")
    if request.hosts is not None:
        try:
            shape = setup.shape_of(request.hosts, _kinds(request.kinds))
        except ValueError as err:
            raise ConfigError(
                f"--hosts {request.hosts}: {err}", hint="e.g. 400xG4,400xG5"
            ) from None
        shaped = [(name, setup.shaped(d, shape)) for name, d in policies]
        kinds = shaped[0][1][1]
        runs = [(name, d) for name, (d, _) in shaped]
        where = {}
    else:
        if snapshot is None:
            raise ConfigError(
                "the cluster's hosts need their CPUs and memory",
                hint="give --snapshot FILE (reconciler observe --format json > FILE), or a "
                "what-if cluster with --hosts 10xG5",
            )
        try:
            kinds = setup.observed_kinds(first, snapshot)
        except ValueError as err:
            raise ConfigError(f"{request.snapshot}: {err}", hint="observe again") from None
        runs = list(policies)
    try:
        return setup.simulated(
            first.cluster.metadata.name,
            runs,
            trace,
            kinds,
            where=where,
            realistic=not request.literature,
            rollout_step=request.rollout_step.total_seconds(),
        )
    except ValueError as err:
        raise ConfigError(str(err), hint="give more or larger hosts (--hosts)") from None


def write_text(path: Path, text: str) -> None:
    from reconciler.adapters.files.atomic import write_atomically

    write_atomically(path, text.encode(), mode=0o644)
