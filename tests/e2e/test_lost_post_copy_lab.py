"""A VM lost with its post-copy whose target's restarted daemon left its copy defined, shut off
(docs/apply.md), made on a lab as libvirt leaves it: the source shut off as migrated and still
defined, the target's copy defined and shut off, both carrying the move's intent. Judged from
libvirt: ``plan`` says it was lost and how to start it, moving nothing of it; a round removes
the target's copy and leaves the source as it is; started again on its source by a person, the
next round records the failed move and the VM runs once, defined only where it runs. A second
VM, started again on its source before any round removed the copy: the round removes it and
records the failed move, the VM running on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reconciler.adapters.lab import Lab
from reconciler.adapters.libvirt.recorder import LibvirtRecorder
from reconciler.config import load_desired
from reconciler.model.snapshot import MoveIntent, ReconcilerState
from tests.e2e.test_apply_cli import assert_sound, domains, reconciler
from tests.lab_fixtures import migrate_plainly

pytestmark = pytest.mark.lab

libvirt = pytest.importorskip("libvirt")


def lost_leaving_a_copy(lab: Lab, vm: str, source: str, target: str) -> None:
    """The end state of a post-copy that ended on ``source`` while ``target``'s daemon was
    down, whose restarted daemon then ended its copy but kept it defined."""
    uris = {h.name: h.uri for h in lab.hosts}
    # written long enough ago that no round takes it for a move under way
    started = datetime.now(UTC) - timedelta(hours=1)
    intent = MoveIntent(plan_id="p", source=source, target=target, started_at=started)
    LibvirtRecorder(load_desired(lab.cluster_dir).cluster).record(
        source, vm, ReconcilerState(intent=intent)
    )
    # ends on the source as a migration does, but keeps the source's definition
    migrate_plainly(lab, vm, source, target, keep_source=True)
    conn = libvirt.open(uris[target])
    try:
        conn.lookupByName(vm).destroy()  # ended, still defined
    finally:
        conn.close()


def test_the_copy_a_lost_post_copy_left_on_its_target_is_removed_and_nothing_runs_twice(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    where = assert_sound(own_lab)
    vm = sorted(where)[0]
    source = where[vm]
    target = next(h.name for h in own_lab.hosts if h.name != source)
    lost_leaving_a_copy(own_lab, vm, source, target)
    shut_off = libvirt.VIR_DOMAIN_SHUTOFF
    assert sorted((h, p, s) for h, p, s in domains(own_lab)[vm]) == [
        (source, True, shut_off),
        (target, True, shut_off),
    ]

    code, out, err = reconciler(capsys, "plan", folder, "--format", "json")
    assert code in (0, 2), err
    planned = json.loads(out)
    assert vm not in [m["vm"] for m in planned["moves"] + planned["deferred"]]
    (problem,) = (u for u in planned["unsatisfiable"] if u["code"] == "PostCopyFailed")
    assert f"start it again on {source}" in problem["message"]
    assert f"the copy {target} left defined, shut off, is removed" in problem["message"]

    code, out, err = reconciler(capsys, "apply", folder, "--yes", "--state-dir", state)
    assert code == 0, err + out
    assert domains(own_lab)[vm] == [(source, True, shut_off)], "the target's copy is gone"
    code, out, err = reconciler(capsys, "plan", folder, "--format", "json")
    (problem,) = (u for u in json.loads(out)["unsatisfiable"] if u["code"] == "PostCopyFailed")
    assert f"start it again on {source}" in problem["message"]

    conn = libvirt.open(next(h.uri for h in own_lab.hosts if h.name == source))
    try:  # what the plan says a person does
        conn.lookupByName(vm).create()
    finally:
        conn.close()
    code, out, err = reconciler(capsys, "apply", folder, "--yes", "--state-dir", state)
    assert code == 0, err + out
    assert vm in assert_sound(own_lab)
    code, out, err = reconciler(capsys, "observe", folder, "--format", "json")
    record = next(v["reconciler"] for v in json.loads(out)["vms"] if v["name"] == vm)
    assert record["intent"] is None
    assert record["lastFailure"]["target"] == target

    # A second VM lost so, started again on its source by a person before any round removed
    # the target's copy: the round removes the copy, records the failed move, leaves it running.
    where = assert_sound(own_lab)
    other = next(v for v in sorted(where) if v != vm)
    o_source = where[other]
    o_target = next(h.name for h in own_lab.hosts if h.name != o_source)
    lost_leaving_a_copy(own_lab, other, o_source, o_target)
    conn = libvirt.open(next(h.uri for h in own_lab.hosts if h.name == o_source))
    try:
        conn.lookupByName(other).create()
    finally:
        conn.close()
    running = libvirt.VIR_DOMAIN_RUNNING
    assert sorted(domains(own_lab)[other]) == sorted(
        [(o_source, True, running), (o_target, True, shut_off)]
    )
    code, out, err = reconciler(capsys, "apply", folder, "--yes", "--state-dir", state)
    assert code == 0, err + out
    assert domains(own_lab)[other] == [(o_source, True, running)], "the target's copy is gone"
    assert other in assert_sound(own_lab)
    code, out, err = reconciler(capsys, "observe", folder, "--format", "json")
    record = next(v["reconciler"] for v in json.loads(out)["vms"] if v["name"] == other)
    assert record["intent"] is None
    assert record["lastFailure"]["target"] == o_target
