"""Dead-host recovery by an instance that never saw the host reachable, on a real lab: ``run
--repo`` records the cluster to the observed branch and stops; its state directory is lost; a
host dies; a second instance with a fresh state directory fences it and starts its VMs
elsewhere from the definitions in git, each exactly once. Judged from libvirt."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from reconciler.adapters.files.text import rewrite_file
from reconciler.adapters.lab import Lab
from reconciler.adapters.lab.faults import kill_host, kill_qemus
from tests.e2e.test_acting_lab import _run_repo
from tests.e2e.test_apply_cli import assert_sound
from tests.e2e.test_recovery_lab import (
    assert_once_elsewhere,
    configure,
    running_elsewhere,
    stop,
    wait,
)
from tests.gitrepos import git, state_remote
from tests.net import free_port

pytestmark = [pytest.mark.lab, pytest.mark.long]

BRANCH = "reconciler/observed/lab"


def quiet(lab: Lab) -> None:
    """Recovery on, a recording every round, and nothing that would move a VM meanwhile (no
    balance, rules or placement): what the branch records is where the VMs run."""
    configure(lab, ["true"])
    folder = lab.cluster_dir
    rewrite_file(
        folder / "policy.yaml",
        lambda text: re.sub(r"threshold: \d+", "threshold: 100", text).replace(
            "record: {every: 15m}", "record: {every: 1s}"
        ),
    )
    (folder / "rules.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: lab}\n"
        "spec:\n  rules: []\n"
    )
    (folder / "placement.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: lab}\n"
        "spec:\n  vms: {}\n"
    )


def quietest(where: dict[str, str]) -> tuple[str, list[str]]:
    """The host running the fewest VMs (at least one), and its VMs: each restart of a lab VM
    takes seconds."""
    host = min(set(where.values()), key=lambda h: (list(where.values()).count(h), h))
    return host, sorted(vm for vm, h in where.items() if h == host)


def recorded_hosts(person: Path) -> dict[str, str]:
    """VM -> host in the newest recording on the branch that carries definitions of them."""
    git(person, "fetch", "--quiet", "origin")
    # the fetched ref, not the remote's (a push between the fetch and a look would race)
    if not git(person, "branch", "--remotes", "--list", f"origin/{BRANCH}").strip():
        return {}
    files = git(person, "ls-tree", "--name-only", f"origin/{BRANCH}").split()
    if "definitions.json" not in files:
        return {}
    snap = json.loads(git(person, "show", f"origin/{BRANCH}:snapshot.json"))
    defined = json.loads(git(person, "show", f"origin/{BRANCH}:definitions.json"))
    return {v["name"]: v["host"] for v in snap.get("vms", []) if v["name"] in defined}


def test_a_fresh_instance_restarts_a_dead_hosts_vms_from_the_observed_branch_once(
    own_lab: Lab, tmp_path: Path
) -> None:
    quiet(own_lab)
    url, person = state_remote(tmp_path, own_lab.cluster_dir)
    log = tmp_path / "run.log"
    first = _run_repo(url, tmp_path / "a", free_port(), log, "first")
    second = None
    try:
        where = assert_sound(own_lab)
        took = wait(lambda: recorded_hosts(person) == where, 40, "the cluster recorded")
        print(f"recorded to the branch after {took:.1f} s")
        stop(first)
        assert assert_sound(own_lab) == where  # nothing moved after the recording
        shutil.rmtree(tmp_path / "a")  # the state directory is lost (and the clone with it)
        dead, vms = quietest(where)
        kill_host(Path(own_lab.dir), dead)
        kill_qemus(Path(own_lab.dir), dead)
        died = time.monotonic()
        second = _run_repo(url, tmp_path / "b", free_port(), log, "second")
        wait(
            lambda: all(running_elsewhere(own_lab, vm, dead) for vm in vms),
            60,
            f"{vms} running elsewhere",
        )
        print(f"host death to {len(vms)} VMs running elsewhere: {time.monotonic() - died:.1f} s")
        time.sleep(4)  # more rounds: still once
        assert_once_elsewhere(own_lab, vms, dead)
        text = log.read_text()
        assert "taken from the observed branch" in text
        assert text.index(f"host {dead} fenced") < text.index("restarted ")
    finally:
        stop(first)
        if second is not None:
            stop(second)
        print(log.read_text()[-3000:])
