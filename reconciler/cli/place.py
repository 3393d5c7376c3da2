"""``reconciler place``: the best host for a new VM under the same rules, or why none fits."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from reconciler.cli import requests
from reconciler.cli.common import (
    EXIT_NO_FIT,
    EXIT_OK,
    Subparsers,
    add_now_argument,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_snapshot_argument,
    add_state_dir_argument,
    history_for,
    label,
    positive_int,
    size,
    snapshot_for,
    usage_errors_exit_1,
)
from reconciler.cli.desired import open_source
from reconciler.core import placer
from reconciler.core.hugepages import pages_for
from reconciler.report import plan_json, plan_table

PLACE_FORMATS = ("table", "json")

PLACE_EPILOG = """\
exit codes:
  0  a host fits; it is printed
  2  no host fits; every candidate is printed with why it does not fit
  1  error: bad arguments (usage errors too), invalid cluster folder, unreadable snapshot,
     a snapshot of another cluster
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "place",
        help="the best host for a new VM under the same rules",
        description="Answer where a new VM would go under the cluster's rules and policy,\n"
        "without changing anything.",
        epilog=PLACE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--vcpus", type=positive_int, required=True, help="vCPUs of the new VM")
    p.add_argument(
        "--memory",
        type=size,
        required=True,
        help="memory of the new VM with its unit, e.g. 4GiB or 512MiB",
    )
    p.add_argument(
        "--labels",
        nargs="+",
        type=label,
        default=[],
        metavar="KEY=VALUE",
        help="labels of the new VM, as rules select them",
    )
    p.add_argument("--name", default="new-vm", help="name of the new VM, as rules select it")
    p.add_argument(
        "--hugepages",
        type=page_size,
        default=None,
        metavar="PAGE_SIZE",
        help="back its memory with huge pages of this size, e.g. 2MiB or 1GiB: only hosts with "
        "room for that many pages fit",
    )
    add_path_argument(p)
    add_snapshot_argument(p)
    add_state_dir_argument(p)
    add_observe_overrides(p)
    p.add_argument("--format", choices=PLACE_FORMATS, default="table")
    add_now_argument(p, "place")
    usage_errors_exit_1(p)
    add_repo_arguments(p)
    p.set_defaults(handler=run)


def page_size(text: str) -> int:
    """A huge page size with its unit, in KiB."""
    number = size(text)
    if number < 1024 or number % 1024:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no page size; write the size of the host's huge pages, e.g. 2MiB or 1GiB"
        )
    return number // 1024


@dataclass(frozen=True)
class PlaceRequest:
    source: requests.SourceRequest
    observe: requests.ObserveOverrides
    state_dir: Path | None
    snapshot: Path | None
    now: datetime | None
    format: str
    vcpus: int
    memory: int
    labels: tuple[tuple[str, str], ...]
    name: str
    hugepages: int | None
    """The page size in KiB; None: no huge pages."""


def request(args: argparse.Namespace) -> PlaceRequest:
    return PlaceRequest(
        source=requests.source_of(args),
        observe=requests.observe_of(args),
        state_dir=args.state_dir,
        snapshot=args.snapshot,
        now=args.now,
        format=args.format,
        vcpus=args.vcpus,
        memory=args.memory,
        labels=tuple(args.labels),
        name=args.name,
        hugepages=args.hugepages,
    )


def run(args: argparse.Namespace) -> int:
    return place(request(args))


def place(request: PlaceRequest) -> int:
    desired = open_source(request.source).load().desired
    snapshot = snapshot_for(desired, snapshot=request.snapshot, observe=request.observe)
    # a broken status file is an error here too
    history_for(desired.cluster.metadata.name, history=None, state_dir=request.state_dir)
    now = request.now or datetime.now(UTC)
    size = request.hugepages
    result = placer.place(
        desired,
        snapshot,
        vcpus=request.vcpus,
        memory=request.memory,
        labels=dict(request.labels),
        name=request.name,
        now=now,
        hugepages=None if size is None else (size, pages_for(request.memory, size)),
    )
    if request.format == "json":
        print(plan_json.place_json(result), end="")
    else:
        print(plan_table.place_table(result), end="")
    return EXIT_OK if result.host is not None else EXIT_NO_FIT
