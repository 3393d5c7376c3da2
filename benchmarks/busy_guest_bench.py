"""A busy guest's migration through ``reconciler apply`` against a plain libvirt call with the
same flags, in the same run, on a lab of workload guests.

    .venv/bin/python benchmarks/busy_guest_bench.py                  # root: starts its own lab
    .venv/bin/python benchmarks/busy_guest_bench.py --rounds 5 --bandwidth 32 --dirty 64

One workload guest of 128 MiB (TCG) writes ``--dirty`` MiB/s over 48 MiB; migrations are held
to ``--bandwidth`` MiB/s, below what it writes, so pre-copy alone never converges. For each
help, the guest moves to the other host and back, alternately by the two contenders, each run
as its own process and timed from its start to its exit:

* plain: a Python script calling ``migrateToURI3`` with the flags and typed parameters of
  ``calls.migration_call`` for the same policy; for post-copy it calls
  ``migrateStartPostCopy`` once the first pass is done, as a move planned with post-copy does
  (``virsh migrate --postcopy-after-precopy`` does the same);
* apply: ``reconciler apply FOLDER --yes --format json`` on a cluster folder whose
  placement.yaml puts the guest on the other host (``drift: revert``, no rules).

Each prints the process's wall time, the migration's own time, its downtime and the bytes it
sent (libvirt's completed job on the target for plain; the round's move result for apply),
per round and as medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GUEST = "web-1"

PLAIN = r"""
import json, sys, threading, time
import libvirt
job = json.loads(sys.argv[1])
began = time.monotonic()
src = libvirt.open(job["source_uri"])
dst = libvirt.open(job["dest_uri"])
dom = src.lookupByName(job["vm"])
error = []
def run():
    try:
        dom.migrateToURI3(job["dest_uri"], job["params"], job["flags"])
    except libvirt.libvirtError as err:
        error.append(str(err))
worker = threading.Thread(target=run)
started = time.monotonic()
worker.start()
switched = False
while worker.is_alive():
    worker.join(0.2)
    if job["switch"] and not switched and worker.is_alive():
        try:
            if dom.jobStats().get("memory_iteration", 0) >= 2:
                dom.migrateStartPostCopy()
                switched = True
        except libvirt.libvirtError:
            pass
seconds = time.monotonic() - started
stats = {}
if not error:
    stats = dst.lookupByName(job["vm"]).jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
print(json.dumps({"seconds": seconds, "downtime": stats.get("downtime"),
                  "bytes": stats.get("data_processed"), "error": error[0] if error else None}))
"""

POLICY = """apiVersion: placement/v1alpha1
kind: BalancePolicy
metadata: {{name: bench}}
spec:
  mode: apply
  basis: allocated
  threshold: 100
  holdRounds: 1
  cooldown: 0s
  minUptime: 0s
  drift: revert
  migration: {{timeoutPerGiB: 300s, progressTimeout: 10s, {help}: true}}
"""


def cluster_folder(lab: Any, out: Path, bandwidth: int, help_: str, target: str) -> Path:
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    cluster = yaml.safe_load((Path(lab.cluster_dir) / "cluster.yaml").read_text())
    cluster["spec"]["defaults"].setdefault("migration", {})["bandwidth"] = bandwidth
    cluster["spec"].setdefault("observe", {})["callTimeout"] = "30s"
    (out / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (out / "policy.yaml").write_text(POLICY.format(help=help_))
    (out / "rules.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: bench}\n"
        "spec: {rules: []}\n"
    )
    (out / "placement.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: bench}\n"
        f"spec: {{vms: {{{GUEST}: {target}}}}}\n"
    )
    return out


def where(lab: Any) -> str:
    import libvirt

    for host in lab.hosts:
        conn = libvirt.open(host.uri)
        try:
            for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_RUNNING):
                if dom.name() == GUEST:
                    return str(host.name)
        finally:
            conn.close()
    raise SystemExit(f"{GUEST} runs nowhere")


def plain(lab: Any, folder: Path, target: str, help_: str) -> dict[str, Any]:
    from reconciler.adapters.libvirt.calls import migration_call
    from reconciler.config import load_desired

    desired = load_desired(folder)
    host = next(h for h in desired.cluster.spec.hosts if h.name == target)
    call = migration_call(desired, host)
    source = where(lab)
    job = {
        "vm": GUEST,
        "source_uri": next(h.uri for h in lab.hosts if h.name == source),
        "dest_uri": call.dest_uri,
        "params": call.params,
        "flags": call.flags,
        "switch": help_ == "postCopy",
    }
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", PLAIN, json.dumps(job)],
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, Any] = json.loads(done.stdout)
    out["wall"] = time.monotonic() - began
    return out


def apply(folder: Path, state: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "apply", str(folder), "--yes", "--format", "json",
         "--state-dir", str(state)],
        capture_output=True,
        text=True,
        env=env, check=False,
    )  # fmt: skip
    wall = time.monotonic() - began
    status = json.loads(done.stdout)
    (move,) = status["lastResult"]["moves"]
    return {
        "wall": wall,
        "seconds": move.get("seconds"),
        "downtime": move.get("downtimeMs"),
        "bytes": move.get("dataBytes"),
        "error": None if move["outcome"] == "succeeded" else move.get("detail"),
        "throttle": move.get("throttle"),
        "postCopy": move.get("postCopy"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bandwidth", type=int, default=32, help="MiB/s allowed")
    parser.add_argument("--dirty", type=int, default=64, help="MiB/s the guest writes")
    parser.add_argument("--help-kind", action="append", choices=["postCopy", "autoConverge"])
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from reconciler.adapters import lab as lab_api

    helps = args.help_kind or ["postCopy", "autoConverge"]
    with tempfile.TemporaryDirectory(prefix="busy-bench-") as tmp:
        base = Path(tmp)
        (base / "workload.yaml").write_text(
            f"defaults: {{cpu: 0, dirty: 0, wss: 16}}\nvms:\n  {GUEST}: "
            f"{{dirty: {args.dirty}, wss: 48}}\n"
        )
        lab = lab_api.start_lab(
            base / "lab", hosts=2, vms=1, workload=True, workload_file=base / "workload.yaml"
        )
        try:
            results: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for help_ in helps:
                for n in range(args.rounds):
                    for who in ("plain", "apply") if n % 2 == 0 else ("apply", "plain"):
                        target = next(h.name for h in lab.hosts if h.name != where(lab))
                        folder = cluster_folder(
                            lab, base / f"{help_}-{n}-{who}", args.bandwidth, help_, target
                        )
                        if who == "plain":
                            got = plain(lab, folder, target, help_)
                        else:
                            got = apply(folder, base / "state")
                        results.setdefault((help_, who), []).append(got)
                        print(f"{help_:12} round {n + 1} {who:5} {json.dumps(got)}", flush=True)
            print()
            print("| help | contender | runs | wall s | migration s | downtime ms | MiB sent |")
            print("|---|---|---:|---:|---:|---:|---:|")
            for (help_, who), runs in results.items():
                ok = [r for r in runs if not r["error"]]

                def median(key: str, runs: list[dict[str, Any]] = ok) -> str:
                    values = [r[key] for r in runs if r.get(key) is not None]
                    return f"{statistics.median(values):.1f}" if values else "-"

                mib = [r["bytes"] / 2**20 for r in ok if r.get("bytes")]
                sent = f"{statistics.median(mib):.0f}" if mib else "-"
                print(
                    f"| {help_} | {who} | {len(ok)}/{len(runs)} | {median('wall')} | "
                    f"{median('seconds')} | {median('downtime')} | {sent} |"
                )
        finally:
            lab_api.stop_lab(base / "lab")


if __name__ == "__main__":
    main()
