"""A cascade of host failures on a real 4-host lab with ``reconciler run`` in apply mode: a
host dies and is fenced; its VMs are restarted; right after, the host that received the first
of them hangs (its libvirtd stops answering, its QEMUs run on) and its fence fails. Nothing of
that host, the VMs just restarted on it included, is started anywhere else until its fence
works; then each VM is started once. Judged from libvirt and the QEMU processes, never from
the reconciler's records."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from reconciler.adapters.lab import Lab
from reconciler.adapters.lab.faults import freeze_host, kill_host, kill_qemus
from tests.e2e.test_recovery_lab import GRACE, configure, wait
from tests.e2e.test_run_lab import metric, start
from tests.lab_fixtures import start_lab_or_skip, stop_and_check
from tests.net import free_port

pytestmark = [pytest.mark.lab, pytest.mark.long]

FENCE = Path(__file__).with_name("lab_fence.py")


def answering(lab: Lab, down: set[str]) -> dict[str, list[tuple[str, bool, int]]]:
    """VM name -> (host, persistent, state) on every host but ``down``."""
    out: dict[str, list[tuple[str, bool, int]]] = {}
    for host in lab.hosts:
        if host.name in down:
            continue
        conn = libvirt.open(host.uri)
        try:
            for dom in conn.listAllDomains():
                out.setdefault(dom.name(), []).append(
                    (host.name, bool(dom.isPersistent()), dom.state()[0])
                )
        finally:
            conn.close()
    return out


def runs_on(lab: Lab, down: set[str]) -> dict[str, list[str]]:
    return {
        vm: [h for h, _, s in seen if s == libvirt.VIR_DOMAIN_RUNNING]
        for vm, seen in answering(lab, down).items()
    }


def qemu_alive(lab: Lab, host: str, vm: str) -> bool:
    """The QEMU of ``vm`` started by ``host``'s daemon still runs (read from its pid file, so
    it works on a host whose libvirtd hangs)."""
    pidfile = Path(lab.host(host).path) / "run" / "qemu" / f"{vm}.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    return Path(f"/proc/{pid}").exists()


@pytest.fixture
def four_hosts(tmp_path: Path) -> Iterator[Lab]:
    directory = tmp_path / "lab"
    started = start_lab_or_skip(directory, hosts=4, vms=6)
    try:
        yield started
    finally:
        stop_and_check(directory)


def test_a_host_that_hangs_after_receiving_restarted_vms_keeps_them_until_it_is_fenced(
    four_hosts: Lab, tmp_path: Path
) -> None:
    lab = four_hosts
    failing = tmp_path / "failing-bmcs"
    failing.write_text("")
    configure(lab, [sys.executable, str(FENCE), str(lab.dir), str(failing), "{host}"])
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(lab.cluster_dir, state, port, log)
    try:
        wait(lambda: (metric(port, "reconciler_reconciles_total") or 0) >= 2, 60, "two rounds")
        before = runs_on(lab, set())
        counts: dict[str, int] = {}
        for hosts in before.values():
            counts[hosts[0]] = counts.get(hosts[0], 0) + 1
        dead = max(sorted(counts), key=lambda h: counts[h])
        vms = sorted(vm for vm, hosts in before.items() if hosts == [dead])
        kill_host(Path(lab.dir), dead)
        kill_qemus(Path(lab.dir), dead)
        # the first VM of the dead host seen running elsewhere: its host hangs at once
        target: list[str] = []

        def restarted() -> bool:
            now = runs_on(lab, {dead})
            target.extend(h for vm in vms for h in now.get(vm, []))
            return bool(target)

        wait(restarted, 60, "a restart")
        hung = target[0]
        failing.write_text(hung + "\n")
        freeze_host(Path(lab.dir), hung)
        on_hung = [vm for vm in before if qemu_alive(lab, hung, vm)]
        assert on_hung
        wait(
            lambda: (metric(port, "reconciler_fence_total", 'result="failed"') or 0) >= 1,
            60,
            f"the fence of {hung} to fail",
        )
        time.sleep(3 * GRACE)  # rounds: what ran on the hung host runs nowhere else
        now = runs_on(lab, {dead, hung})
        for vm in on_hung:
            assert now.get(vm, []) == [], f"{vm} runs on {hung} (hung) and on {now.get(vm)}"
            assert qemu_alive(lab, hung, vm), f"{vm}'s QEMU on {hung} ended"
        # its BMC answers again: the fence switches it off, its VMs start elsewhere, once
        failing.write_text("")
        wait(
            lambda: all(len(runs_on(lab, {dead, hung}).get(vm, [])) == 1 for vm in before),
            120,
            "every VM running once on the two hosts left",
        )
        time.sleep(2 * GRACE)  # more rounds: still once
        seen = answering(lab, {dead, hung})
        for vm in before:
            running = [h for h, _, s in seen[vm] if s == libvirt.VIR_DOMAIN_RUNNING]
            assert len(running) == 1, f"{vm} runs on {running}"
            assert [h for h, persistent, _ in seen[vm] if persistent] == running, seen[vm]
            assert not qemu_alive(lab, hung, vm)
        text = log.read_text()
        assert f"host {hung} fenced" in text
        print(json.dumps({"dead": dead, "hung": hung, "held": on_hung}))
    finally:
        proc.terminate()
        proc.wait(30)
        print(log.read_text()[-4000:])
