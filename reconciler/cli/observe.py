"""``reconciler observe``: every host and VM as libvirt reports them."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from reconciler.adapters.files import snapshot as snapshot_file
from reconciler.cli import load, requests
from reconciler.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subparsers,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_state_dir_argument,
    non_negative_float,
    observe_live,
)
from reconciler.cli.desired import open_source
from reconciler.model.desired import DesiredState
from reconciler.model.power import PowerBook
from reconciler.model.snapshot import Snapshot
from reconciler.report.observe_table import observe_table


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "observe",
        help="show what libvirt reports of every host and VM",
        description="Connect to every host of a cluster folder at once and show hosts and VMs. "
        "Exit 0 when every host answered, 1 when one did not (it is still shown). Timeouts and "
        "shared storage come from the Cluster (spec.observe, spec.sharedStorage); flags "
        "override them for one run.",
    )
    add_path_argument(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_observe_overrides(p)
    p.add_argument(
        "--sample-interval",
        type=non_negative_float,
        metavar="SECONDS",
        help="time between the two CPU samples (override spec.observe.sampleInterval)",
    )
    add_repo_arguments(p)
    add_state_dir_argument(p)
    p.set_defaults(handler=run)


@dataclass(frozen=True)
class ObserveRequest:
    """What ``observe`` was asked: where the cluster is, the overrides, the output format."""

    source: requests.SourceRequest
    observe: requests.ObserveOverrides
    format: str
    state_dir: Path | None = None
    """Where run keeps its load samples (the window shown beside the short sample)."""


def request(args: argparse.Namespace) -> ObserveRequest:
    return ObserveRequest(
        source=requests.source_of(args),
        observe=requests.observe_of(args, sample_interval=True),
        format=args.format,
        state_dir=args.state_dir,
    )


def run(args: argparse.Namespace) -> int:
    return observe(request(args))


def observe(request: ObserveRequest) -> int:
    desired = open_source(request.source).load().desired
    snapshot = observe_live(desired.cluster, **request.observe.overrides())
    snapshot = load.windowed(snapshot, desired, request.state_dir, load.Reading.LOOK)
    snapshot, asleep = with_power_saving(desired, snapshot, request.state_dir)
    if request.format == "json":
        sys.stdout.write(snapshot_file.snapshot_json(snapshot))
    else:
        sys.stdout.write(observe_table(snapshot))
        if snapshot.power_saving:
            lines = [f"  {h}: {what}" for h, what in sorted(snapshot.power_saving.items())]
            sys.stdout.write("\npower saving (docs/power.md):\n" + "\n".join(lines) + "\n")
    down = [h for h in snapshot.hosts if not h.reachable]
    for host in down:
        if host.name in asleep:  # off on purpose: known, not a failure
            print(f"host {host.name}: {snapshot.power_saving[host.name]}", file=sys.stderr)
        else:
            print(f"warning: host {host.name} unreachable: {host.error}", file=sys.stderr)
    return EXIT_ERROR if any(h.name not in asleep for h in down) else EXIT_OK


def with_power_saving(
    desired: DesiredState, snapshot: Snapshot, state_dir: Path | None
) -> tuple[Snapshot, set[str]]:
    """``snapshot`` with what the power book (the one ``run`` keeps in the state directory)
    says of each host: standby, booting or being emptied, since when and why; and the hosts
    asleep on purpose (standby or booting)."""
    if not any(h.power is not None for h in desired.cluster.spec.hosts):
        return snapshot, set()
    from reconciler.adapters.files.power import FilePowerStore

    book = FilePowerStore(desired.cluster.metadata.name, state_dir).load()
    if book is None:
        return snapshot, set()
    states = power_states(book)
    asleep = {*book.standby, *book.booting}
    hosts = [
        h.model_copy(update={"error": states[h.name]})
        if not h.reachable and h.name in asleep
        else h
        for h in snapshot.hosts
    ]
    return snapshot.model_copy(update={"hosts": hosts, "power_saving": states}), asleep


def power_states(book: PowerBook) -> dict[str, str]:
    """Host -> ``standby (power saving) since 2025-03-01 02:10: why`` and the like."""
    out: dict[str, str] = {}
    for name, entry in book.standby.items():
        out[name] = f"standby (power saving) since {entry.since:%Y-%m-%d %H:%M}: {entry.why}"
    for name, since in book.booting.items():
        out[name] = f"booting (power saving) since {since:%Y-%m-%d %H:%M}"
    for name, since in book.emptying.items():
        out[name] = f"being emptied (power saving) since {since:%Y-%m-%d %H:%M}"
    for name, why in book.failed.items():
        if name in out:
            out[name] += f"; last failure: {why}"
    return dict(sorted(out.items()))
