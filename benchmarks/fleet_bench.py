"""One ``reconciler run`` over a folder of many test-driver clusters, against one cluster alone.

    PYTHONPATH=. .venv/bin/python benchmarks/fleet_bench.py --clusters 100 --hosts 20

Writes ``--clusters`` cluster folders of ``--hosts`` libvirt test-driver hosts each (``--vms``
VMs per host, spec.interval ``--interval``) into a temporary folder, then runs ``reconciler
run`` twice as a user would, each until every cluster has had ``--rounds`` rounds: first on
one cluster folder alone, then on the folder of all of them (``--concurrency``). Prints, for
each: the mean and p95 time of a round per cluster (from the ``reconciler_reconcile_duration
_seconds`` histogram of /metrics), the time until every cluster had its first round, and the
process's peak memory (VmHWM).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.fleets import write_fleet

REPO = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _durations(metrics: str) -> dict[str, tuple[float, float]]:
    """Each cluster's (count, sum) of round durations."""
    out: dict[str, list[float]] = {}
    pattern = r'reconciler_reconcile_duration_seconds_(count|sum)\{cluster="([^"]+)"\} (\S+)'
    for kind, cluster, value in re.findall(pattern, metrics):
        pair = out.setdefault(cluster, [0.0, 0.0])
        pair[0 if kind == "count" else 1] = float(value)
    return {c: (p[0], p[1]) for c, p in out.items()}


def measure(path: Path, state: Path, clusters: int, args: argparse.Namespace) -> dict[str, float]:
    port = _port()
    began = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "run",
            str(path),
            "--state-dir",
            str(state),
            "--listen",
            f"127.0.0.1:{port}",
            "--concurrency",
            str(args.concurrency),
            "--log-format",
            "json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    first = 0.0
    peak = 0
    try:
        while True:
            time.sleep(0.5)
            peak = max(peak, _peak_kib(proc.pid))
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            except httpx.TransportError:
                continue
            got = _durations(text)
            counts = [n for n, _ in got.values()]
            if not first and len(counts) == clusters and min(counts) >= 1:
                first = time.monotonic() - began
            if len(counts) == clusters and min(counts) >= args.rounds:
                break
            if time.monotonic() - began > args.timeout:
                raise SystemExit(f"timed out: {len(counts)} clusters, rounds {counts[:5]}...")
        per_round = sorted(s / n for n, s in got.values())
    finally:
        proc.terminate()
        proc.wait(60)
    return {
        "mean": sum(per_round) / len(per_round),
        "p95": per_round[int(0.95 * (len(per_round) - 1))],
        "first": first,
        "peak_mib": peak / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--vms", type=int, default=2, help="VMs per host")
    parser.add_argument("--interval", default="30s")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = write_fleet(
            root / "fleet",
            root / "nodes",
            args.clusters,
            hosts=args.hosts,
            vms_per_host=args.vms,
            interval=args.interval,
        )
        alone = measure(root / "fleet" / names[0], root / "state-alone", 1, args)
        fleet = measure(root / "fleet", root / "state-fleet", args.clusters, args)
    print(
        f"{args.clusters} clusters x {args.hosts} hosts x {args.vms} VMs, "
        f"interval {args.interval}, --concurrency {args.concurrency}"
    )
    print("                       one cluster alone    the fleet")
    print(f"round per cluster mean {alone['mean']:10.3f} s  {fleet['mean']:10.3f} s")
    print(f"round per cluster p95  {alone['p95']:10.3f} s  {fleet['p95']:10.3f} s")
    print(f"every first round by   {alone['first']:10.1f} s  {fleet['first']:10.1f} s")
    print(f"peak memory (VmHWM)    {alone['peak_mib']:10.0f} MiB{fleet['peak_mib']:10.0f} MiB")


if __name__ == "__main__":
    main()
