"""Workload guests on the lab: the load they make as libvirt measures it, what it does to live
migrations, and the lab's Prometheus watching them.

One lab for the module (2 hosts; web-1, web-2 and web-3 start on kvm-01), with metrics: its
guests boot once. Tests move VMs, so each one finds where its VM runs now.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.adapters import lab as lab_api
from reconciler.adapters.lab import Lab
from reconciler.cli import main
from tests.lab_fixtures import start_lab_or_skip, stop_and_check

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.lab

WORKLOAD = """\
defaults: {cpu: 0, dirty: 0, wss: 48}
vms:
  web-1: {cpu: 60}
"""
BURNER, WRITER, IDLE = "web-1", "web-2", "web-3"
MIB = 1 << 20


@pytest.fixture(scope="module")
def guests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    folder = tmp_path_factory.mktemp("workload")
    (folder / "workload.yaml").write_text(WORKLOAD)
    directory = folder / "lab"
    started = start_lab_or_skip(
        directory,
        hosts=2,
        vms=3,
        workload=True,
        workload_file=folder / "workload.yaml",
        metrics=True,
    )
    yield started
    stop_and_check(directory)


@contextlib.contextmanager
def connections(lab: Lab) -> Iterator[dict[str, Any]]:
    conns = {h.name: libvirt.open(h.uri) for h in lab.hosts}
    try:
        yield conns
    finally:
        for conn in conns.values():
            conn.close()


def running(conns: dict[str, Any], vm: str) -> tuple[str, Any]:
    """The host that runs ``vm`` now, and the domain there."""
    for name, conn in conns.items():
        with contextlib.suppress(libvirt.libvirtError):
            dom = conn.lookupByName(vm)
            if dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING:
                return name, dom
    raise AssertionError(f"no lab host runs {vm}")


def cpu_share(conns: dict[str, Any], vm: str, seconds: float) -> float:
    """Cores ``vm`` used over ``seconds``, from libvirt's cpu.time (nanoseconds of CPU)."""
    return measure(conns, vm, seconds)[0]


def _waited(lab: Lab, host: str, vm: str) -> int:
    """Nanoseconds the threads of ``vm``'s QEMU have spent ready to run but waiting for a CPU
    of this machine (the scheduler's statistics)."""
    pidfile = Path(lab.host(host).path) / "run" / "qemu" / f"{vm}.pid"
    total = 0
    for task in Path(f"/proc/{pidfile.read_text().strip()}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[1])
    return total


def measure(
    conns: dict[str, Any], vm: str, seconds: float, lab: Lab | None = None
) -> tuple[float, float]:
    """Cores ``vm`` used over ``seconds`` (libvirt's cpu.time), and the share of that time its
    QEMU waited for a CPU this machine did not have free (0 without ``lab``)."""

    def sample() -> tuple[int, int, float]:
        host, dom = running(conns, vm)
        ((_, stats),) = dom.connect().domainListGetStats([dom], libvirt.VIR_DOMAIN_STATS_CPU_TOTAL)
        waited = _waited(lab, host, vm) if lab else 0
        return int(stats["cpu.time"]), waited, time.monotonic()

    # libvirt's first cpu.time for a domain just booted runs about half a second of CPU behind
    # (the next reading has caught up): a window that starts there shows a share too high
    sample()
    used0, waited0, t0 = sample()
    time.sleep(seconds)
    used1, waited1, t1 = sample()
    return (used1 - used0) / 1e9 / (t1 - t0), (waited1 - waited0) / 1e9 / (t1 - t0)


def skip_if_starved(waited: float, what: str) -> None:
    """Skip, saying so, when the guest's QEMU waited for a CPU more than a tenth of the time:
    the machine had not the CPU to give, so the guest's figure says nothing of the guest."""
    if waited > 0.1:
        pytest.skip(
            f"{what}, but this machine was too busy to judge: the guest's QEMU waited "
            f"{waited:.0%} of the time for a CPU"
        )


def migrate(conns: dict[str, Any], vm: str, **params: Any) -> dict[str, Any]:
    """Live-migrate ``vm`` to the other host; the completed job's statistics on the target."""
    source, dom = running(conns, vm)
    (target,) = set(conns) - {source}
    typed = {
        libvirt.VIR_MIGRATE_PARAM_URI: "tcp://127.0.0.1",
        libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS: "127.0.0.1",
        **params,
    }
    flags = libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
    moved = dom.migrate3(conns[target], typed, flags | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE)
    stats: dict[str, Any] = moved.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    return stats


def test_a_guest_burns_the_share_it_is_told(guests: Lab) -> None:
    with connections(guests) as conns:
        share, waited = measure(conns, BURNER, 5.0, guests)
    print(f"{BURNER} set to 60% used {share:.3f} of a core; its QEMU waited {waited:.3f}")
    if share < 0.55:  # too little can be the machine's doing; too much is the guest's
        skip_if_starved(waited, f"{BURNER} set to 60% used {share:.3f} of a core")
    assert 0.55 <= share <= 0.65, f"{BURNER} set to 60% used {share:.3f} of a core"


def test_a_change_of_load_shows_within_10_s(guests: Lab) -> None:
    directory = Path(guests.dir)
    with connections(guests) as conns:
        assert cpu_share(conns, IDLE, 1.0) < 0.25
        began = time.monotonic()
        try:
            answer = lab_api.set_load(directory, IDLE, {"cpu": 80})
            assert answer.workload.cpu == 80
            while (share := cpu_share(conns, IDLE, 1.0)) < 0.5:
                if time.monotonic() - began > 10:
                    _, waited = measure(conns, IDLE, 1.0, guests)
                    skip_if_starved(waited, f"{IDLE} set to 80% used {share:.2f} after 10 s")
                    pytest.fail(f"{IDLE} set to 80% still used {share:.2f} after 10 s")
        finally:
            lab_api.set_load(directory, IDLE, {"cpu": 0})
        cooled = time.monotonic()
        while (share := cpu_share(conns, IDLE, 1.0)) > 0.25:
            assert time.monotonic() - cooled < 10, f"{IDLE} still at {share:.2f} after 10 s"
    status = lab_api.lab_status(Path(guests.dir))
    assert {v.name: v.workload for v in status.vms}[IDLE] == "cpu 0%"


def test_a_guest_writing_memory_makes_its_migration_move_more(guests: Lab) -> None:
    directory = Path(guests.dir)
    limit = {libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: 64}  # MiB/s: the same pace on any machine
    with connections(guests) as conns:
        lab_api.set_load(directory, WRITER, {"dirty": 0})
        idle = migrate(conns, WRITER, **limit)
        lab_api.set_load(directory, WRITER, {"dirty": 16})
        try:
            time.sleep(1.0)
            busy = migrate(conns, WRITER, **limit)
        finally:
            lab_api.set_load(directory, WRITER, {"dirty": 0})
    print(
        f"moved {idle['memory_processed'] / MIB:.1f} MiB idle in {idle['memory_iteration']} "
        f"passes, {busy['memory_processed'] / MIB:.1f} MiB writing 16 MiB/s in "
        f"{busy['memory_iteration']}"
    )
    assert busy["memory_processed"] > idle["memory_processed"] + 8 * MIB
    assert busy["memory_iteration"] > idle["memory_iteration"]


def test_a_limited_migration_of_a_faster_writer_does_not_converge(guests: Lab) -> None:
    """16 MiB/s allowed, 64 MiB/s written over 48 MiB: each pass leaves more to send than the
    300 ms of downtime QEMU allows would carry, so pass follows pass and none is the last."""
    directory = Path(guests.dir)
    bandwidth = 16
    lab_api.set_load(directory, WRITER, {"dirty": 64})
    outcome: list[BaseException | None] = []
    with connections(guests) as conns:
        source, dom = running(conns, WRITER)

        def move() -> None:
            try:
                migrate(conns, WRITER, **{libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: bandwidth})
                outcome.append(None)
            except libvirt.libvirtError as err:
                outcome.append(err)

        mover = threading.Thread(target=move)
        mover.start()
        try:
            seen: list[dict[str, Any]] = []
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and not outcome:
                stats = dom.jobStats()
                if stats.get("memory_iteration", 0) >= 2:
                    seen.append(stats)
                if len(seen) >= 8:
                    break
                time.sleep(0.5)
            assert not outcome, f"the migration ended: {outcome}"
            assert len(seen) >= 8, "the migration never got past its first pass"
            floor = bandwidth * MIB * 0.3  # what 300 ms of downtime carry: QEMU's last pass
            # within a pass what is left falls to near nothing at its end, as it is sent; what
            # the guest wrote meanwhile is what the next pass starts with: far above the floor
            starts = [
                b["memory_remaining"]
                for a, b in itertools.pairwise(seen)
                if b["memory_iteration"] > a["memory_iteration"]
            ]
            assert starts, seen
            assert min(starts) > floor, seen
            assert max(s["memory_iteration"] for s in seen) >= 3, seen
        finally:
            with contextlib.suppress(libvirt.libvirtError):
                dom.abortJob()
            mover.join(30)
            lab_api.set_load(directory, WRITER, {"dirty": 0})
        assert isinstance(outcome[0], libvirt.libvirtError), "an aborted migration fails"
        assert running(conns, WRITER)[0] == source, "the guest stays where it was"


def _query(lab: Lab, promql: str) -> list[dict[str, Any]]:
    url = lab_api.prometheus_url(lab)
    assert url is not None
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5.0)
    answer.raise_for_status()
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


def _placed(lab: Lab, promql: str) -> set[tuple[str, str]]:
    return {(r["metric"]["domain"], r["metric"]["host"]) for r in _query(lab, promql)}


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(1.0)


RATE = "rate(libvirt_domain_info_cpu_time_seconds_total[30s])"


def test_prometheus_sees_every_guest_on_its_host(guests: Lab) -> None:
    with connections(guests) as conns:
        where = {(vm.name, running(conns, vm.name)[0]) for vm in guests.vms}
    _wait(lambda: where <= _placed(guests, RATE), 30, f"{RATE} of every VM")
    rates = {r["metric"]["domain"]: float(r["value"][1]) for r in _query(guests, RATE)}
    assert all(rates[vm.name] > 0 for vm in guests.vms), rates


def test_the_series_follows_a_guest_that_migrates(guests: Lab) -> None:
    total = f"libvirt_domain_info_cpu_time_seconds_total{{domain='{BURNER}'}}"
    with connections(guests) as conns:
        _wait(lambda: _placed(guests, total), 30, f"a sample of {BURNER}")
        migrate(conns, BURNER)
        now = running(conns, BURNER)[0]
    # the latest sample names the new host (the old host's series ends with a stale marker)
    _wait(lambda: _placed(guests, total) == {(BURNER, now)}, 30, f"{BURNER} on {now}")
    _wait(lambda: (BURNER, now) in _placed(guests, RATE), 30, f"the rate of {BURNER} on {now}")


def test_lab_status_and_load_commands(guests: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    directory = guests.dir
    assert main(["lab", "status", "--dir", directory, "--format", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [(h["name"], h["uri"]) for h in status["hosts"]] == [
        (h.name, h.uri) for h in guests.hosts
    ]
    assert status["prometheus"] == lab_api.prometheus_url(guests)
    assert httpx.get(f"{status['prometheus']}/-/ready", timeout=5.0).status_code == 200
    try:
        assert main(["lab", "load", IDLE, "--spike", "100,5s,60s", "--dir", directory]) == 0
        assert capsys.readouterr().out.startswith(f"{IDLE} on kvm-0")
    finally:
        assert main(["lab", "load", IDLE, "--steady", "--cpu", "0", "--dir", directory]) == 0
    assert capsys.readouterr().out.strip().endswith(": cpu 0%")
    assert main(["lab", "load", IDLE, "--wss", "4000", "--dir", directory]) == 1
    assert "does not fit" in capsys.readouterr().err
    assert main(["lab", "status", "--dir", directory]) == 0
    assert f"Prometheus: {status['prometheus']}" in capsys.readouterr().out
