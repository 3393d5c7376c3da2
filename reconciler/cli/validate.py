"""``reconciler validate``: check cluster folders against the models and the rules."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reconciler import config
from reconciler.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Subparsers


def register(sub: Subparsers) -> None:
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
