"""The composition root: parses arguments, builds adapters, calls engine or core, prints.

The only module that prints or picks exit codes. Exit codes: 0 success, 1 error (bad input,
failed validation, unreachable world), 2 usage error; ``plan`` follows
``terraform plan -detailed-exitcode``: 0 no changes, 2 changes, 1 error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from reconciler import __version__
from reconciler.errors import ReconcilerError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


# --- validate -------------------------------------------------------------------------------


def _add_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("validate", help="check cluster-state folders against models and rules")
    p.set_defaults(handler=_run_validate)


def _run_validate(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- schema ---------------------------------------------------------------------------------


def _add_schema(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schema", help="print or regenerate the JSON Schemas in schemas/")
    p.set_defaults(handler=_run_schema)


def _run_schema(args: argparse.Namespace) -> int:
    raise NotImplementedError


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
