"""Power saving with ``reconciler run`` in apply mode on a real lab whose hosts have Redfish
BMCs (``lab up --bmc``: sushy-tools' emulator, powering a host off ends its libvirt daemon).

Workload guests idle, then busy: the reconciler empties hosts and powers them off (the BMC
says off, the host's libvirt is gone), then powers one on when the load rises and spreads the
VMs back. ``run`` is killed with SIGKILL as a power-off is asked and as a boot is under way,
and started again. Every look judges from libvirt alone: each VM runs exactly once over the
hosts that answer, none paused, defined exactly where it runs (a VM on a host powered off
would be gone: the BMC ends its QEMU).

Marked ``long`` (the lab CI job's): each BMC fault (refuse, hang, lie) on every BMC, one
after the other, with a run of its own each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.adapters import lab as lab_api
from reconciler.adapters.files.text import rewrite_file
from reconciler.adapters.lab import Lab
from reconciler.adapters.lab.bmc import Fault, bmc_dir, read_env, set_bmc
from reconciler.adapters.power.redfish import RedfishPower
from reconciler.config import load_desired
from reconciler.model.recovery import PowerState
from tests.lab_fixtures import migrate_plainly, workload_lab
from tests.net import free_port

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
VMS = ("web-1", "web-2", "web-3")
WORKLOAD = "defaults: {cpu: 0, dirty: 0, wss: 8}\nvms: {}\n"
POLICY = """\
apiVersion: placement/v1alpha1
kind: BalancePolicy
metadata: {name: lab}
spec:
  mode: apply
  interval: 2s
  basis: used
  threshold: 10
  holdRounds: 1
  minUptime: 0s
  cooldown: 5s
  batch: 2
  load: {source: samples, window: 10s, statistic: mean, sampleEvery: 2s}
  power:
    mode: apply
    band: {low: 5, high: 30}
    powerOffAfter: 4s
    powerOnAfter: 4s
    minSpareHosts: 0
"""
EMPTY_RULES = "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: lab}\n"
EMPTY_RULES += "spec:\n  rules: []\n"
NO_PLACEMENT = "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: lab}\n"
NO_PLACEMENT += "spec:\n  vms: {}\n"


@pytest.fixture
def bmc_lab(tmp_path: Path) -> Iterator[Lab]:
    with workload_lab(tmp_path, WORKLOAD, hosts=3, vms=len(VMS), bmc=True, boot_seconds=3) as lab:
        folder = lab.cluster_dir
        (folder / "policy.yaml").write_text(POLICY)
        (folder / "rules.yaml").write_text(EMPTY_RULES)
        (folder / "placement.yaml").write_text(NO_PLACEMENT)
        rewrite_file(
            folder / "cluster.yaml", lambda t: t.replace("bootTimeout: 2m", "bootTimeout: 40s")
        )
        try:
            yield lab
        finally:  # no BMC left hanging or refusing while the lab is stopped
            for host in lab.hosts:
                set_bmc(Path(lab.dir), host.name, fault="none")


# --- what libvirt and the BMCs say ---------------------------------------------------------


def hosts_up(lab: Lab) -> list[str]:
    return [h.name for h in lab_api.lab_status(Path(lab.dir)).hosts if h.up]


def bmc_states(lab: Lab) -> dict[str, PowerState]:
    env = read_env(Path(lab.dir))
    desired = load_desired(lab.cluster_dir)
    driver = RedfishPower(env)
    return {
        h.name: driver.power_state(h.name, h.power).state
        for h in desired.cluster.spec.hosts
        if h.power is not None
    }


def look(lab: Lab) -> dict[str, str]:
    """Every VM runs exactly once over the hosts that answer, none paused, each defined
    exactly where it runs (a migration in flight is waited out); VM -> host."""
    deadline = time.monotonic() + 30
    while True:
        seen: dict[str, list[tuple[str, bool, int]]] = {}
        busy = False
        for name in hosts_up(lab):
            try:
                conn = libvirt.open(lab.host(name).uri)
            except libvirt.libvirtError:
                continue  # powered off between the two looks
            try:
                for dom in conn.listAllDomains():
                    try:
                        state = dom.state()[0]
                        busy |= dom.jobInfo()[0] != libvirt.VIR_DOMAIN_JOB_NONE
                        seen.setdefault(dom.name(), []).append(
                            (name, bool(dom.isPersistent()), state)
                        )
                    except libvirt.libvirtError:
                        busy = True  # it left while we looked
            finally:
                conn.close()
        try:
            where: dict[str, str] = {}
            for vm in VMS:
                running = [h for h, _, s in seen.get(vm, []) if s == libvirt.VIR_DOMAIN_RUNNING]
                paused = [h for h, _, s in seen.get(vm, []) if s == libvirt.VIR_DOMAIN_PAUSED]
                defined = [h for h, persistent, _ in seen.get(vm, []) if persistent]
                assert len(running) == 1, f"{vm} runs on {running} (hosts up: {hosts_up(lab)})"
                assert not paused, f"{vm} is paused on {paused}"
                assert defined == running, f"{vm} is defined on {defined}, runs on {running}"
                where[vm] = running[0]
            return where
        except AssertionError:
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def watch(
    lab: Lab,
    until: Callable[[], bool],
    timeout: float,
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
) -> None:
    """Look (``look``) every moment until ``until`` holds; fail after ``timeout``, or when
    ``proc`` (run) has ended."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        look(lab)
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"run ended ({proc.returncode}) before {what}")
        if until():
            return
        time.sleep(0.3)
    pytest.fail(f"not within {timeout:g} s: {what}")


def resets(lab: Lab) -> int:
    """Power resets the lab's BMCs were asked for so far (their access logs)."""
    return sum(
        (bmc_dir(h) / "bmc.log").read_text(errors="replace").count("ComputerSystem.Reset")
        for h in lab.hosts
    )


# --- run --------------------------------------------------------------------------------------


def start_run(lab: Lab, state: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **read_env(Path(lab.dir)), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "reconciler", "run", str(lab.cluster_dir), "--state-dir",
            str(state), "--listen", f"127.0.0.1:{free_port()}"]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            kill(proc)


def set_cpu(lab: Lab, percent: int) -> None:
    for vm in VMS:
        lab_api.set_load(Path(lab.dir), vm, {"cpu": percent})


def test_hosts_are_emptied_and_powered_off_then_on_again_with_run_killed_in_between(
    bmc_lab: Lab, tmp_path: Path
) -> None:
    lab = bmc_lab
    state, log = tmp_path / "state", tmp_path / "run.log"
    # one VM per host: emptying a host takes live migrations
    migrate_plainly(lab, "web-2", "kvm-01", "kvm-02")
    migrate_plainly(lab, "web-3", "kvm-01", "kvm-03")
    assert look(lab) == {"web-1": "kvm-01", "web-2": "kvm-02", "web-3": "kvm-03"}
    proc = start_run(lab, state, log)
    try:
        # the first power-off asked: run dies while the BMC shuts the host down
        for host in lab.hosts:
            set_bmc(Path(lab.dir), host.name, shutdown_seconds=8)
        watch(lab, lambda: resets(lab) >= 1, 120, "a first power-off", proc)
        kill(proc)
        proc = start_run(lab, state, log)
        watch(lab, lambda: len(hosts_up(lab)) == 1, 120, "two hosts powered off", proc)
        off = [h for h, s in bmc_states(lab).items() if s is PowerState.OFF]
        assert len(off) == 2, f"the BMCs say off: {off}"
        (alone,) = hosts_up(lab)
        assert set(look(lab).values()) == {alone}
        # the load rises: a host is powered on; run dies during its boot
        asked = resets(lab)
        set_cpu(lab, 70)
        watch(lab, lambda: resets(lab) > asked, 90, "a power-on", proc)
        kill(proc)
        proc = start_run(lab, state, log)
        watch(lab, lambda: len(hosts_up(lab)) >= 2, 90, "a host back in service", proc)
        watch(lab, lambda: len(set(look(lab).values())) >= 2, 120, "VMs spread back", proc)
        on = [h for h, s in bmc_states(lab).items() if s is PowerState.ON]
        assert len(on) >= 2
    finally:
        stop(proc)
        print(log.read_text(errors="replace")[-6000:])
    look(lab)


def said_since(log: Path, offset: int, text: str) -> bool:
    return text in log.read_text(errors="replace")[offset:]


FAULTS: tuple[tuple[Fault, str], ...] = (
    ("refuse", "answered 500 to the reset GracefulShutdown"),
    ("hang", "did not answer within 3s"),
    ("lie", "its BMC says off but libvirt still answers"),
)


@pytest.mark.long
def test_a_bmc_that_refuses_hangs_or_lies_gets_a_clear_error_and_harms_no_vm(
    bmc_lab: Lab, tmp_path: Path
) -> None:
    """Each fault on every BMC, with a fresh state (a host whose power-off failed is not
    emptied again for an hour): the host the reconciler chose stays in service, named."""
    lab = bmc_lab
    rewrite_file(
        lab.cluster_dir / "cluster.yaml", lambda t: t.replace("timeout: 10s", "timeout: 3s")
    )
    migrate_plainly(lab, "web-2", "kvm-01", "kvm-02")
    migrate_plainly(lab, "web-3", "kvm-01", "kvm-03")
    password = read_env(Path(lab.dir))["LAB_BMC_PASSWORD"]
    for fault, said in FAULTS:
        for host in lab.hosts:
            set_bmc(Path(lab.dir), host.name, fault=fault)
        state, log = tmp_path / f"state-{fault}", tmp_path / f"run-{fault}.log"
        proc = start_run(lab, state, log)

        def refused(log: Path = log) -> bool:
            return said_since(log, 0, "could not be powered off")

        try:
            watch(lab, refused, 120, fault, proc)
            text = log.read_text(errors="replace")
            assert said in text, f"{fault}: {text[-3000:]}"
            assert sorted(hosts_up(lab)) == ["kvm-01", "kvm-02", "kvm-03"], fault
            assert password not in text
        finally:
            stop(proc)
        look(lab)
