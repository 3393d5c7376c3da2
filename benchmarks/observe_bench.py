"""How long observing a cluster takes, and that it grows with the slowest host, not the sum.

Run: ``.venv/bin/python benchmarks/observe_bench.py [--hosts 200] [--vms 30] [--no-lab]``

Scenarios:
- ``test-driver``: HOSTS libvirt test-driver hosts with VMS VMs each (in-process, no daemons).
- ``+ hung``: the same plus three hosts whose socket accepts and never answers; each is cut off
  at the connect timeout, all at the same time.
- ``lab`` (root, libvirtd and QEMU needed): the real 3-host lab with 8 VMs.
- ``lab + slow``: the lab with kvm-01 behind a proxy that delays every request by 50 ms.

For each: wall time, the slowest host's time, the sum of all hosts' times, and libvirt calls
per host. Wall close to the slowest host (not to the sum) shows hosts are observed at once.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from reconciler.adapters import lab as libvirt_lab
from reconciler.adapters.libvirt_observer import observe_cluster
from reconciler.errors import LabError
from reconciler.model.cluster import Cluster, ClusterSpec, Host
from reconciler.model.snapshot import Snapshot


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


def run(label: str, cluster: Cluster, **kwargs: float) -> list[str]:
    began = time.perf_counter()
    snap: Snapshot = observe_cluster(cluster, **kwargs)  # type: ignore[arg-type]
    wall = time.perf_counter() - began
    reachable = [h for h in snap.hosts if h.reachable]
    calls = [h.libvirt_calls for h in reachable] or [0]
    slowest = max(h.observe_seconds for h in snap.hosts)
    total = sum(h.observe_seconds for h in snap.hosts)
    return [
        label,
        f"{len(reachable)}/{len(snap.hosts)}",
        str(len(snap.vms)),
        f"{wall:.2f}",
        f"{slowest:.2f}",
        f"{total:.2f}",
        f"{min(calls)}-{max(calls)}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--vms", type=int, default=30, help="VMs per test-driver host")
    parser.add_argument("--no-lab", action="store_true", help="skip the real-lab scenarios")
    args = parser.parse_args(argv)
    rows: list[list[str]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="obs-bench-") as tmp:
        base = Path(tmp)
        cluster = libvirt_lab.write_node_files(base / "nodes", args.hosts, args.vms)
        rows.append(run(f"test-driver {args.hosts}x{args.vms}", cluster, sample_interval=0.5))
        rows.append(
            run(f"test-driver {args.hosts}x{args.vms}, no pause", cluster, sample_interval=0)
        )
        with contextlib.ExitStack() as stack:
            hung = [
                Host(name=f"hung-{i}", uri=stack.enter_context(silent_socket(base / f"hung{i}")))
                for i in range(3)
            ]
            rows.append(
                run(
                    "  + 3 hung hosts (connect timeout 2s)",
                    with_hosts(cluster, hung),
                    sample_interval=0.5,
                    connect_timeout=2,
                )
            )
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
                    rows.append(run("lab 3x8 (real QEMU)", lab_cluster, sample_interval=0.5))
                    upstream = Path(lab.hosts[0].path) / "sock" / "libvirt-sock"
                    with slow_proxy(upstream, base / "slow-sock", 0.05) as slow_uri:
                        slow = replace_uri(lab_cluster, "kvm-01", slow_uri)
                        rows.append(run("  kvm-01 behind 50 ms/request", slow, sample_interval=0.5))
                finally:
                    libvirt_lab.stop_lab(base / "lab")
    header = ["scenario", "reachable", "VMs", "wall s", "slowest s", "sum s", "calls/host"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
