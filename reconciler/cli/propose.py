"""``reconciler propose``: the plan as one rolling pull request per cluster."""

from __future__ import annotations

import argparse
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.cli.common import (
    EXIT_CHANGES,
    EXIT_OK,
    EXIT_PARTIAL,
    StateCheckout,
    Subparsers,
    add_forge_arguments,
    add_now_argument,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_snapshot_argument,
    add_state_dir_argument,
    forge_of,
    history_for,
    load_desired,
    snapshot_for,
    usage_errors_exit_1,
)
from reconciler.core import planner
from reconciler.engine import propose as proposing
from reconciler.engine.ports import StateRepo
from reconciler.errors import ConfigError
from reconciler.model.audit import short_id
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Plan
from reconciler.report import plan_markdown, plan_patch

TOKEN_ENV = "RECONCILER_FORGE_TOKEN"

EPILOG = f"""\
exit codes:
  0  nothing to propose (an open proposal was closed and its branch deleted)
  2  a proposal is open: created, updated or already current
  3  blocked: a person committed on the proposal branch; it is left alone
  1  error

The forge token comes from ${TOKEN_ENV}; it is sent only to the forge's API, never to git,
logs or output. --forge none only pushes the branch reconciler/<cluster>.
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "propose",
        help="propose the plan as a rolling pull request on the state repository",
        description="Plan, write the plan as a minimal change of placement.yaml on the branch\n"
        "reconciler/<cluster> and open or update its pull request.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_path_argument(p)
    add_repo_arguments(p)
    add_forge_arguments(p)
    add_snapshot_argument(p)
    add_state_dir_argument(p)
    add_observe_overrides(p)
    add_now_argument(p, "plan", decides="cooldowns and minUptime")
    usage_errors_exit_1(p)
    p.set_defaults(handler=run)


def project_of(url: str) -> str | None:
    """``https://h/infra/state.git`` -> ``infra/state``."""
    parts = [x for x in re.split(r"[/:]", url.removesuffix(".git")) if x]
    return "/".join(parts[-2:]) if len(parts) >= 2 else None


def placement_file(folder: Path) -> Path:
    """The file holding the Placement document: placement.yaml, else the first that has one."""
    default = folder / "placement.yaml"
    if default.is_file():
        return default
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        if re.search(r"^kind:\s*Placement\s*$", path.read_text(encoding="utf-8"), re.M):
            return path
    return default


def edited_placement(desired: DesiredState, plan: Plan, path: Path) -> str | None:
    """The placement file after the plan, minimally edited; None when nothing changes."""
    from reconciler.config import yaml_edit  # ruamel.yaml: only when a proposal is written

    if not plan_patch.placement_changes(desired.placement, plan):
        return None
    current = desired.placement.spec.vms
    changes = {vm: host for vm, host in plan.placement.items() if current.get(vm) != host}
    if path.is_file():
        return yaml_edit.set_placement(path.read_text(encoding="utf-8"), changes, file=path.name)
    skeleton = (
        "apiVersion: placement/v1alpha1\nkind: Placement\n"
        f"metadata:\n  name: {desired.cluster.metadata.name}\nspec: {{}}\n"
    )
    return yaml_edit.set_placement(skeleton, changes, file=path.name)


def open_forge_of(args: argparse.Namespace) -> Any:
    """The forge named by --forge (None for --forge none); the token from the environment."""
    forge = forge_of(args)
    if forge == "none":
        return None
    from reconciler.adapters.forges.clients import open_forge

    token = os.environ.get(TOKEN_ENV)
    if not token:
        raise ConfigError(
            f"--forge {forge} needs a token in ${TOKEN_ENV}",
            hint=f"export {TOKEN_ENV}=... (a token that may write pull requests), "
            "or use --forge none to only push the branch",
        )
    project = args.forge_project or project_of(args.repo)
    if project is None:
        raise ConfigError("cannot tell the forge project", hint="pass --forge-project")
    return open_forge(forge, project=project, token=token, api_url=args.forge_url)


def propose_plan(
    args: argparse.Namespace,
    *,
    repo: StateRepo,
    base: str,
    source: str,
    root: Path,
    folder: Path,
    desired: DesiredState,
    plan: Plan,
) -> tuple[int, str]:
    """Keep the proposal of ``plan`` current: (exit code, one line saying what happened)."""
    cluster = desired.cluster.metadata.name
    plan = plan.model_copy(update={"desired_revision": source})
    path = placement_file(folder)
    forge = open_forge_of(args)
    limit = forge.body_limit if forge is not None else 65_536
    proposal = proposing.Proposal(
        cluster=cluster,
        base=base,
        source=source,
        plan_id=plan.plan_id,
        placement_path=str(path.relative_to(root)),
        placement_text=edited_placement(desired, plan, path),
        title=f"Placement of cluster {cluster}: {len(plan.moves) + len(plan.deferred)} move(s)",
        body=plan_markdown.pr_body(plan, desired.placement, source=source, limit=limit),
        message=proposing.commit_message(cluster, plan, desired.placement),
    )
    try:
        result = proposing.propose(repo, forge, proposal)
    finally:
        if forge is not None:
            forge.disconnect()
    where = (
        f" {result.pull_request.url or '#' + str(result.pull_request.number)}"
        if (result.pull_request)
        else ""
    )
    lines = {
        proposing.Outcome.NOTHING: f"nothing to propose for cluster {cluster}"
        + (f"; closed{where} and deleted {result.branch}" if result.pull_request else ""),
        proposing.Outcome.CREATED: f"opened{where} from {result.branch}",
        proposing.Outcome.UPDATED: f"updated{where} {result.branch} "
        f"to plan {short_id(plan.plan_id)}",
        proposing.Outcome.CURRENT: f"proposal{where} on {result.branch} is current "
        f"(plan {short_id(plan.plan_id)})",
        proposing.Outcome.BLOCKED: f"blocked: {result.detail}",
    }
    if result.outcome is proposing.Outcome.NOTHING:
        code = EXIT_OK
    elif result.outcome is proposing.Outcome.BLOCKED:
        code = EXIT_PARTIAL
    else:
        code = EXIT_CHANGES
    return code, lines[result.outcome]


def run(args: argparse.Namespace) -> int:
    if not args.repo:
        raise ConfigError("propose needs --repo URL", hint="pass the state repository's URL")
    desired = load_desired(args)
    checkout: StateCheckout = args.state_checkout
    cluster = desired.cluster.metadata.name
    snapshot = snapshot_for(args, desired)
    history, _ = history_for(args, cluster)
    now: datetime = args.now or datetime.now(UTC)
    plan = planner.plan(desired, snapshot, history, now=now)
    code, line = propose_plan(
        args,
        repo=checkout.repo,
        base=checkout.branch,
        source=checkout.commit,
        root=checkout.root,
        folder=checkout.folder,
        desired=desired,
        plan=plan,
    )
    print(line)
    return code
