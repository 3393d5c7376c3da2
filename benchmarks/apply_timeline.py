"""What ``reconciler apply`` adds around libvirt's own migrations: a call timeline on the lab.

    .venv/bin/python benchmarks/apply_timeline.py --lab LAB --rounds 5 [--before DIR]

The same cluster folder and moves as ``apply_vs_libvirt.py`` (every VM to the next host and
back, ``parallel.cluster: 2``). Each run of ``reconciler apply FOLDER --yes`` is its own
process, with ``virDomain.migrateToURI3`` wrapped to write when each call starts and returns
(nothing else of the command is changed). From those times:

* start: from the process's start to its first ``migrateToURI3``: imports, the look at the
  hosts, the plan, the first intents;
* gap: for every later migration, from the return of the last ``migrateToURI3`` before it
  (the slot it takes was freed then) to its own start: the fresh look at its hosts, its
  intent, the outcome of the migration that ended;
* tail: from the last return to the process's exit: the last outcomes, the status, the exit.

libvirt's time (the calls themselves) is left out, so the figures do not swing with how long
the lab's QEMUs take to migrate. With ``--before DIR`` (an earlier version's tree, e.g. ``git
archive BASE reconciler | tar -x -C DIR``) both run in turn in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from apply_vs_libvirt import POLICY, RULES, placement, running

ROOT = Path(__file__).resolve().parents[1]

CHILD = """\
import sys, time
import libvirt
_call = libvirt.virDomain.migrateToURI3
def _timed(self, *args, **kwargs):
    sys.stderr.write(f"CALL {time.time()!r}\\n")
    try:
        return _call(self, *args, **kwargs)
    finally:
        sys.stderr.write(f"BACK {time.time()!r}\\n")
libvirt.virDomain.migrateToURI3 = _timed
import reconciler.cli
# as the command runs (main, then the exit), or an earlier version's main
getattr(reconciler.cli, "main_then_exit", lambda: sys.exit(reconciler.cli.main()))()
"""


def one_run(tree: Path, folder: Path, work: Path) -> tuple[float, list[float], float]:
    """(start, gaps, tail) in seconds of one ``apply`` run from ``tree``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        PYTHONPATH=str(tree),
        PYTHONPYCACHEPREFIX=str(work / "pycache"),
        RECONCILER_LOCK_DIR=str(work / "lock"),
    )
    argv = ["apply", str(folder), "--yes", "--state-dir", str(work / "state")]
    began = time.time()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        timeout=600,
        check=False,
    )
    ended = time.time()
    assert done.returncode == 0, f"apply exited {done.returncode}: {done.stdout}{done.stderr}"
    events = [
        (float(line.split()[1]), line.split()[0])
        for line in done.stderr.splitlines()
        if line.startswith(("CALL ", "BACK "))
    ]
    events.sort()
    calls = [t for t, kind in events if kind == "CALL"]
    assert calls, f"no migration: {done.stdout}"
    gaps: list[float] = []
    last_back: float | None = None
    for t, kind in events:
        if kind == "BACK":
            last_back = t
        elif t != calls[0] and last_back is not None:
            gaps.append(t - last_back)
    tail = ended - max(t for t, kind in events if kind == "BACK")
    return calls[0] - began, gaps, tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=Path, required=True, help="a running lab's folder")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="an earlier version's tree, run alongside")
    args = parser.parse_args()

    from reconciler.config import load_desired

    work = Path(tempfile.mkdtemp(prefix="applytimeline-"))
    try:
        folder = work / "cluster"
        folder.mkdir()
        shutil.copy(args.lab / "cluster-state" / "cluster.yaml", folder / "cluster.yaml")
        (folder / "policy.yaml").write_text(POLICY)
        (folder / "rules.yaml").write_text(RULES)
        (folder / "placement.yaml").write_text(placement({}))
        desired = load_desired(folder)
        uris = {h.name: h.uri for h in desired.cluster.spec.hosts}
        names = sorted(uris)
        trees = {"apply": ROOT} | ({"before": args.before.resolve()} if args.before else {})
        got: dict[str, list[tuple[float, list[float], float]]] = {name: [] for name in trees}
        for k in range(args.rounds + 1):  # the first round warms up (bytecode, daemons)
            for name, tree in trees.items():
                home = running(uris)
                away = {vm: names[(names.index(h) + 1) % len(names)] for vm, h in home.items()}
                (folder / "placement.yaml").write_text(placement(away))
                start, gaps, tail = one_run(tree, folder, work)
                assert running(uris) == away, f"{name}: the VMs are not where they were sent"
                if k:
                    got[name].append((start, gaps, tail))
                    print(
                        f"round {k} {name}: start {start:.3f} s, gaps median "
                        f"{statistics.median(gaps) * 1000:.0f} ms (max "
                        f"{max(gaps) * 1000:.0f}), tail {tail:.3f} s"
                    )
        print(f"medians of {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}:")
        for name, rows in got.items():
            gaps = [g for _, run_gaps, _ in rows for g in run_gaps]
            start = statistics.median(s for s, _, _ in rows)
            tail = statistics.median(t for _, _, t in rows)
            gap = statistics.median(gaps)
            idle = sum(gaps) / len(rows)
            print(
                f"  {name:<7} start {start:.3f} s, gap {gap * 1000:.0f} ms "
                f"(p90 {statistics.quantiles(gaps, n=10)[-1] * 1000:.0f}), tail {tail:.3f} s, "
                f"slots idle between migrations {idle:.2f} s a run"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
