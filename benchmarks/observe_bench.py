"""How long observing a cluster takes, against a plain libvirt loop measured in the same run.

Run: ``.venv/bin/python benchmarks/observe_bench.py [--hosts 1000] [--vms 27] [--rounds 3]
[--no-lab] [--no-busy] [--no-hung] [--no-memory]``

Scenarios:
- ``baseline``: a plain single-thread libvirt-python loop over the test-driver hosts: one open,
  ``getInfo``, ``listAllDomains`` and ``XMLDesc`` + ``info`` per VM. Rounds alternate with the
  observer's, so both see the same machine load; the ratio is per round (median printed).
- ``test-driver``: ``observe_cluster`` of HOSTS libvirt test-driver hosts with VMS VMs each
  (in-process driver, no daemons), default settings (sample interval 0.5 s).
- ``one core``: the same pair of rounds with this process and its workers pinned to one CPU,
  as when other work holds the other core: the observer's wall time then follows its CPU.
- ``busy``: the same while 2 processes per core spin, with a call and connect timeout of 3 s:
  no healthy host may be reported unreachable.
- ``+ hung``: a share of the hosts plus three whose socket accepts and never answers; each is
  cut off at the connect timeout (2 s), all at the same time.
- ``lab`` (root, libvirtd and QEMU needed): the real 3-host lab with 8 VMs.
- ``lab + slow``: the lab with kvm-01 behind a proxy that delays every request by 50 ms.
- ``memory``: the loop and the observer of the same hosts, each in a fresh process: peak
  resident memory of the process (and of the observer's worker processes), what it holds
  after with the snapshot alive, and the start. Bound: the observer's peak above its start at
  most ``MEMORY_BOUND`` times what the snapshot it returns holds (its models, and little else
  at any moment).

For each: wall time, the slowest host's time and the sum of all hosts' times (time spent
waiting for the host's answers), and libvirt calls per host.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt

from reconciler.adapters import lab as libvirt_lab
from reconciler.adapters.libvirt.observer import observe_cluster
from reconciler.errors import LabError
from reconciler.model.cluster import Cluster, ClusterSpec, Host
from reconciler.model.snapshot import Snapshot

TARGET_RATIO = 1.0
"""The observer's wall time over the loop's, median of the rounds."""
MEMORY_BOUND = 1.10
"""The observer's peak above its start over what its snapshot holds above the start."""
MIB = 1024**2


@contextlib.contextmanager
def silent_socket(path: Path) -> Iterator[str]:
    """A libvirt URI whose socket accepts connections and never answers."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    try:
        yield f"qemu+unix:///system?socket={path}"
    finally:
        server.close()


def _pump(src: socket.socket, dst: socket.socket, delay: float) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if delay:
                time.sleep(delay)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def slow_proxy(upstream: Path, path: Path, delay: float) -> Iterator[str]:
    """A libvirt URI that reaches ``upstream`` with every request delayed by ``delay`` s."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                return
            backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            backend.connect(str(upstream))
            threading.Thread(target=_pump, args=(client, backend, delay), daemon=True).start()
            threading.Thread(target=_pump, args=(backend, client, 0.0), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"qemu+unix:///system?socket={path}"
    finally:
        stop.set()
        server.close()


def with_hosts(cluster: Cluster, extra: list[Host]) -> Cluster:
    spec = ClusterSpec(defaults=cluster.spec.defaults, hosts=[*cluster.spec.hosts, *extra])
    return cluster.model_copy(update={"spec": spec})


def replace_uri(cluster: Cluster, name: str, uri: str) -> Cluster:
    hosts = [h.model_copy(update={"uri": uri}) if h.name == name else h for h in cluster.spec.hosts]
    spec = ClusterSpec(defaults=cluster.spec.defaults, hosts=hosts)
    return cluster.model_copy(update={"spec": spec})


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the observer's workers)."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run(label: str, cluster: Cluster, **kwargs: float) -> tuple[list[str], float]:
    began, cpu = time.perf_counter(), cpu_seconds()
    snap: Snapshot = observe_cluster(cluster, **kwargs)  # type: ignore[arg-type]
    wall = time.perf_counter() - began
    cpu = cpu_seconds() - cpu
    reachable = [h for h in snap.hosts if h.reachable]
    calls = [h.libvirt_calls for h in reachable] or [0]
    slowest = max(h.observe_seconds for h in snap.hosts)
    total = sum(h.observe_seconds for h in snap.hosts)
    row = [
        label,
        f"{len(reachable)}/{len(snap.hosts)}",
        str(len(snap.vms)),
        f"{wall:.2f}",
        f"{cpu:.2f}",
        f"{slowest:.2f}",
        f"{total:.2f}",
        f"{min(calls)}-{max(calls)}",
    ]
    return row, wall


def baseline(cluster: Cluster) -> tuple[float, float, int]:
    """The plain loop the observer is measured against: (wall s, CPU s, VMs seen)."""
    libvirt.registerErrorHandler(lambda *_: None, None)
    began, cpu = time.perf_counter(), cpu_seconds()
    vms = 0
    for host in cluster.spec.hosts:
        conn = libvirt.open(host.uri)
        conn.getInfo()
        for dom in conn.listAllDomains(0):
            dom.XMLDesc(0)
            dom.info()
            vms += 1
        conn.close()
    return time.perf_counter() - began, cpu_seconds() - cpu, vms


@contextlib.contextmanager
def pinned_to_one_cpu() -> Iterator[int]:
    """This process (and the workers it starts) on one CPU for the duration."""
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)


def one_core(rows: list[list[str]], cluster: Cluster, rounds: int, size: str) -> list[str]:
    """Baseline/observer pairs with both on one CPU: the ratio when only one core is free."""
    ratios = []
    with pinned_to_one_cpu() as cpu:
        for _ in range(rounds):
            plain, plain_cpu, vms = baseline(cluster)
            rows.append(
                [f"baseline loop, CPU {cpu} only", "", str(vms), f"{plain:.2f}", f"{plain_cpu:.2f}"]
                + [""] * 3
            )
            row, wall = run(f"test-driver {size}, CPU {cpu} only", cluster)
            rows.append(row)
            ratios.append(wall / plain)
    rounds_text = ", ".join(f"{r:.2f}x" for r in ratios)
    return [
        f"one CPU: observer/baseline per round {rounds_text},"
        f" median {statistics.median(ratios):.2f}x"
    ]


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


@contextlib.contextmanager
def busy_machine(per_core: int = 2) -> Iterator[int]:
    """``per_core`` spinning processes per CPU core for the duration."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    procs = [
        ctx.Process(target=_spin, args=(stop,), daemon=True)
        for _ in range(per_core * (os.cpu_count() or 1))
    ]
    for proc in procs:
        proc.start()
    try:
        yield len(procs)
    finally:
        stop.set()
        for proc in procs:
            proc.join()


def _vm_kib(key: str) -> int:
    """A ``/proc/self/status`` figure in KiB (VmRSS: now, VmHWM: the peak so far)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def memory_one(which: str, cluster_json: Path) -> dict[str, float]:
    """Run in a fresh process: the loop or the observer once, its memory in MiB."""
    cluster = Cluster.model_validate_json(cluster_json.read_text())
    start = _vm_kib("VmRSS") / 1024
    if which == "loop":
        vms = baseline(cluster)[2]
    else:
        snap = observe_cluster(cluster)
        vms = len(snap.vms)
    held = _vm_kib("VmRSS") / 1024  # the snapshot still alive
    peak = _vm_kib("VmHWM") / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"start": start, "peak": peak, "held": held, "workers": workers, "vms": vms}


def memory(cluster_json: Path, hosts: int, vms: int) -> tuple[list[list[str]], list[str]]:
    """The loop's and the observer's memory, each in a process of its own."""
    rows, notes = [], []
    figures = {}
    for which in ("loop", "observer"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-one", which]
        out = subprocess.run(
            [*cmd, str(cluster_json)], capture_output=True, text=True, check=True
        ).stdout
        figures[which] = m = json.loads(out.strip().splitlines()[-1])
        rows.append(
            [
                f"memory: {which} {hosts}x{vms}",
                f"start {m['start']:.0f}",
                f"peak {m['peak']:.0f}",
                f"held {m['held']:.0f}",
                f"workers {m['workers']:.0f}" if which == "observer" else "",
            ]
        )
    obs = figures["observer"]
    kept = obs["held"] - obs["start"]
    ratio = (obs["peak"] - obs["start"]) / kept if kept > 0 else float("inf")
    per_vm = (obs["peak"] - obs["start"]) * 1024 / max(1, obs["vms"])
    notes.append(
        f"memory (MiB): observer peak {obs['peak']:.0f} (start {obs['start']:.0f}, snapshot held "
        f"{obs['held']:.0f}, workers' peak {obs['workers']:.0f}), loop peak "
        f"{figures['loop']['peak']:.0f}; {per_vm:.1f} KiB a VM at the peak; peak/held above "
        f"the start {ratio:.2f} (bound <= {MEMORY_BOUND:.2f}) -> "
        f"{'PASS' if ratio <= MEMORY_BOUND else 'FAIL'}"
    )
    return rows, notes


def hung_hosts(cluster: Cluster, base: Path) -> list[str]:
    """200 of the hosts and 3 that accept a connection and never answer."""
    share = ClusterSpec(hosts=cluster.spec.hosts[:200])
    small = cluster.model_copy(update={"spec": share})
    with contextlib.ExitStack() as stack:
        hung = [
            Host(name=f"hung-{i}", uri=stack.enter_context(silent_socket(base / f"hung{i}")))
            for i in range(3)
        ]
        return run(
            f"  {len(share.hosts)} hosts + 3 hung (connect timeout 2s)",
            with_hosts(small, hung),
            connect_timeout=2,
        )[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--vms", type=int, default=27, help="VMs per test-driver host")
    parser.add_argument("--rounds", type=int, default=3, help="baseline/observer pairs")
    parser.add_argument("--no-lab", action="store_true", help="skip the real-lab scenarios")
    parser.add_argument(
        "--one-core-rounds", type=int, default=3, help="baseline/observer pairs on one CPU"
    )
    parser.add_argument("--no-busy", action="store_true", help="skip the busy-machine run")
    parser.add_argument("--no-hung", action="store_true", help="skip the hung-hosts run")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory runs")
    parser.add_argument("--memory-one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_one:
        print(json.dumps(memory_one(args.memory_one[0], Path(args.memory_one[1]))))
        return 0
    rows: list[list[str]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="obs-bench-") as tmp:
        base = Path(tmp)
        cluster = libvirt_lab.write_node_files(base / "nodes", args.hosts, args.vms)
        cluster_json = base / "cluster.json"
        cluster_json.write_text(cluster.model_dump_json())
        ratios = []
        for i in range(args.rounds):
            plain, plain_cpu, vms = baseline(cluster)
            rows.append(
                ["baseline loop", "", str(vms), f"{plain:.2f}", f"{plain_cpu:.2f}", "", "", ""]
            )
            row, wall = run(f"test-driver {args.hosts}x{args.vms}", cluster)
            rows.append(row)
            ratios.append(wall / plain)
            notes.append(f"round {i + 1}: observer/baseline {wall / plain:.2f}x")
        median = statistics.median(ratios)
        notes.append(
            f"observer/baseline, median of {args.rounds} rounds: {median:.2f}x"
            f" (target <= {TARGET_RATIO:.1f}x) -> {'PASS' if median <= TARGET_RATIO else 'FAIL'}"
        )
        if args.one_core_rounds:
            notes.extend(one_core(rows, cluster, args.one_core_rounds, f"{args.hosts}x{args.vms}"))
        if not args.no_memory:
            mem_rows, mem_notes = memory(cluster_json, args.hosts, args.vms)
            rows.extend(r + [""] * 3 for r in mem_rows)
            notes.extend(mem_notes)
        if not args.no_busy:
            with busy_machine() as spinners:
                row, _ = run(
                    f"  busy ({spinners} spinning processes), timeouts 3s",
                    cluster,
                    call_timeout=3,
                    connect_timeout=3,
                )
                rows.append(row)
        if not args.no_hung:
            rows.append(hung_hosts(cluster, base))
        if not args.no_lab:
            try:
                lab = libvirt_lab.start_lab(base / "lab")
            except LabError as err:
                notes.append(f"lab scenarios skipped: {err}")
            else:
                try:
                    from reconciler.config import load_desired

                    lab_cluster = load_desired(lab.cluster_dir).cluster
                    observe_cluster(lab_cluster, sample_interval=0)  # warm-up after boot
                    rows.append(run("lab 3x8 (real QEMU)", lab_cluster)[0])
                    upstream = Path(lab.hosts[0].path) / "sock" / "libvirt-sock"
                    with slow_proxy(upstream, base / "slow-sock", 0.05) as slow_uri:
                        slow = replace_uri(lab_cluster, "kvm-01", slow_uri)
                        rows.append(run("  kvm-01 behind 50 ms/request", slow)[0])
                finally:
                    libvirt_lab.stop_lab(base / "lab")
    header = ["scenario", "reachable", "VMs", "wall s", "CPU s", "slowest s", "sum s", "calls/host"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
