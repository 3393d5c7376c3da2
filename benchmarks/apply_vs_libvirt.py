"""``reconciler apply --yes`` against a plain libvirt script doing the same moves, on the lab.

    .venv/bin/python benchmarks/apply_vs_libvirt.py                 # root: starts its own lab
    .venv/bin/python benchmarks/apply_vs_libvirt.py --lab /tmp/speedlab --rounds 5

Every VM of the lab (12 by default) moves to the next host (kvm-01 -> kvm-02 -> kvm-03 ->
kvm-01) and back, alternately by the two contenders, each run as its own process and timed
from its start to its exit:

* plain: a Python script that opens one connection per source host and calls
  ``migrateToURI3`` with the flags and typed parameters of ``calls.migration_call``
  (peer-to-peer, ``PERSIST_DEST | UNDEFINE_SOURCE``) for every move, in a 2-thread pool;
* apply: ``reconciler apply FOLDER --yes`` on a cluster folder of the lab whose
  placement.yaml lists the hosts to move to (``drift: revert``, ``parallel.cluster: 2``,
  no rules, balance out of reach), so its plan is the same moves.

With ``--before DIR`` (the source tree of an earlier version, e.g. ``git archive BASE | tar
-x -C DIR``) that version's apply runs in the same rounds. Every contender once as a warm-up;
then ``--rounds`` rounds, each contender once per round, the order rotating, the direction
alternating from run to run. Prints each round, the medians, the ratio apply / plain (the
target: at most 1.10, ``--target``) and when apply started its first migration (its first
``migrating`` line, the process run with ``PYTHONUNBUFFERED=1``). Every contender runs with
its bytecode cached (in a folder of the run, ``PYTHONPYCACHEPREFIX``), as an installed
package does, also where the shell sets ``PYTHONDONTWRITEBYTECODE``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLAIN = r"""
import json, sys
from concurrent.futures import ThreadPoolExecutor
import libvirt
moves = json.loads(sys.argv[1])
conns = {}
for m in moves:
    if m["source_uri"] not in conns:
        conns[m["source_uri"]] = libvirt.open(m["source_uri"])
def one(m):
    dom = conns[m["source_uri"]].lookupByName(m["vm"])
    dom.migrateToURI3(m["dest_uri"], m["params"], m["flags"])
with ThreadPoolExecutor(max_workers=2) as pool:
    list(pool.map(one, moves))
for c in conns.values():
    c.close()
"""

POLICY = """apiVersion: placement/v1alpha1
kind: BalancePolicy
metadata: {name: bench}
spec:
  mode: apply
  basis: allocated
  threshold: 100
  holdRounds: 1
  hostLimit: 100
  cpuOvercommit: 16
  cooldown: 0s
  minUptime: 0s
  batch: 1000
  parallel: {cluster: 2}
  drift: revert
"""

RULES = """apiVersion: placement/v1alpha1
kind: PlacementRules
metadata: {name: bench}
spec:
  rules: []
"""


def placement(where: dict[str, str]) -> str:
    head = "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: bench}\nspec:\n"
    if not where:
        return head + "  vms: {}\n"
    lines = [f"    {vm}: {host}" for vm, host in sorted(where.items())]
    return head + "  vms:\n" + "\n".join(lines) + "\n"


def running(uris: dict[str, str]) -> dict[str, str]:
    import libvirt

    where: dict[str, str] = {}
    for host, uri in uris.items():
        conn = libvirt.open(uri)
        try:
            for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                where[dom.name()] = host
        finally:
            conn.close()
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lab", type=Path, help="a running lab's folder (default: start one)")
    parser.add_argument("--vms", type=int, default=12, help="VMs of a lab started here")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target", type=float, default=1.10, help="the most apply / plain")
    parser.add_argument(
        "--before",
        type=Path,
        help="the source tree of an earlier version (e.g. from git archive), run alongside",
    )
    args = parser.parse_args()

    from reconciler.adapters import lab as libvirt_lab
    from reconciler.adapters.libvirt.calls import migration_call
    from reconciler.config import load_desired

    started = args.lab is None
    directory = args.lab or Path(tempfile.mkdtemp(prefix="applybench-")) / "lab"
    if started:
        libvirt_lab.start_lab(directory, hosts=3, vms=args.vms)
    work = Path(tempfile.mkdtemp(prefix="applybench-"))
    try:
        folder = work / "cluster"
        folder.mkdir()
        shutil.copy(directory / "cluster-state" / "cluster.yaml", folder / "cluster.yaml")
        (folder / "policy.yaml").write_text(POLICY)
        (folder / "rules.yaml").write_text(RULES)
        (folder / "placement.yaml").write_text(placement({}))
        desired_any = load_desired(folder)
        hosts = {h.name: h for h in desired_any.cluster.spec.hosts}
        uris = {n: h.uri for n, h in hosts.items()}
        names = sorted(hosts)
        home = running(uris)
        away = {vm: names[(names.index(h) + 1) % len(names)] for vm, h in home.items()}
        vms = sorted(home)
        print(f"{len(vms)} VMs on {len(names)} hosts; each pass moves all of them")

        def plain(to: dict[str, str]) -> float:
            now = running(uris)
            moves = []
            for vm in vms:
                call = migration_call(desired_any, hosts[to[vm]])
                moves.append(
                    {
                        "vm": vm,
                        "source_uri": uris[now[vm]],
                        "dest_uri": call.dest_uri,
                        "params": call.params,
                        "flags": call.flags,
                    }
                )
            began = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", PLAIN, json.dumps(moves)], check=True, env=bytecode
            )
            seconds = time.perf_counter() - began
            assert running(uris) == to, "plain: the VMs are not where they were sent"
            return seconds

        firsts: dict[str, list[float]] = {}
        # as an installed package runs: its modules compiled once (by the warm-up), not at
        # every start, even where the shell sets PYTHONDONTWRITEBYTECODE
        bytecode = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        bytecode["PYTHONPYCACHEPREFIX"] = str(work / "pycache")

        def apply(to: dict[str, str], tree: Path) -> float:
            (folder / "placement.yaml").write_text(placement(to))
            command = [sys.executable, "-m", "reconciler", "apply", str(folder), "--yes"]
            command += ["--state-dir", str(work / "state")]
            env = {
                **bytecode,
                "RECONCILER_LOCK_DIR": str(work / "lock"),
                "PYTHONPATH": str(tree),
                "PYTHONUNBUFFERED": "1",  # each line as it is written: the first start is timed
            }
            began = time.perf_counter()
            first: float | None = None
            lines: list[str] = []
            with subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            ) as child:
                assert child.stdout is not None
                for line in child.stdout:
                    if first is None and line.startswith("migrating "):
                        first = time.perf_counter() - began
                    lines.append(line)
            seconds = time.perf_counter() - began
            assert child.returncode == 0, f"apply exited {child.returncode}: {''.join(lines)}"
            assert running(uris) == to, "apply: the VMs are not where they were sent"
            firsts.setdefault(str(tree), []).append(first or seconds)
            return seconds

        contenders: dict[str, Callable[[dict[str, str]], float]] = {
            "plain": plain,
            "apply": lambda to: apply(to, ROOT),
        }
        if args.before is not None:
            before: Path = args.before
            contenders["before"] = lambda to: apply(to, before)
        side = [away, home]
        turn = [0]

        def run(name: str) -> float:
            seconds = contenders[name](side[turn[0] % 2])
            turn[0] += 1
            return seconds

        for name in contenders:  # warm-up: every path once (bytecode, caches, daemons)
            run(name)
        firsts.clear()
        times: dict[str, list[float]] = {name: [] for name in contenders}
        order = list(contenders)
        for k in range(args.rounds):
            for name in order[k % len(order) :] + order[: k % len(order)]:
                times[name].append(run(name))
            print(
                f"round {k + 1}: "
                + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in contenders)
                + ", ratio "
                + ", ".join(f"{n}/plain {times[n][-1] / times['plain'][-1]:.2f}" for n in order[1:])
            )
        mp = statistics.median(times["plain"])
        print(f"median of {args.rounds} rounds ({len(vms)} moves each): plain {mp:.2f} s")
        for name in order[1:]:
            m = statistics.median(times[name])
            ratios = [a / p for a, p in zip(times[name], times["plain"], strict=True)]
            print(
                f"  {name} {m:.2f} s, ratio {m / mp:.2f} (target <= {args.target:.2f}), "
                f"median of per-round ratios {statistics.median(ratios):.2f}"
            )
        for tree, seconds in firsts.items():
            name = "apply" if Path(tree) == ROOT else "before"
            print(f"  {name}: first migration started {statistics.median(seconds):.2f} s in")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if started:
            libvirt_lab.stop_lab(directory)


if __name__ == "__main__":
    main()
