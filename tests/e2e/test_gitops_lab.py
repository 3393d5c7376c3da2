"""GitOps end to end on a real lab: ``propose`` opens a pull request (on the local GitHub-API
server, not the real GitHub), a person merges it, ``apply --repo`` moves the VMs and records
the batch as an audit commit, ``history`` shows each move with the merge as its source, and a
second ``propose`` has nothing left to do."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from reconciler.adapters.lab import Lab
from tests.e2e.test_apply_cli import assert_sound, reconciler
from tests.forges.servers import TOKEN, GitHubServer, serving
from tests.gitrepos import git, state_remote

pytestmark = pytest.mark.lab
pytest.importorskip("libvirt")


def test_propose_merge_apply_history_on_a_real_lab(
    own_lab: Lab,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = tmp_path / "folder"
    shutil.copytree(own_lab.cluster_dir, folder)
    before = assert_sound(own_lab)
    # Desired state as a team keeps it: every VM listed where it runs, a tight threshold, so
    # the proposal is a balance that changes placement.yaml (drift reverts change nothing).
    placement = folder / "placement.yaml"
    kept = placement.read_text().split("spec:")[0]
    listed = "".join(f"    {vm}: {host}\n" for vm, host in sorted(before.items()))
    placement.write_text(kept + "spec:\n  vms:\n" + listed)
    policy = folder / "policy.yaml"
    policy.write_text(re.sub(r"(?m)^  threshold: \d+", "  threshold: 5", policy.read_text()))
    url, person = state_remote(tmp_path, folder)
    server = GitHubServer(owner="infra", repo="state")
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", TOKEN)
    repo = ["--repo", url, "--cache-dir", str(tmp_path / "cache")]
    common = [*repo, "--state-dir", str(tmp_path / "state")]
    with serving(server) as api:
        forge = ["--forge", "github", "--forge-url", api, "--forge-project", "infra/state"]
        code, out, err = reconciler(capsys, "propose", *common, *forge)
        assert code == 2, out + err
        (pr,) = server.prs.values()
        branch = pr["head"]["ref"]
        assert assert_sound(own_lab) == before, "proposing moves nothing"

        # The person reviews and merges the pull request.
        git(person, "fetch", "-q")
        git(person, "merge", "-q", "--no-ff", f"origin/{branch}", "-m", "Merge pull request #1")
        git(person, "push", "-q", "origin", "main")
        merge = git(person, "rev-parse", "HEAD").strip()

        code, out, err = reconciler(capsys, "apply", *common, "--yes", "--actor", "ops-bot")
        assert code == 0, out + err
        assert "recorded as" in out
        after = assert_sound(own_lab)
        moved = {vm: host for vm, host in after.items() if before[vm] != host}
        assert moved, "the merged placement moved VMs"

        code, out, err = reconciler(capsys, "history", *repo, "--format", "json")
        assert code == 0, err
        history = json.loads(out)
        schema = Path(__file__).resolve().parents[2] / "schemas" / "movehistory.json"
        jsonschema.validate(history, json.loads(schema.read_text()))
        executed = [e for e in history["entries"] if e["kind"] == "executed"]
        assert executed, history
        audit = executed[0]
        assert audit["source"] == merge
        assert audit["trigger"] == "merge"
        assert audit["actor"] == "ops-bot"
        assert {m["vm"]: m["target"] for m in audit["moves"]} == moved

        # Nothing new to propose: the open proposal is closed, the branch deleted.
        code, out, err = reconciler(capsys, "propose", *common, *forge)
        assert code == 0, out + err
        assert "nothing to propose" in out
    git(person, "fetch", "-q", "--prune")
    assert f"origin/{branch}" not in git(person, "branch", "-r")
    assert assert_sound(own_lab) == after
