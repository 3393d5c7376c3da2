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


def _add_lab(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lab", help="a local multi-host libvirt lab with real VMs")
    p.set_defaults(handler=_run_lab)


def _run_lab(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- observe --------------------------------------------------------------------------------


def _add_observe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("observe", help="show what libvirt reports of every host and VM")
    p.set_defaults(handler=_run_observe)


def _run_observe(args: argparse.Namespace) -> int:
    raise NotImplementedError


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
