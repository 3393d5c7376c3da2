"""``run`` in propose mode with ``--repo``: one observation and one plan per round, and the
proposal carries that round's plan id."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.cli import main
from tests.gitrepos import git, state_remote

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")
REPO = Path(__file__).resolve().parents[2]


def test_run_in_propose_mode_proposes_the_rounds_own_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECONCILER_FORGE_TOKEN", raising=False)
    monkeypatch.delenv("RECONCILER_FORGE", raising=False)
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    folder = lab / "cluster-state"
    policy = folder / "policy.yaml"
    text = re.sub(r"(?m)^  mode: \w+", "  mode: propose", policy.read_text())
    text = re.sub(r"(?m)^  drift: \w+", "  drift: adopt", text)  # a placement edit to propose
    policy.write_text(re.sub(r"(?m)^  interval: .*$", "  interval: 1h", text))
    url, person = state_remote(tmp_path, folder)
    cluster = json.loads((lab / "lab.json").read_text()).get("cluster", "lab")
    state = tmp_path / "state"
    log = (tmp_path / "run.log").open("w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_FORGE")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "run", "cluster-state", "--repo", url,
         "--cache-dir", str(tmp_path / "cache"), "--state-dir", str(state), "--listen", "off",
         "--log-format", "json"],
        stderr=log, stdout=subprocess.DEVNULL, env={**env, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        branch = f"reconciler/{cluster}"
        deadline = time.monotonic() + 60
        heads = ""
        while time.monotonic() < deadline:
            heads = git(person, "ls-remote", "origin", branch)
            if heads.strip():
                break
            time.sleep(0.5)
        assert heads.strip(), (tmp_path / "run.log").read_text()[-2000:]
        git(person, "fetch", "-q", "origin")
        message = git(person, "log", "-1", "--format=%B", f"origin/{branch}")
        proposed = re.search(r"Reconciler-Plan: (\S+)", message)
        assert proposed is not None, message
        status = json.loads((state / cluster / "status.json").read_text())
        assert status["lastResult"]["planId"] == proposed.group(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    rounds = [json.loads(ln) for ln in (tmp_path / "run.log").read_text().splitlines()]
    proposals = [r for r in rounds if r["message"].startswith("proposal:")]
    finished = [r for r in rounds if r["message"].startswith("round ")]
    assert proposals
    assert len(proposals) <= len(finished), "one proposal per round, from the round's plan"
