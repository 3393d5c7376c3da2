"""Observe a cluster through libvirt: every host and VM into one ``Snapshot``.

Settings come from the Cluster (``spec.observe``, ``spec.sharedStorage``); explicit arguments
override them. Large clusters are split over a few processes (one per core, round-robin), each
observing its share with a small thread pool (``libvirt_observe_pool``); small ones stay in
this process. Per host the calls are few and bulk, and each has its own deadline that covers
only the wait for the host's answer (``libvirt_observe_host``).

In the snapshot a host that failed is ``reachable: false`` with the error text, never an empty
host. What needs every host (VMs seen on two hosts, CPU models that differ) is decided here.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from reconciler.adapters.libvirt.compatibility import Candidate, Compatibility, HostAnswers
from reconciler.adapters.libvirt.connection import (
    ConnectionSettings,
    close_connection,
    open_connection,
)
from reconciler.adapters.libvirt.domain_xml import passthrough_blocker
from reconciler.adapters.libvirt.observe_host import (
    STATIC_FACTS,
    KnownHost,
    ProbeSettings,
    RawHost,
)
from reconciler.adapters.libvirt.observe_pool import observe_hosts
from reconciler.adapters.libvirt.observe_result import HostResult, host_result
from reconciler.errors import ConfigError
from reconciler.model.cluster import Cluster
from reconciler.model.snapshot import (
    InFlight,
    MigrationClass,
    Snapshot,
    Unmigratable,
    UnmigratableReason,
    VmRunState,
    VmState,
)

_LIVE: Final = frozenset({VmRunState.RUNNING, VmRunState.BLOCKED, VmRunState.PAUSED})

THREADS_PER_CORE: Final = 4
"""Default concurrency per CPU core: enough to hide network latency, few enough for the GIL."""
HOSTS_PER_PROCESS: Final = 100
"""A cluster is split over more processes only when each gets at least this many hosts."""


@dataclass(frozen=True)
class ObserveSettings:
    """The observer's settings after the Cluster's ``spec.observe`` and explicit overrides."""

    connect_timeout: float
    call_timeout: float
    sample_interval: float
    shared_paths: tuple[str, ...]
    concurrency: int | None


def observe_settings(
    cluster: Cluster,
    *,
    connect_timeout: float | None = None,
    call_timeout: float | None = None,
    sample_interval: float | None = None,
    shared_paths: Sequence[str] = (),
    concurrency: int | None = None,
) -> ObserveSettings:
    """``cluster.spec.observe`` with every argument that is not None in its place.

    ``shared_paths`` adds to ``spec.sharedStorage`` (a prefix given on the command line is
    shared storage too, it does not make the Cluster's ones local).
    """
    spec = cluster.spec.observe
    out = ObserveSettings(
        connect_timeout=(
            spec.connect_timeout.total_seconds() if connect_timeout is None else connect_timeout
        ),
        call_timeout=spec.call_timeout.total_seconds() if call_timeout is None else call_timeout,
        sample_interval=(
            spec.sample_interval.total_seconds() if sample_interval is None else sample_interval
        ),
        shared_paths=tuple(dict.fromkeys([*cluster.spec.shared_storage, *shared_paths])),
        concurrency=spec.concurrency if concurrency is None else concurrency,
    )
    for name, value in (
        ("connect timeout", out.connect_timeout),
        ("call timeout", out.call_timeout),
    ):
        if not value > 0:
            raise ConfigError(f"the {name} must be more than 0 seconds, not {value:g}")
    if not out.sample_interval >= 0:
        raise ConfigError(f"the sample interval cannot be negative ({out.sample_interval:g})")
    if out.concurrency is not None and out.concurrency < 1:
        raise ConfigError(f"the concurrency must be at least 1, not {out.concurrency}")
    return out


def observe_cluster(
    cluster: Cluster,
    *,
    connect_timeout: float | None = None,
    call_timeout: float | None = None,
    sample_interval: float | None = None,
    shared_paths: Sequence[str] = (),
    concurrency: int | None = None,
    processes: int | None = None,
    now: datetime | None = None,
    borrow: Callable[[str], Any] | None = None,
    compatibility: bool = True,
    cpu_samples: bool = True,
    known: Mapping[str, KnownHost] | None = None,
) -> Snapshot:
    """A snapshot of every host and VM of ``cluster``.

    Settings come from ``cluster.spec.observe`` and ``cluster.spec.sharedStorage``; an
    argument that is not None overrides its setting (seconds; ``shared_paths`` adds prefixes).
    ``connect_timeout`` bounds opening a connection, ``call_timeout`` every later call, each
    counted while waiting for the host's answer only; a host past one is reported unreachable
    with a timeout error. ``concurrency`` is the number of hosts observed at once, ``processes``
    how many processes share them (default: one per core it may run on, for large clusters).
    ``now`` is the snapshot's ``takenAt`` (default: the current time). ``borrow`` (host name
    -> open connection, a ``ConnectionPool``'s ``get``) observes over the command's open
    connections instead of opening and closing one per host; worker processes of a large
    cluster cannot share them and open their own. ``compatibility`` asks each host which VMs
    of the others it would refuse (``compatibility``), over the connection it is observed on;
    what it could not be asked then (a kind of VM observed after it) over the command's
    connections, else over one of its own per host, opened only for that. Without
    ``cpu_samples`` each host is looked at once, without asking for any CPU figure (those of
    the host and its VMs stay unknown) and without starting dirty rate calculations: for a
    look no decision reads CPU from, about a third of the time of one with them. A host of
    ``known`` (by name: what an earlier look found of it that lasts, ``known_hosts``) is not
    asked those facts again; a cluster observed by worker processes asks them all.
    """
    s = observe_settings(
        cluster,
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        sample_interval=sample_interval,
        shared_paths=shared_paths,
        concurrency=concurrency,
    )
    taken_at = now or datetime.now(UTC)
    hosts = [(h.name, h.uri) for h in cluster.spec.hosts]
    cores = _usable_cores()
    if processes is None:
        processes = min(cores, len(hosts) // HOSTS_PER_PROCESS)
    processes = max(1, min(processes, len(hosts)))
    total = s.concurrency or THREADS_PER_CORE * cores
    threads = max(1, math.ceil(total / processes))
    probe = ProbeSettings(
        connect_timeout=s.connect_timeout,
        call_timeout=s.call_timeout,
        sample_interval=s.sample_interval,
        shared_paths=s.shared_paths,
        compatibility=compatibility,
        cpu_samples=cpu_samples,
    )
    answers: dict[str, HostAnswers] = {}

    def take(raw: RawHost) -> HostResult:
        if raw[8] is not None:
            answers[raw[0]] = raw[8]
        return host_result(raw)

    with _without_cyclic_gc():
        if processes == 1:
            results = _taken(observe_hosts(hosts, probe, threads, borrow, known), take)
        else:
            results = _fan_out(hosts, probe, threads, processes, take)
        refused = _refusals(cluster, results, s, borrow, answers) if compatibility else {}
        return _snapshot(cluster.metadata.name, results, taken_at, refused)


def known_hosts(snapshot: Snapshot) -> dict[str, KnownHost]:
    """What ``snapshot`` found of each reachable host that lasts while it runs (``known``)."""
    return {
        h.name: KnownHost(
            facts=tuple((name, getattr(h, name)) for name in STATIC_FACTS),
            hugepage_sizes=tuple(sorted(h.hugepages_free or ())),
        )
        for h in snapshot.hosts
        if h.reachable
    }


def _refusals(
    cluster: Cluster,
    results: list[HostResult],
    s: ObserveSettings,
    borrow: Callable[[str], Any] | None,
    answers: dict[str, HostAnswers],
) -> dict[tuple[str, str], dict[str, str]]:
    """What each reachable host would refuse of the VMs on the others (``compatibility``):
    what it answered while observed, the rest asked over the command's connections, else
    over connections of its own closed afterwards."""
    up = [h.name for h, _ in results if h.reachable]
    if len(up) < 2:
        return {}
    candidates = [
        Candidate(vm.host, vm.uuid, needs, running=vm.state in _LIVE)
        for _, vms in results
        for vm, _mode, needs in vms
        if needs is not None and vm.migration_class is not MigrationClass.IMMOVABLE
    ]
    uris = {h.name: h.uri for h in cluster.spec.hosts}
    opened: dict[str, Any] = {}

    def call(host: str, fn: Callable[[Any], Any]) -> Any:
        if borrow is not None:
            return fn(borrow(host))
        if host not in opened:
            opened[host] = open_connection(
                uris[host], ConnectionSettings(connect_timeout=s.connect_timeout)
            )
        return fn(opened[host])

    compat = Compatibility(call, s.call_timeout, answers)
    try:
        return compat.refusals(candidates, up)
    finally:
        compat.close()
        for conn in opened.values():
            close_connection(conn)


def _usable_cores() -> int:
    """The CPUs this process may run on (taskset, a container's cpuset), else all of them.

    A second worker process on a core this one may not leave only time-shares it.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity outside Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Observing allocates many short-lived objects without cycles (trees, models), freed by
    reference counting; the cyclic collector would only rescan them (a few percent of the
    time at 1,000 hosts). It runs again afterwards if it ran before."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _taken(raw: list[RawHost], take: Callable[[RawHost], HostResult]) -> list[HostResult]:
    """``take`` of each host in turn, each host's plain values dropped once its models are
    built: the peak holds the models and one host's values, not all of both."""
    out = []
    for i, r in enumerate(raw):
        raw[i] = None  # type: ignore[call-overload]
        out.append(take(r))
    return out


def _fan_out(
    hosts: list[tuple[str, str]],
    probe: ProbeSettings,
    threads: int,
    processes: int,
    take: Callable[[RawHost], HostResult],
) -> list[HostResult]:
    """Observe ``hosts`` round-robin over ``processes`` processes, this one included, and
    ``take`` each host's plain values, in the order of ``hosts``.

    The others are fresh interpreters (``python -m``), not forks: this process may hold
    threads stuck in libvirt, and a fork would inherit their locks. Each sends its hosts
    one at a time (``observe_pool.child_main``), read here one at a time.
    """
    import pickle  # a large cluster's only: small ones never pay the import
    import subprocess

    shares = [hosts[k::processes] for k in range(processes)]
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, *sys.path])}
    children = [
        subprocess.Popen(
            # -P: not the working directory first on sys.path, where ``-m`` would put it: the
            # worker imports this very package, from PYTHONPATH, whatever the directory holds
            [sys.executable, "-P", "-m", "reconciler.adapters.libvirt.observe_pool"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        for _ in shares[1:]
    ]
    for child, share in zip(children, shares[1:], strict=True):
        assert child.stdin is not None
        # the share is small (names and URIs); the child reads it whole before it starts
        child.stdin.write(pickle.dumps((share, probe, threads), pickle.HIGHEST_PROTOCOL))
        child.stdin.close()
    parts: list[list[HostResult]] = []
    try:
        parts.append(_taken(observe_hosts(shares[0], probe, threads), take))
        for child, share in zip(children, shares[1:], strict=True):
            assert child.stdout is not None
            part: list[HostResult] = []
            failed: Exception | None = None
            with child.stdout:
                for name, uri in share:
                    if failed is None:
                        try:
                            raw = pickle.load(child.stdout)  # written by our own child process
                        except Exception as err:
                            failed = err
                    if failed is not None:
                        raw = _lost(name, uri, child.wait(), failed)
                    part.append(take(raw))
            child.wait()
            parts.append(part)
    finally:
        for child in children:  # only after an error here: each ends on its own otherwise
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
    results: list[HostResult] = [None] * len(hosts)  # type: ignore[list-item]
    for k, part in enumerate(parts):
        results[k::processes] = part
    return results


def _lost(name: str, uri: str, exitcode: int | None, err: Exception) -> RawHost:
    error = f"the observer process for this host ended without a result (exit {exitcode}): {err!r}"
    return name, uri, None, None, error, 0, 0.0, [], None


def _snapshot(
    cluster: str,
    results: list[HostResult],
    taken_at: datetime,
    refused: dict[tuple[str, str], dict[str, str]] | None = None,
) -> Snapshot:
    hosts = [host for host, _ in results]
    models = {h.cpu_model for h in hosts if h.reachable and h.cpu_model}
    cpu_models_differ = len(models) > 1
    # In (name, host) order, the order the planner indexes VMs in: it then finds them sorted,
    # and a snapshot file read back lays them out in memory in the order its passes go (at
    # 125,000 VMs whose names do not follow their hosts, 7-20% of a plan). A VM that moves
    # keeps its place in the list, so recorded observations differ by its fields alone.
    raw = sorted(
        ((vm, mode) for _, vms in results for vm, mode, _ in vms),
        key=lambda seen: (seen[0].name, seen[0].host),
    )
    seen: dict[str, list[str]] = {}
    for vm, _mode in raw:
        seen.setdefault(vm.uuid, []).append(vm.host)
    in_flight = [
        InFlight(
            name=next(vm.name for vm, _ in raw if vm.uuid == uuid), uuid=uuid, hosts=sorted(on)
        )
        for uuid, on in seen.items()
        if len(on) > 1
    ]
    flying = {f.uuid for f in in_flight}
    vms: list[VmState] = []
    for seen_vm, mode in raw:
        vm = seen_vm
        refusals = (refused or {}).get((vm.uuid, vm.host))
        if refusals:
            vm = vm.model_copy(update={"refused_by": refusals})
        extra: list[Unmigratable] = []
        if vm.uuid in flying:
            extra.append(
                Unmigratable(
                    code=UnmigratableReason.IN_FLIGHT,
                    detail="seen on more than one host (migrating)",
                )
            )
        if cpu_models_differ and mode is not None:
            extra.append(passthrough_blocker(mode))
        if extra:
            blockers = [*vm.unmigratable, *extra]
            update: dict[str, object] = {"migratable": False, "unmigratable": blockers}
            if cpu_models_differ and mode is not None:
                passthrough = passthrough_blocker(mode).detail
                update["migration_class"] = MigrationClass.IMMOVABLE
                immovable = vm.migration_class is MigrationClass.IMMOVABLE
                reasons = vm.migration_reasons if immovable else []
                update["migration_reasons"] = [*reasons, passthrough]
            vm = vm.model_copy(update=update)
        vms.append(vm)
    return Snapshot(cluster=cluster, taken_at=taken_at, hosts=hosts, vms=vms, in_flight=in_flight)
