"""``reconciler run``: the unattended loop, one active instance per cluster, observable over HTTP.

A PATH holding cluster folders rather than being one is served as a fleet (``cli/fleet.py``),
a cluster folder by one ``Instance`` (``cli/instance.py``).

Exits 0 after SIGTERM or SIGINT (running migrations settle first; a second signal aborts them,
the VMs staying on their sources), 1 when it cannot start (invalid cluster folder at start, the
listen address taken, git missing).
"""

from __future__ import annotations

import argparse
import dataclasses

from reconciler.cli import acting, fleet, requests
from reconciler.cli.common import (
    Subparsers,
    add_forge_arguments,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_state_dir_argument,
    positive_float,
)
from reconciler.cli.instance import Instance, RunRequest

DEFAULT_LISTEN = "127.0.0.1:9187"


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="reconcile on its own: every interval, on changes, within the policy's mode",
        description="Run reconcile rounds every spec.interval and at once when the desired "
        "state changes (folder watched, repository polled, webhook). The policy's mode decides: "
        "observe reports, propose keeps the proposal current, apply migrates inside windows. "
        "One instance per cluster acts; others stand by on the lease. Given a folder of "
        "clusters (PATH with cluster folders below it, or --clusters GLOB), serves every one; "
        "with --coordination, several instances share them. See docs/run.md.",
    )
    add_path_argument(p)
    add_repo_arguments(p)
    add_forge_arguments(p)
    p.add_argument(
        "--poll",
        type=positive_float,
        default=60.0,
        metavar="SECONDS",
        help="how often to look for new commits with --repo (default: 60)",
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"/metrics, /healthz and /webhook (default: {DEFAULT_LISTEN}); off: --listen off",
    )
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--identity", help="this instance's name in the lease (default: host:pid)")
    add_state_dir_argument(p)
    add_observe_overrides(p)
    acting.add_coordination_argument(p)
    fleet.add_fleet_arguments(p)
    p.set_defaults(handler=run)


def request(args: argparse.Namespace) -> RunRequest:
    source = requests.source_of(args)
    hold = requests.hold_of(args, source, waits=False, identity=args.identity)
    return RunRequest(
        acting=requests.ActRequest(
            command="run",
            source=source,
            hold=dataclasses.replace(hold, lease_duration=args.lease_duration),
            observe=requests.observe_of(args),
            state_dir=args.state_dir,
            confirmation=requests.Confirmation.YES,  # the policy's mode and window decide
        ),
        forge=requests.forge_request_of(args),
        poll=args.poll,
        listen=args.listen,
        log_format="json" if args.log_format == "json" else "text",
        clusters=args.clusters,
        concurrency=args.concurrency,
    )


def run(args: argparse.Namespace) -> int:
    from reconciler.engine import logs

    asked = request(args)
    logs.configure(asked.log_format)
    if fleet.is_fleet(asked):  # PATH holds cluster folders: serve every one of them
        return fleet.FleetInstance(asked).serve()
    return Instance(asked).serve()
