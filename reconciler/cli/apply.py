"""``reconciler apply``: observe, plan, show, confirm, then live-migrate within every limit.

``apply`` acts whatever the policy's ``mode`` (the mode governs what ``run`` does on its own).
Exit codes: 0 everything done or nothing to do; 3 some moves failed or were skipped as stale,
a person's placement change was kept, or the record was not written; 1 error; 130/143
interrupted by SIGINT/SIGTERM. The flags become one ``ApplyRequest`` here; the round is
``applying.Applying``'s, shared with ``drain --apply``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from reconciler.cli import acting, load, requests
from reconciler.cli.applying import Applying
from reconciler.cli.common import (
    Subparsers,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_state_dir_argument,
)
from reconciler.model.status import TRIGGERS

APPLY_EPILOG = """\
exit codes:
  0    every planned move done, or nothing to do
  3    some moves failed or were skipped as stale; or they are done but a person changed
       the same placement entries meanwhile (kept), or the record could not be written
  1    error: invalid cluster folder, no host observed, the cluster never observed
       completely yet while moves were planned (nothing moved), the cluster held by another
       command or instance, no terminal to ask on and no --yes (nothing read or held)
  130  interrupted by SIGINT (143: SIGTERM): running migrations were let finish, none started

A first SIGINT/SIGTERM starts nothing more and lets the running migrations end; a second one
aborts them (the VMs stay on their sources, running).
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "apply",
        help="live-migrate VMs to reach the desired state, within every limit",
        description="Observe, plan, show the plan, ask for confirmation, then execute it by\n"
        "live migration within batch, parallel, per-host and disruption-budget limits.",
        epilog=APPLY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_path_argument(p)
    p.add_argument("--yes", action="store_true", help=acting.YES_HELP)
    p.add_argument("--dry-run", action="store_true", help="show the plan and stop")
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text for people (progress on a terminal), json: the round's ReconcileStatus",
    )
    add_state_dir_argument(p)
    add_observe_overrides(p)
    add_repo_arguments(p)
    acting.add_hold_arguments(p)
    p.add_argument(
        "--audit-branch",
        metavar="NAME",
        help="with --repo: record each executed batch on this branch instead of --branch "
        "(for repositories whose main branch is protected)",
    )
    p.add_argument(
        "--trigger",
        choices=TRIGGERS,
        help="with --repo: the Reconciler-Trigger of the audit commit (default: maintenance "
        "for drains, merge when the source commit is a merge, else manual)",
    )
    p.add_argument("--balance-on-sample", action="store_true", help=load.BALANCE_ON_SAMPLE_HELP)
    acting.add_actor_argument(p)
    p.set_defaults(handler=run)


@dataclass(frozen=True)
class ApplyRequest:
    acting: requests.ActRequest
    json_output: bool


def request(args: argparse.Namespace) -> ApplyRequest:
    """Refused here, before anything is read or held, when it could not be confirmed."""
    confirmation = requests.confirmation_of(args, dry_run=True)
    source = requests.source_of(args, actor=True, audit_branch=True)
    return ApplyRequest(
        acting=requests.ActRequest(
            command="apply",
            source=source,
            hold=requests.hold_of(args, source, waits=True),
            observe=requests.observe_of(args),
            state_dir=args.state_dir,
            confirmation=confirmation,
            trigger=args.trigger,
            balance_on_sample=args.balance_on_sample,
        ),
        json_output=args.format == "json",
    )


def run(args: argparse.Namespace) -> int:
    asked = request(args)
    return Applying(asked.acting, json_output=asked.json_output).once().code
