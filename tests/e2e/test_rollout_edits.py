"""Edits of a rollout merged while it runs take effect before its next step begins.

``reconciler run --repo`` carries a rollout out over libvirt test-driver hosts that run no VM
(each host's drain ends at once); each host's command is a real process
(``rollout_edit_command.py``) that writes marks, and the first host's command itself commits
an edit of the rollout file to the state repository, as a person merging it would, while it
runs. What ran is judged from the marks; what the rollout did, from the records git holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.lab import write_node_files
from tests.fleets import cluster_yaml
from tests.gitrepos import git, state_remote
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
COMMAND = Path(__file__).with_name("rollout_edit_command.py")
HOSTS = ("node-000", "node-001", "node-002")
ROLLOUT = "cluster-state/rollouts/patch.yaml"
TRAILERS = (
    "%(trailers:key=Reconciler-Rollout-Host,key=Reconciler-Rollout-Step,"
    "key=Reconciler-Rollout-Outcome,valueonly,separator=%x20)"
)
POLICY = (
    "apiVersion: placement/v1alpha1\nkind: BalancePolicy\nmetadata: {name: p}\n"
    "spec: {mode: apply, interval: 1h, threshold: 100, minUptime: 0s, basis: allocated}\n"
)


def command_line(name: str, marks: Path, edit: Path) -> str:
    argv = [sys.executable, str(COMMAND), str(marks), name, "{host}", str(edit)]
    return f"      - {{name: {name}, argv: {json.dumps(argv)}, timeout: 60s, safeToRepeat: true}}\n"


def rollout_yaml(marks: Path, edit: Path) -> str:
    return (
        "apiVersion: placement/v1alpha1\nkind: Rollout\nmetadata: {name: patch}\nspec:\n"
        f"  hosts: [{', '.join(HOSTS)}]\n"
        "  eachHost:\n"
        "    commands:\n"
        f"{command_line('upgrade', marks, edit)}"
        "    ready: {timeout: 30s, interval: 1s}\n"
    )


class World:
    """A state repository with one cluster of three empty test-driver hosts and the rollout
    ``patch``; ``run`` on it once started."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.marks = tmp_path / "marks"
        self.edit_file = tmp_path / "edit.json"
        folder = tmp_path / "cluster-state"
        (folder / "rollouts").mkdir(parents=True)
        cluster = write_node_files(tmp_path / "nodes", len(HOSTS), 0, name="edits")
        (folder / "cluster.yaml").write_text(
            cluster_yaml("edits", [(h.name, h.uri) for h in cluster.spec.hosts])
        )
        (folder / "policy.yaml").write_text(POLICY)
        self.rollout = rollout_yaml(self.marks, self.edit_file)
        (folder / "rollouts" / "patch.yaml").write_text(self.rollout)
        (tmp_path / "git").mkdir()
        self.url, self.person = state_remote(tmp_path / "git", folder)
        self.state = tmp_path / "state"
        self.log_path = tmp_path / "run.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def edit_during(self, host: str, replace: list[tuple[str, str]], message: str) -> None:
        """While ``host``'s command runs, it commits ``replace`` applied to the rollout file."""
        text = self.rollout
        for old, new in replace:
            assert old in text
            text = text.replace(old, new)
        self.edit_file.write_text(
            json.dumps(
                {
                    "host": host,
                    "url": self.url,
                    "path": ROLLOUT,
                    "old": self.rollout,
                    "new": text,
                    "message": message,
                }
            )
        )

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "reconciler",
                    "run",
                    "cluster-state",
                    "--repo",
                    self.url,
                    "--cache-dir",
                    str(self.tmp / "cache"),
                    "--state-dir",
                    str(self.state),
                    "--identity",
                    "run@a",
                    "--poll",
                    "1",
                    "--listen",
                    "off",
                    "--log-format",
                    "json",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text()[-3000:]

    def marked(self) -> list[tuple[str, str, str]]:
        """(host, command, start|end) of every mark, in order."""
        if not self.marks.exists():
            return []
        out = []
        for line in self.marks.read_text().splitlines():
            host, step, what = line.split()
            out.append((host, step, what))
        return out

    def commits(self) -> list[tuple[str, ...]]:
        """(host, step, outcome) of every rollout record on main, oldest first, and
        ("person", subject) for each other commit after the first."""
        git(self.person, "fetch", "-q", "origin")
        out: list[tuple[str, ...]] = []
        log = git(self.person, "log", "--reverse", "origin/main", f"--format={TRAILERS}|%s")
        for line in log.splitlines()[1:]:
            trailers, subject = line.split("|", 1)
            parts = tuple(trailers.split())
            if len(parts) == 3:
                out.append(parts)
            elif not subject.startswith("Reconciler"):
                out.append(("person", subject))
        return out

    def phase(self) -> str | None:
        try:
            status = json.loads((self.state / "edits" / "status.json").read_text())
        except (OSError, ValueError):
            return None
        rollouts = status.get("rollouts") or []
        return str(rollouts[0]["phase"]) if rollouts else None


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    pytest.importorskip("libvirt")
    made = World(tmp_path)
    try:
        yield made
    finally:
        made.close()


def records_of(commits: list[tuple[str, ...]], host: str) -> list[tuple[str, ...]]:
    return [c[1:] for c in commits if c[0] == host]


def test_a_pause_merged_while_a_command_runs_stops_the_next_host(world: World) -> None:
    world.edit_during(HOSTS[0], [("spec:\n", "spec:\n  paused: true\n")], "Pause the rollout patch")
    world.start()
    wait_for(
        lambda: world.phase() in ("Paused", "Done")
        and ("node-000", "undrain", "succeeded") in world.commits(),
        timeout=60,
        what="the rollout paused (or done) with node-000 given back",
        context=world.log,
    )
    assert world.phase() == "Paused"
    commits = world.commits()
    # the pause was merged while node-000's command ran; nothing began after it but the steps
    # that give node-000 back
    assert ("person", "Pause the rollout patch") in commits
    paused_at = commits.index(("person", "Pause the rollout patch"))
    assert commits[paused_at - 1] == ("node-000", "command/upgrade", "started")
    after = commits[paused_at + 1 :]
    assert [c for c in after if c[2] == "started"] == [
        ("node-000", "ready", "started"),
        ("node-000", "undrain", "started"),
    ]
    assert records_of(commits, "node-001") == []
    assert records_of(commits, "node-002") == []
    assert world.marked() == [("node-000", "upgrade", "start"), ("node-000", "upgrade", "end")]
    # merging paused: false lets it go on, from the next host
    git(world.person, "pull", "-q", "--rebase", "origin", "main")
    path = world.person / ROLLOUT
    path.write_text(path.read_text().replace("  paused: true\n", ""))
    git(world.person, "commit", "-qam", "Go on with the rollout patch")
    git(world.person, "push", "-q", "origin", "main")
    wait_for(
        lambda: world.phase() == "Done", timeout=60, what="the rollout done", context=world.log
    )
    assert [h for h, _, what in world.marked() if what == "start"] == list(HOSTS)


def test_a_host_removed_and_a_command_added_while_a_command_runs_count_at_once(
    world: World,
) -> None:
    upgrade = command_line("upgrade", world.marks, world.edit_file)
    world.edit_during(
        HOSTS[0],
        [
            (f"[{', '.join(HOSTS)}]", f"[{HOSTS[0]}, {HOSTS[2]}]"),
            (upgrade, upgrade + command_line("extra", world.marks, world.edit_file)),
        ],
        "Leave node-001 out of the rollout patch, add a command",
    )
    world.start()
    wait_for(
        lambda: world.phase() == "Done", timeout=60, what="the rollout done", context=world.log
    )
    # node-001 was never worked on; the command added ran on every host not done, node-000
    # included (its upgrade had not ended when the edit was merged)
    assert [(h, s) for h, s, what in world.marked() if what == "start"] == [
        ("node-000", "upgrade"),
        ("node-000", "extra"),
        ("node-002", "upgrade"),
        ("node-002", "extra"),
    ]
    commits = world.commits()
    assert records_of(commits, "node-001") == []
    assert ("node-000", "command/extra", "succeeded") in commits
