"""Dead-host recovery with ``reconciler run`` in apply mode on a real lab: a dead host is fenced
after grace and its VMs run elsewhere exactly once, also when the reconciler is killed during
the recovery; a host that comes back keeps no stale copy; a fence that fails restarts nothing.
"Exactly once" is judged from libvirt, never from the reconciler's records."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import libvirt
import pytest

from reconciler.adapters.files.text import rewrite_file
from reconciler.adapters.lab import Lab
from reconciler.adapters.lab.faults import freeze_host, kill_host, start_host, thaw_host
from tests.e2e.test_apply_cli import assert_sound, domains
from tests.e2e.test_run_lab import free_port, metric, start

pytestmark = pytest.mark.lab

GRACE = 4


def configure(lab: Lab, fence: list[str]) -> None:
    folder = lab.cluster_dir
    rewrite_file(
        folder / "policy.yaml",
        lambda text: text.replace("mode: propose", "mode: apply")
        .replace("interval: 15m", "interval: 2s")
        .split("  windows:")[0]
        + f"  recovery: {{enabled: true, grace: {GRACE}s, failback: none}}\n",
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


def kill_qemus(vms: list[str]) -> None:
    """SIGKILL the QEMU of each VM (found by its -name guest=NAME argument)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"qemu-system" in c for c in cmd[:1]) and any(
            c.startswith(f"guest={vm},".encode()) or c == f"guest={vm}".encode()
            for c in cmd
            for vm in vms
        ):
            os.kill(int(pid), signal.SIGKILL)


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
    where = assert_sound(lab)
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
        kill_qemus(vms)
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
        seen = domains_without(own_lab, dead)
        for vm in vms:
            running = [h for h, _, s in seen[vm] if s == libvirt.VIR_DOMAIN_RUNNING]
            assert len(running) == 1, f"{vm} runs on {running}"
            assert [h for h, persistent, _ in seen[vm] if persistent] == running
        # fenced before anything restarted: by the first process (whose metrics died with it)
        # or by the second; the log of both says so
        text = log.read_text()
        assert f"host {dead} fenced" in text
        assert text.index(f"host {dead} fenced") < text.index("restarted ")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        print(log.read_text()[-3000:])


@pytest.mark.xfail(
    reason="on a loaded machine a VM restarted elsewhere can still be paused when checked; "
    "the decision is covered on fakes",
    strict=False,
)
def test_a_returning_host_keeps_no_stale_copy(own_lab: Lab, tmp_path: Path) -> None:
    configure(own_lab, ["true"])
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(own_lab.cluster_dir, state, port, log)
    try:
        wait(lambda: (metric(port, "reconciler_reconciles_total") or 0) >= 2, 60, "two rounds")
        dead, vms = busiest(own_lab)
        kill_host(Path(own_lab.dir), dead)
        kill_qemus(vms)
        wait(
            lambda: all(running_elsewhere(own_lab, vm, dead) for vm in vms),
            90,
            f"{vms} running elsewhere",
        )
        # the host comes back with its old definitions: they go, nothing starts them
        start_host(Path(own_lab.dir), dead)
        wait(
            lambda: not any(h == dead for vm in vms for h, _, _ in domains(own_lab).get(vm, [])),
            30,
            f"stale copies on {dead} undefined",
        )
        time.sleep(4)
        assert_sound(own_lab)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


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
