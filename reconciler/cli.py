"""The composition root: parses arguments, builds adapters, calls engine or core, prints.

The only module that prints or picks exit codes. Exit codes: 0 success, 1 error (bad input,
failed validation, unreachable world), 2 usage error; ``plan`` follows
``terraform plan -detailed-exitcode``: 0 no changes, 2 changes, 1 error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from reconciler import __version__, config
from reconciler.config import schemas
from reconciler.errors import ReconcilerError

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


def _run_observe(args: argparse.Namespace) -> int:
    from reconciler.adapters import snapshot_file
    from reconciler.errors import TerminalError
    from reconciler.report.observe_table import observe_table

    try:
        from reconciler.adapters import libvirt_observer
    except ImportError as err:
        raise TerminalError(
            f"observe needs the libvirt Python bindings: {err}",
            hint="pip install libvirt-python (needs libvirt-dev and pkg-config)",
        ) from err

    desired = config.load_desired(_cluster_folder(args.path))
    snapshot = libvirt_observer.observe_cluster(
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


def _add_plan(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="compute the migrations that reach the desired state")
    p.set_defaults(handler=_run_plan)


def _run_plan(args: argparse.Namespace) -> int:
    raise NotImplementedError


def _add_place(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("place", help="the best host for a new VM under the same rules")
    p.set_defaults(handler=_run_place)


def _run_place(args: argparse.Namespace) -> int:
    raise NotImplementedError


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
