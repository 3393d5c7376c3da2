"""Another actor's cold move caught between defining its copy and undefining the source, made
on a lab as libvirt holds it: the VM shut off on both hosts, defined on both, with that actor's
fresh intent. It has the shape of a stopped cold move, which a round settles by removing the
target's copy. Judged from libvirt: ``apply`` as another actor removes nothing and clears no
intent (the copy is the other actor's to verify), and once that actor ends its move the VM runs
once, defined only where it runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.lab import Lab
from reconciler.adapters.libvirt.recorder import LibvirtRecorder
from reconciler.config import load_desired
from reconciler.model.snapshot import MoveIntent, ReconcilerState
from tests.e2e.test_apply_cli import assert_sound, domains, reconciler

pytestmark = pytest.mark.lab

libvirt = pytest.importorskip("libvirt")


def test_a_round_leaves_another_actors_cold_move_copy_alone(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    uris = {h.name: h.uri for h in own_lab.hosts}
    where = assert_sound(own_lab)
    vm = sorted(where)[0]
    source = where[vm]
    target = next(h.name for h in own_lab.hosts if h.name != source)
    intent = MoveIntent(
        plan_id="p",
        source=source,
        target=target,
        started_at=datetime.now(UTC),
        actor="run@elsewhere",
    )
    LibvirtRecorder(load_desired(folder).cluster).record(source, vm, ReconcilerState(intent=intent))
    # the other actor's cold move: the source shut off, its definition (intent included)
    # made on the target, shut off; the source not yet undefined
    src = libvirt.open(uris[source])
    dst = libvirt.open(uris[target])
    try:
        dom = src.lookupByName(vm)
        dom.destroy()
        dst.defineXML(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        shut_off = libvirt.VIR_DOMAIN_SHUTOFF
        assert sorted(domains(own_lab)[vm]) == [(source, True, shut_off), (target, True, shut_off)]

        code, out, err = reconciler(capsys, "apply", folder, "--yes", "--state-dir", state)
        assert code in (0, 1), err + out
        assert sorted(domains(own_lab)[vm]) == [
            (source, True, shut_off),
            (target, True, shut_off),
        ], "the other actor's copy is kept"
        code, out, err = reconciler(capsys, "observe", folder, "--format", "json")
        records = [v["reconciler"] for v in json.loads(out)["vms"] if v["name"] == vm]
        assert [r["intent"]["actor"] for r in records] == ["run@elsewhere"] * 2
        assert all(r["lastFailure"] is None for r in records)

        # the other actor ends its move: the source undefined, the VM started on the target
        dom.undefine()
        dst.lookupByName(vm).create()
    finally:
        src.close()
        dst.close()
    assert assert_sound(own_lab)[vm] == target
