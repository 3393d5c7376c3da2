"""Dead-host recovery with ``reconciler run`` in apply mode on a real lab: a dead host is fenced
after grace and its VMs run elsewhere exactly once, also when the reconciler is killed during
the recovery; a host that comes back (as a rebooted machine, its old definitions shut off)
keeps no stale copy, and with failback: revert gets its VMs back as drift moves; a fence that
fails restarts nothing.
"Exactly once" is judged from libvirt, never from the reconciler's records."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import libvirt
import pytest

from reconciler.adapters.files.text import rewrite_file
from reconciler.adapters.lab import Lab
from reconciler.adapters.lab.faults import (
    freeze_host,
    kill_host,
    kill_qemus,
    start_host,
    thaw_host,
)
from reconciler.config import load_desired
from tests.e2e.test_apply_cli import assert_settled, assert_sound, domains
from tests.e2e.test_run_lab import metric, start
from tests.net import free_port

pytestmark = pytest.mark.lab

GRACE = 4


def configure(lab: Lab, fence: list[str], *, failback: str = "none") -> None:
    folder = lab.cluster_dir
    rewrite_file(
        folder / "policy.yaml",
        lambda text: text.replace("mode: propose", "mode: apply")
        .replace("interval: 15m", "interval: 2s")
        .split("  windows:")[0]
        + f"  recovery: {{enabled: true, grace: {GRACE}s, failback: {failback}}}\n",
    )
    command = json.dumps(fence)
    rewrite_file(
        folder / "cluster.yaml",
        lambda text: text.replace(
            "  defaults:\n", f"  defaults:\n    fence: {{command: {command}, timeout: 5s}}\n", 1
        ),
    )


def running_elsewhere(lab: Lab, vm: str, dead: str) -> list[str]:
    return [
        h
        for h, _, state in domains_without(lab, dead).get(vm, [])
        if state == libvirt.VIR_DOMAIN_RUNNING
    ]


def domains_without(lab: Lab, dead: str) -> dict[str, list[tuple[str, bool, int]]]:
    """Like ``domains`` over the hosts that answer (the dead host's socket does not)."""
    out: dict[str, list[tuple[str, bool, int]]] = {}
    for host in lab.hosts:
        if host.name == dead:
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


def assert_once_elsewhere(lab: Lab, vms: list[str], dead: str) -> None:
    """Each of ``vms`` runs on exactly one host but ``dead``, and is defined only there."""
    seen = domains_without(lab, dead)
    for vm in vms:
        running = [h for h, _, s in seen[vm] if s == libvirt.VIR_DOMAIN_RUNNING]
        assert len(running) == 1, f"{vm} runs on {running}"
        assert [h for h, persistent, _ in seen[vm] if persistent] == running


def wait(predicate: object, timeout: float, what: str) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - began
        time.sleep(0.2)
    pytest.fail(f"not within {timeout:g} s: {what}")


def healthz(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def busiest(lab: Lab) -> tuple[str, list[str]]:
    where = assert_settled(lab)  # read while `run` acts: a balance move may be under way
    hosts = sorted(set(where.values()), key=lambda h: -list(where.values()).count(h))
    return hosts[0], sorted(vm for vm, h in where.items() if h == hosts[0])


def test_a_dead_host_is_fenced_and_its_vms_run_elsewhere_once_also_after_a_crash(
    own_lab: Lab, tmp_path: Path
) -> None:
    configure(own_lab, ["true"])
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(own_lab.cluster_dir, state, port, log)
    try:
        wait(lambda: (metric(port, "reconciler_reconciles_total") or 0) >= 2, 60, "two rounds")
        dead, vms = busiest(own_lab)
        assert vms
        kill_host(Path(own_lab.dir), dead)
        kill_qemus(Path(own_lab.dir), dead)
        died = time.monotonic()
        # the reconciler dies as soon as the first VM runs elsewhere, and is started again
        wait(lambda: any(running_elsewhere(own_lab, vm, dead) for vm in vms), 60, "a restart")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = start(own_lab.cluster_dir, state, port, log)
        wait(
            lambda: all(running_elsewhere(own_lab, vm, dead) for vm in vms),
            90,
            f"{vms} running elsewhere",
        )
        took = time.monotonic() - died
        print(f"host death to all {len(vms)} VMs running elsewhere: {took:.1f} s (grace {GRACE}s)")
        time.sleep(6)  # more rounds: still once
        assert_once_elsewhere(own_lab, vms, dead)
        # fenced before anything restarted: by the first process (whose metrics died with it)
        # or by the second; the log of both says so
        text = log.read_text()
        assert f"host {dead} fenced" in text
        assert text.index(f"host {dead} fenced") < text.index("restarted ")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        print(log.read_text()[-3000:])


def running(lab: Lab, vm: str) -> list[str]:
    return [h for h, _, s in domains(lab).get(vm, []) if s == libvirt.VIR_DOMAIN_RUNNING]


def on_host(lab: Lab, host: str) -> dict[str, tuple[bool, int]]:
    """VM name -> (defined persistently, state) of every domain on ``host``; a domain undefined
    between the listing and its reading (the reconciler removing a stale copy) is left out."""
    conn = libvirt.open(lab.host(host).uri)
    out: dict[str, tuple[bool, int]] = {}
    try:
        for d in conn.listAllDomains():
            try:
                out[d.name()] = (bool(d.isPersistent()), d.state()[0])
            except libvirt.libvirtError as err:
                if err.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
        return out
    finally:
        conn.close()


def twice(lab: Lab) -> set[str]:
    """VMs running on more than one host."""
    return {
        vm
        for vm, seen in domains(lab).items()
        if sum(state == libvirt.VIR_DOMAIN_RUNNING for _, _, state in seen) > 1
    }


def stale(lab: Lab, host: str, vms: list[str]) -> set[str]:
    """VMs of ``vms`` with a shut-off definition on ``host``."""
    return {
        vm
        for vm, (persistent, state) in on_host(lab, host).items()
        if vm in vms and persistent and state == libvirt.VIR_DOMAIN_SHUTOFF
    }


def watch_twice(lab: Lab, until: object, timeout: float, what: str) -> set[str]:
    """Poll until ``until()``; the VMs seen running on two hosts meanwhile, in two polls in a
    row (one poll may catch a migration ending)."""
    doubled: set[str] = set()
    last: set[str] = set()
    began = time.monotonic()
    while not until():  # type: ignore[operator]
        if time.monotonic() - began > timeout:
            pytest.fail(f"not within {timeout:g} s: {what}")
        now = twice(lab)
        doubled |= now & last
        last = now
        time.sleep(0.1)
    return doubled


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``run``: it lets the moves in flight end, then exits."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def kill_and_recover(lab: Lab, port: int) -> tuple[str, list[str]]:
    """Kill the busiest host (daemon and QEMUs) once two rounds ran; its VMs once they run
    elsewhere."""
    wait(lambda: (metric(port, "reconciler_reconciles_total") or 0) >= 2, 60, "two rounds")
    dead, vms = busiest(lab)
    kill_host(Path(lab.dir), dead)
    kill_qemus(Path(lab.dir), dead)
    wait(
        lambda: all(running_elsewhere(lab, vm, dead) for vm in vms),
        90,
        f"{vms} running elsewhere",
    )
    return dead, vms


@pytest.mark.long
def test_a_returning_host_keeps_no_stale_copy(own_lab: Lab, tmp_path: Path) -> None:
    configure(own_lab, ["true"])
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(own_lab.cluster_dir, state, port, log)
    try:
        dead, vms = kill_and_recover(own_lab, port)
        # the host comes back as a rebooted machine: its old definitions, shut off
        start_host(Path(own_lab.dir), dead)
        kept = on_host(own_lab, dead)
        assert set(vms) <= set(kept), f"{dead} came back without its definitions: {kept}"
        gone = watch_twice(
            own_lab, lambda: not stale(own_lab, dead, vms), 30, f"stale copies on {dead} gone"
        )
        assert gone == set(), "a stale copy was started"
        # more rounds: balance may move VMs to the host again, as migrations, never a start
        later = time.monotonic() + 4
        assert watch_twice(own_lab, lambda: time.monotonic() > later, 10, "rounds") == set()
        stop(proc)
        assert_sound(own_lab)  # defined exactly where each VM runs: no copy left
        assert not stale(own_lab, dead, vms)
    finally:
        stop(proc)
        print(log.read_text()[-3000:])


@pytest.mark.long
def test_failback_revert_moves_the_vms_back_once_the_host_is_back(
    own_lab: Lab, tmp_path: Path
) -> None:
    configure(own_lab, ["true"], failback="revert")
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(own_lab.cluster_dir, state, port, log)
    try:
        dead, vms = kill_and_recover(own_lab, port)
        placement = load_desired(own_lab.cluster_dir).placement.spec.vms
        home = sorted(vm for vm in vms if placement.get(vm) == dead)
        assert home, f"no VM of {dead} has it as its placement ({placement})"
        time.sleep(GRACE)  # rounds while it is away: nothing goes back to a dead host
        start_host(Path(own_lab.dir), dead)
        back = watch_twice(
            own_lab, lambda: all(running(own_lab, vm) == [dead] for vm in home), 60, "failback"
        )
        assert back == set(), "a VM ran twice on its way back"
        time.sleep(4)
        stop(proc)
        where = assert_sound(own_lab)
        assert {vm: where[vm] for vm in home} == dict.fromkeys(home, dead)
        text = log.read_text()
        for vm in home:  # as ordinary drift moves
            assert re.search(rf"succeeded {vm}: \S+ -> {dead}: .*drift: revert", text), vm
    finally:
        stop(proc)
        proc.wait(30)
        print(log.read_text()[-3000:])


@pytest.mark.long
def test_a_fence_that_fails_restarts_nothing_and_says_so(own_lab: Lab, tmp_path: Path) -> None:
    configure(own_lab, ["false"])
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(own_lab.cluster_dir, state, port, log)
    try:
        wait(lambda: (metric(port, "reconciler_reconciles_total") or 0) >= 2, 60, "two rounds")
        hung, vms = busiest(own_lab)
        freeze_host(Path(own_lab.dir), hung)  # it looks dead; its VMs still run
        wait(
            lambda: (metric(port, "reconciler_fence_total", 'result="failed"') or 0) >= 1,
            60,
            "a failed fence",
        )
        # /healthz is written once per round, after the fence counted in it: wait for its end
        wait(lambda: healthz(port)[0] == 503, 30, "/healthz to turn 503")
        code, body = healthz(port)
        assert code == 503
        assert hung in str(body.get("message"))
        time.sleep(GRACE + 4)
        for vm in vms:
            assert running_elsewhere(own_lab, vm, hung) == [], f"{vm} was restarted"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        thaw_host(Path(own_lab.dir), hung)
        print(log.read_text()[-3000:])
    assert_sound(own_lab)
