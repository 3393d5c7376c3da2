"""The composition root: parses arguments, builds adapters, calls engine or core, prints.

The only module that prints or picks exit codes. Exit codes: 0 success, 1 error (bad input,
failed validation, unreachable world), 2 usage error. ``plan`` and ``place`` answer a question
with their exit code, so there 2 is an answer and usage errors exit 1 instead: ``plan`` follows
``terraform plan -detailed-exitcode`` (0 no changes, 2 changes, 1 error), ``place`` exits 0
when a host fits, 2 when none does, 1 on error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from reconciler import __version__, config
from reconciler.adapters import history_file, snapshot_file
from reconciler.config import schemas
from reconciler.core import placer, planner
from reconciler.errors import ConfigError, ReconcilerError, TerminalError
from reconciler.model.cluster import Cluster
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.quantity import parse_size
from reconciler.model.snapshot import Snapshot
from reconciler.report import plan_json, plan_patch, plan_table
from reconciler.report.observe_table import observe_table

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


# --- validate -------------------------------------------------------------------------------


def _add_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "validate",
        help="check cluster-state folders against models and rules",
        description="Check cluster-state files and folders; a folder of cluster folders checks "
        "each cluster. Exit 0 when valid (warnings allowed), 1 on any error, 2 on usage errors.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[Path("cluster-state/")],
        metavar="PATH",
        help="cluster folders, folders of clusters, or single files (default: cluster-state/)",
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: one line per finding and a summary per cluster; json: an array of findings",
    )
    p.set_defaults(handler=_run_validate)


def _run_validate(args: argparse.Namespace) -> int:
    paths: list[Path] = args.paths
    missing = [p for p in paths if not p.exists()]
    if missing:
        for path in missing:
            print(f"error: {path}: no such file or folder", file=sys.stderr)
        return EXIT_USAGE
    reports = config.validate_paths(paths)
    findings = [f for report in reports for f in report.findings]
    if args.format == "json":
        print(json.dumps([f.model_dump(mode="json") for f in findings], indent=2))
    else:
        for finding in findings:
            print(config.format_finding(finding))
        for report in reports:
            print(report.summary())
    return EXIT_OK if all(report.valid for report in reports) else EXIT_ERROR


# --- schema ---------------------------------------------------------------------------------


def _add_schema(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "schema",
        help="print or regenerate the JSON Schemas in schemas/",
        description="Print the JSON Schema of one kind, or write (or check) all of them.",
    )
    p.add_argument(
        "kind",
        nargs="?",
        metavar="KIND",
        help="cluster, policy, rules, placement or snapshot (kind names work too)",
    )
    action = p.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="regenerate every schema file")
    action.add_argument(
        "--check", action="store_true", help="exit 1 when a schema file is missing or stale"
    )
    p.add_argument("--dir", type=Path, default=Path("schemas"), help="default: schemas/")
    p.set_defaults(handler=_run_schema)


def _run_schema(args: argparse.Namespace) -> int:
    if args.write or args.check:
        if args.kind:
            print("error: give a KIND or --write/--check, not both", file=sys.stderr)
            return EXIT_USAGE
        if args.check:
            stale = schemas.stale_schema_files(args.dir)
            for file in stale:
                print(f"{args.dir / file}: stale (run: reconciler schema --write)")
            return EXIT_ERROR if stale else EXIT_OK
        for path in schemas.write_schemas(args.dir):
            print(f"wrote {path}")
        return EXIT_OK
    name = schemas.schema_name(args.kind or "")
    if name is None:
        known = ", ".join(schemas.SCHEMA_MODELS)
        print(f"error: give a KIND ({known}) or --write", file=sys.stderr)
        return EXIT_USAGE
    print(schemas.schema_text(name), end="")
    return EXIT_OK


# --- lab ------------------------------------------------------------------------------------

LAB_DIR = Path(".lab")


def _add_lab(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "lab",
        help="a local multi-host libvirt lab with real VMs",
        description="Run several libvirt daemons on this machine as hosts kvm-01, kvm-02, ... "
        "with tiny VMs, unevenly placed, and a matching cluster folder <dir>/cluster-state/. "
        "Needs root, libvirtd and QEMU; --driver test writes libvirt test-driver files instead.",
    )
    actions = p.add_subparsers(dest="lab_action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the lab (or say that it is up)")
    up.add_argument("--hosts", type=int, default=3, help="number of hosts (default 3)")
    up.add_argument("--vms", type=int, default=8, help="number of VMs (default 8)")
    up.add_argument(
        "--driver",
        choices=("qemu", "test"),
        default="qemu",
        help="qemu: real daemons and VMs (default); test: libvirt test-driver files only",
    )
    up.add_argument("--recreate", action="store_true", help="stop a running lab first")
    status = actions.add_parser("status", help="list the lab's hosts and VMs")
    down = actions.add_parser("down", help="stop what `lab up` started and remove its folder")
    for action in (up, status, down):
        action.add_argument(
            "--dir", type=Path, default=LAB_DIR, help="the lab's folder (default .lab)"
        )
    p.set_defaults(handler=_run_lab)


def _run_lab(args: argparse.Namespace) -> int:
    # imported here so that commands without libvirt work where it is not installed
    from reconciler.adapters import libvirt_lab

    if args.lab_action == "up":
        lab = libvirt_lab.start_lab(
            args.dir, hosts=args.hosts, vms=args.vms, driver=args.driver, recreate=args.recreate
        )
        if lab.already_up:
            print(f"a lab is already up in {lab.dir} (use --recreate to start it afresh)")
        else:
            kind = "libvirt test-driver files" if lab.driver == "test" else f"{lab.virt_type} VMs"
            print(
                f"lab up in {lab.dir}: {len(lab.hosts)} hosts, {len(lab.vms)} {kind} "
                f"in {lab.seconds:.1f}s"
            )
        for host in lab.hosts:
            names = ", ".join(vm.name for vm in lab.vms if vm.host == host.name) or "-"
            print(f"  {host.name}  {host.uri}\n      {names}")
        print(f"cluster folder: {lab.cluster_dir}")
        print(f"next: reconciler observe {lab.cluster_dir}")
        return EXIT_OK
    if args.lab_action == "status":
        status = libvirt_lab.lab_status(args.dir)
        print(f"lab in {status.dir} ({status.driver} driver)")
        for h in status.hosts:
            state = "up" if h.up else "down"
            extra = f"  pid {h.pid}" if h.pid else ""
            extra += f"  ({h.error})" if h.error else ""
            print(f"  {h.name}  {state:<4}  {h.uri}{extra}")
        for vm in status.vms:
            print(f"    {vm.name:<12} {vm.host:<8} {vm.state}")
        return EXIT_OK if all(h.up for h in status.hosts) else EXIT_ERROR
    lab = libvirt_lab.stop_lab(args.dir)
    print(f"lab in {lab.dir} stopped and removed")
    return EXIT_OK


# --- observe --------------------------------------------------------------------------------


def _add_observe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "observe",
        help="show what libvirt reports of every host and VM",
        description="Connect to every host of a cluster folder at once and show hosts and VMs. "
        "Exit 0 when every host answered, 1 when one did not (it is still shown).",
    )
    p.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="cluster folder (default: cluster-state/, or .lab/cluster-state when a lab is up)",
    )
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--connect-timeout", type=float, default=5.0, metavar="SECONDS")
    p.add_argument("--call-timeout", type=float, default=10.0, metavar="SECONDS")
    p.add_argument(
        "--sample-interval",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="time between the two CPU samples (default 0.5)",
    )
    p.add_argument(
        "--shared-path",
        action="append",
        default=[],
        metavar="PREFIX",
        help="storage every host mounts; disks under it do not block migration (repeatable)",
    )
    p.set_defaults(handler=_run_observe)


def _cluster_folder(path: Path | None) -> Path:
    """The folder given, else ``.lab/cluster-state`` when a lab is up here, else cluster-state/."""
    if path is not None:
        return path.parent if path.is_file() else path
    lab_folder = LAB_DIR / "cluster-state"
    if (LAB_DIR / "lab.json").is_file() and lab_folder.is_dir():
        print(f"using the lab's cluster folder {lab_folder}", file=sys.stderr)
        return lab_folder
    return Path("cluster-state")


def _observe(
    cluster: Cluster,
    *,
    connect_timeout: float = 5,
    call_timeout: float = 10,
    sample_interval: float = 0.5,
    shared_paths: Sequence[str] = (),
) -> Snapshot:
    """Observe ``cluster`` live; libvirt is imported here: validate and offline plans need none."""
    try:
        from reconciler.adapters import libvirt_observer
    except ImportError as err:
        raise TerminalError(
            f"observing the hosts needs the libvirt Python bindings: {err}",
            hint="pip install libvirt-python (needs libvirt-dev and pkg-config), "
            "or plan offline with --snapshot FILE",
        ) from err
    return libvirt_observer.observe_cluster(
        cluster,
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        sample_interval=sample_interval,
        shared_paths=shared_paths,
    )


def _run_observe(args: argparse.Namespace) -> int:
    desired = config.load_desired(_cluster_folder(args.path))
    snapshot = _observe(
        desired.cluster,
        connect_timeout=args.connect_timeout,
        call_timeout=args.call_timeout,
        sample_interval=args.sample_interval,
        shared_paths=args.shared_path,
    )
    if args.format == "json":
        sys.stdout.write(snapshot_file.snapshot_json(snapshot))
    else:
        sys.stdout.write(observe_table(snapshot))
    down = [h for h in snapshot.hosts if not h.reachable]
    for host in down:
        print(f"warning: host {host.name} unreachable: {host.error}", file=sys.stderr)
    return EXIT_ERROR if down else EXIT_OK


# --- plan / place ---------------------------------------------------------------------------

PLAN_FORMATS = ("table", "json", "patch")
PLACE_FORMATS = ("table", "json")
EXIT_CHANGES = 2
"""``plan``: moves, deferred moves or a changed Placement (like terraform -detailed-exitcode)."""
EXIT_NO_FIT = 2
"""``place``: the answer is that no host fits the new VM."""

PLAN_EPILOG = """\
exit codes (like terraform plan -detailed-exitcode):
  0  no changes: nothing to move now or later, placement.yaml stays as it is
  2  changes: the plan has moves or deferred moves, or updates placement.yaml
  1  error: bad arguments (usage errors too, unlike other commands), invalid
     cluster folder, unreadable snapshot or history, a snapshot of another cluster

Without --snapshot the hosts are observed live through libvirt; a host that does not answer
is shown as unknown and nothing moves to or from it. Unsatisfiable items alone do not make
a change: they are printed, and the exit code stays 0.
"""

PLACE_EPILOG = """\
exit codes:
  0  a host fits; it is printed
  2  no host fits; every candidate is printed with why it does not fit
  1  error: bad arguments (usage errors too), invalid cluster folder, unreadable snapshot,
     a snapshot of another cluster
"""


def _usage_errors_exit_1(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` exit 1 on usage errors, unrecognized arguments included.

    argparse exits 2, which ``plan`` uses for "changes" and ``place`` for "no host fits": a
    typo in a script must not read as either.
    """
    parse_known_args = parser.parse_known_args

    def error(message: str) -> NoReturn:
        parser.print_usage(sys.stderr)
        parser.exit(EXIT_ERROR, f"{parser.prog}: error: {message}\n")

    def strict_parse_known_args(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = parse_known_args(args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = strict_parse_known_args  # type: ignore[method-assign,assignment]


def _aware_datetime(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time; write e.g. 2025-03-01T12:00:00Z"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no time zone; add one, e.g. 2025-03-01T12:00:00Z"
        )
    return value


def _add_state_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        nargs="?",
        type=Path,
        metavar="PATH",
        help="cluster folder (default: cluster-state/, or .lab/cluster-state when a lab is up)",
    )
    p.add_argument(
        "--snapshot",
        type=Path,
        metavar="FILE",
        help="work offline from a saved snapshot (observe --format json) instead of observing",
    )


def _add_plan(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="compute the migrations that reach the desired state",
        description="Compute the migrations that bring the cluster to its desired state,\n"
        "with the reason for each, and print them. Changes nothing.",
        epilog=PLAN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_state_arguments(p)
    p.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="past moves and imbalance rounds (History as JSON or YAML); default: none",
    )
    p.add_argument(
        "--format",
        choices=PLAN_FORMATS,
        default="table",
        help="table for people (default), json: the whole plan, patch: an RFC 6902 JSON Patch "
        "of the Placement document",
    )
    p.add_argument(
        "--now",
        type=_aware_datetime,
        metavar="ISO8601",
        help="the time to plan at, with a time zone (default: now, UTC); decides cooldowns",
    )
    _usage_errors_exit_1(p)
    p.set_defaults(handler=_run_plan)


def _check_snapshot_matches(desired: DesiredState, snapshot: Snapshot, source: str) -> None:
    """The snapshot must be of the folder's cluster and know only its hosts."""
    name = desired.cluster.metadata.name
    if snapshot.cluster != name:
        raise ConfigError(
            f"{source} is a snapshot of cluster {snapshot.cluster!r}, but the folder describes "
            f"cluster {name!r}",
            hint="pass the snapshot of this cluster, or the folder of the snapshot's cluster",
        )
    hosts = {h.name for h in desired.cluster.spec.hosts}
    unknown = sorted(
        {h.name for h in snapshot.hosts if h.name not in hosts}
        | {v.host for v in snapshot.vms if v.host not in hosts}
    )
    if unknown:
        raise ConfigError(
            f"{source} has hosts that are not in cluster {name!r}: {', '.join(unknown)}",
            hint="add them to the Cluster document, or take a new snapshot of this cluster",
        )


def _desired_and_snapshot(args: argparse.Namespace) -> tuple[DesiredState, Snapshot]:
    desired = config.load_desired(_cluster_folder(args.path))
    if args.snapshot is not None:
        snapshot = snapshot_file.load_snapshot(args.snapshot)
        source = f"snapshot {args.snapshot}"
    else:
        snapshot = _observe(desired.cluster)
        source = "the observed snapshot"
    _check_snapshot_matches(desired, snapshot, source)
    return desired, snapshot


def _run_plan(args: argparse.Namespace) -> int:
    desired, snapshot = _desired_and_snapshot(args)
    history = History() if args.history is None else history_file.load_history(args.history)
    now: datetime = args.now or datetime.now(UTC)
    result = planner.plan(desired, snapshot, history, now=now)
    if args.format == "json":
        print(plan_json.plan_json(result), end="")
    elif args.format == "patch":
        print(plan_patch.plan_patch(desired.placement, result), end="")
    else:
        print(plan_table.plan_table(result, desired.placement.spec.vms), end="")
    changed = result.has_changes or plan_patch.plan_patch_ops(desired.placement, result)
    return EXIT_CHANGES if changed else EXIT_OK


def _add_place(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "place",
        help="the best host for a new VM under the same rules",
        description="Answer where a new VM would go under the cluster's rules and policy,\n"
        "without changing anything.",
        epilog=PLACE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--vcpus", type=_positive_int, required=True, help="vCPUs of the new VM")
    p.add_argument(
        "--memory", type=_size, required=True, help="memory of the new VM, e.g. 4GiB or 512MiB"
    )
    p.add_argument(
        "--labels",
        nargs="+",
        type=_label,
        default=[],
        metavar="KEY=VALUE",
        help="labels of the new VM, as rules select them",
    )
    p.add_argument("--name", default="new-vm", help="name of the new VM, as rules select it")
    _add_state_arguments(p)
    p.add_argument("--format", choices=PLACE_FORMATS, default="table")
    p.add_argument(
        "--now",
        type=_aware_datetime,
        metavar="ISO8601",
        help="the time to place at, with a time zone (default: now, UTC)",
    )
    _usage_errors_exit_1(p)
    p.set_defaults(handler=_run_place)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1")
    return value


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not a label; write key=value")
    return key, value


def _run_place(args: argparse.Namespace) -> int:
    desired, snapshot = _desired_and_snapshot(args)
    now: datetime = args.now or datetime.now(UTC)
    result = placer.place(
        desired,
        snapshot,
        vcpus=args.vcpus,
        memory=args.memory,
        labels=dict(args.labels),
        name=args.name,
        now=now,
    )
    if args.format == "json":
        print(plan_json.place_json(result), end="")
    else:
        print(plan_table.place_table(result), end="")
    return EXIT_OK if result.host is not None else EXIT_NO_FIT


# --- entry point ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reconciler",
        description="Declarative GitOps reconciler for VM placement on libvirt/KVM clusters.",
    )
    parser.add_argument("--version", action="version", version=f"reconciler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_validate, _add_schema, _add_lab, _add_observe, _add_plan, _add_place):
        add(sub)
    return parser


def _print_error(err: ReconcilerError) -> None:
    print(f"error: {err.message}", file=sys.stderr)
    if err.hint:
        print(f"  hint: {err.hint}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    handler: Handler = args.handler
    try:
        return handler(args)
    except ReconcilerError as err:
        _print_error(err)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
