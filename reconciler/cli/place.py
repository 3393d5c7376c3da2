"""``reconciler place``: the best host for a new VM under the same rules, or why none fits."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

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
    load_desired,
    positive_int,
    size,
    snapshot_for,
    usage_errors_exit_1,
)
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


def run(args: argparse.Namespace) -> int:
    desired = load_desired(args)
    snapshot = snapshot_for(args, desired)
    history_for(args, desired.cluster.metadata.name)  # a broken status file is an error here too
    now: datetime = args.now or datetime.now(UTC)
    pages = pages_for(args.memory, args.hugepages) if args.hugepages is not None else 0
    result = placer.place(
        desired,
        snapshot,
        vcpus=args.vcpus,
        memory=args.memory,
        labels=dict(args.labels),
        name=args.name,
        now=now,
        hugepages=None if args.hugepages is None else (args.hugepages, pages),
    )
    if args.format == "json":
        print(plan_json.place_json(result), end="")
    else:
        print(plan_table.place_table(result), end="")
    return EXIT_OK if result.host is not None else EXIT_NO_FIT
