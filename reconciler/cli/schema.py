"""``reconciler schema``: print or regenerate the JSON Schemas in schemas/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reconciler.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Subparsers
from reconciler.config import schemas


def register(sub: Subparsers) -> None:
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
        known = ", ".join([*schemas.SCHEMA_MODELS, *schemas.LIST_SCHEMAS])
        print(f"error: give a KIND ({known}) or --write", file=sys.stderr)
        return EXIT_USAGE
    print(schemas.schema_text(name), end="")
    return EXIT_OK
