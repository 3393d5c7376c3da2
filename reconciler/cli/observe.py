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
    if request.format == "json":
        sys.stdout.write(snapshot_file.snapshot_json(snapshot))
    else:
        sys.stdout.write(observe_table(snapshot))
    down = [h for h in snapshot.hosts if not h.reachable]
    for host in down:
        print(f"warning: host {host.name} unreachable: {host.error}", file=sys.stderr)
    return EXIT_ERROR if down else EXIT_OK
