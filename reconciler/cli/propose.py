"""``reconciler propose``: the plan as one rolling pull request per cluster."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from reconciler.cli import requests
from reconciler.cli.common import (
    EXIT_CHANGES,
    EXIT_OK,
    EXIT_PARTIAL,
    FORGE_TOKEN_ENV,
    Subparsers,
    add_forge_arguments,
    add_now_argument,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_snapshot_argument,
    add_state_dir_argument,
    history_for,
    open_forge_of,
    snapshot_for,
    usage_errors_exit_1,
)
from reconciler.cli.desired import open_source
from reconciler.core import planner
from reconciler.core.power import PowerNext, power_next
from reconciler.engine import propose as proposing
from reconciler.engine.ports import StateRepo
from reconciler.engine.power import facts_of
from reconciler.model.audit import short_id
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Plan
from reconciler.model.power import PowerBook, PowerMode
from reconciler.model.snapshot import Snapshot
from reconciler.report import plan_markdown, plan_patch, power_markdown

TOKEN_ENV = FORGE_TOKEN_ENV

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


@dataclass(frozen=True)
class ProposeRequest:
    source: requests.RepoRequest
    forge: requests.ForgeRequest
    observe: requests.ObserveOverrides
    state_dir: Path | None
    snapshot: Path | None
    now: datetime | None


def request(args: argparse.Namespace) -> ProposeRequest:
    return ProposeRequest(
        source=requests.repo_of(args),
        forge=requests.forge_request_of(args),
        observe=requests.observe_of(args),
        state_dir=args.state_dir,
        snapshot=args.snapshot,
        now=args.now,
    )


def propose_plan(
    forge_request: requests.ForgeRequest,
    *,
    url: str,
    repo: StateRepo,
    base: str,
    source: str,
    root: Path,
    folder: Path,
    desired: DesiredState,
    plan: Plan,
    power: PowerNext | None = None,
) -> tuple[int, str]:
    """Keep the proposal of ``plan`` (and of ``power``, the power plan of ``mode: propose``,
    when it has steps) current on the forge of ``forge_request`` (the project from ``url``
    when not named): (exit code, one line saying what happened)."""
    cluster = desired.cluster.metadata.name
    plan = plan.model_copy(update={"desired_revision": source})
    path = placement_file(folder)
    forge = open_forge_of(forge_request, url)
    limit = forge.body_limit if forge is not None else 65_536
    moves = len(plan.moves) + len(plan.deferred)
    title = f"Placement of cluster {cluster}: {moves} move(s)"
    message = proposing.commit_message(cluster, plan, desired.placement)
    section, key = "", None
    if power is not None and power_markdown.has_plan(power):
        section = power_markdown.power_section(power, facts_of(desired))
        key = power_markdown.power_key(power)
        steps = power_markdown.commit_lines(power)
        title += f", power: {len(steps)} step(s)"
        message += "\n\nPower saving (mode: propose), what it would do:\n" + "\n".join(steps)
    body = plan_markdown.pr_body(
        plan, desired.placement, source=source, limit=limit - len(section) - 2
    )
    proposal = proposing.Proposal(
        cluster=cluster,
        base=base,
        source=source,
        plan_id=plan.plan_id,
        placement_path=str(path.relative_to(root)),
        placement_text=edited_placement(desired, plan, path),
        title=title,
        body=body + ("\n" + section + "\n" if section else ""),
        message=message,
        power_key=key,
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
    return propose(request(args))


def propose(request: ProposeRequest) -> int:
    source = open_source(request.source)
    loaded, checkout = source.load_checkout()
    desired = loaded.desired
    cluster = desired.cluster.metadata.name
    snapshot = snapshot_for(desired, snapshot=request.snapshot, observe=request.observe)
    history, _ = history_for(cluster, history=None, state_dir=request.state_dir)
    now = request.now or datetime.now(UTC)
    plan = planner.plan(desired, snapshot, history, now=now)
    power = power_proposed(desired, snapshot, request.state_dir, now)
    code, line = propose_plan(
        request.forge,
        url=request.source.url,
        repo=source.repo,
        base=source.branch,
        source=checkout.commit,
        root=checkout.root,
        folder=checkout.folder,
        desired=desired,
        plan=plan,
        power=power,
    )
    print(line)
    return code


def power_proposed(
    desired: DesiredState, snapshot: Snapshot, state_dir: Path | None, now: datetime
) -> PowerNext | None:
    """What power saving in ``mode: propose`` would do now, from the book ``run`` keeps in
    the state directory (its streaks; read, never written); None in another mode."""
    if desired.policy.spec.power.mode is not PowerMode.PROPOSE:
        return None
    from reconciler.adapters.files.power import FilePowerStore

    book = FilePowerStore(desired.cluster.metadata.name, state_dir).load()
    book = book or PowerBook(cluster=desired.cluster.metadata.name)
    return power_next(desired, snapshot, book, now, facts=facts_of(desired))
