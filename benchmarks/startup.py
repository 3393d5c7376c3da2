"""How soon ``reconciler plan`` on the example folder starts its work, against the interpreter.

Each round starts, in turn, fresh processes of:

* ``python``: the interpreter alone (its first statement), the floor of any command;
* ``pydantic``: the interpreter importing pydantic, the library every command reads its
  documents with;
* ``models``: the interpreter importing pydantic's ``BaseModel`` and making one model class
  under the project's base configuration (validator deferred): what any program that reads a
  document through a pydantic model pays before it can open one, since ``import pydantic``
  alone loads pydantic's parts lazily;
* ``plan``: ``reconciler plan cluster-state --snapshot S`` as its entry point runs it.

"Starts its work" is the first time the process opens one of its inputs (a file of the folder
or the snapshot), seen by an audit hook (``sys.addaudithook``, no change to the command); the
clock starts just before the process is spawned. ``end`` is when the process has exited.
Bytecode is cached (``PYTHONDONTWRITEBYTECODE`` unset for the children, after a warm-up run), as
an installed package runs. Medians over the rounds; the ratio is the plan's start against the
interpreter's in the same round.

With ``--before DIR`` (an earlier version's package, e.g. ``git archive BASE reconciler | tar
-x -C DIR``) that version's ``plan`` runs in the same rounds, imported from ``DIR`` first.

With ``--split``, one more ``plan`` process times, up to its start, the classes it makes:
pydantic's model classes (``ModelMetaclass.__new__``) and dataclasses (``_process_class``),
by the package that defines them.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/startup.py --rounds 9``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.cli.test_imports import example_snapshot

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "cluster-state"

HOOKED = """\
import sys, time
INPUTS = tuple(sys.argv[1].split(","))
def _hook(event, args, _seen=[]):
    if event == "open" and not _seen and str(args[0]).startswith(INPUTS):
        _seen.append(1)
        sys.stderr.write(f"STARTED {time.time()!r}\\n")
sys.addaudithook(_hook)
"""

PLAN = (
    HOOKED
    + """\
sys.argv[1:] = sys.argv[2:]
import reconciler.cli
# as the console script runs it (main, then the exit), or an earlier version's main
getattr(reconciler.cli, "main_then_exit", lambda: sys.exit(reconciler.cli.main()))()
"""
)
SPLIT = """\
import sys, time, dataclasses
from pydantic._internal import _model_construction as mc
INPUTS = tuple(sys.argv[1].split(","))
sys.argv[1:] = sys.argv[2:]
spent = {}
def _timed(kind, make):
    depth = [0]
    def timed(*args, **kwargs):
        depth[0] += 1
        t = time.perf_counter()
        try:
            return make(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                name = args[3].get("__module__", "") if kind == "model" else args[0].__module__
                where = "ours" if name.startswith("reconciler") else name.split(".")[0]
                key = ("model" if kind == "model" else "data", where)
                n, s = spent.get(key, (0, 0.0))
                spent[key] = (n + 1, s + time.perf_counter() - t)
    return timed
dataclasses._process_class = _timed("dataclass", dataclasses._process_class)
mc.ModelMetaclass.__new__ = _timed("model", mc.ModelMetaclass.__new__)
def _hook(event, args, _seen=[]):
    if event == "open" and not _seen and str(args[0]).startswith(INPUTS):
        _seen.append(1)
        for (kind, where), (n, s) in sorted(spent.items()):
            sys.stderr.write(f"SPLIT {kind} {where} {n} {s:.4f}\\n")
sys.addaudithook(_hook)
import reconciler.cli
reconciler.cli.main()
"""

FLOOR = HOOKED + 'sys.stderr.write(f"STARTED {time.time()!r}\\n")\n'
PYDANTIC = HOOKED + 'import pydantic\nsys.stderr.write(f"STARTED {time.time()!r}\\n")\n'
MODELS = (
    HOOKED
    + """\
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
class Doc(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel,
        defer_build=True,
    )
    name: str
sys.stderr.write(f"STARTED {time.time()!r}\\n")
"""
)


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(code: str, inputs: str, argv: list[str]) -> tuple[float, float, float]:
    """(seconds to the first open of an input, seconds to the exit, CPU seconds) of one fresh
    process."""
    cpu = _cpu()
    t0 = time.time()
    done = _child(code, inputs, argv)
    end = time.time() - t0
    cpu = _cpu() - cpu
    started = [ln for ln in done.stderr.splitlines() if ln.startswith("STARTED ")]
    if not started:
        raise SystemExit(f"the process never opened an input: {done.stderr}")
    return float(started[0].split()[1]) - t0, end, cpu


def _child(code: str, inputs: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """One fresh ``python -c CODE INPUTS ARGV`` with bytecode cached; exits on a failure."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [sys.executable, "-c", code, inputs, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    if done.returncode not in (0, 2):
        raise SystemExit(f"exit {done.returncode}: {done.stderr}")
    return done


def split(inputs: str, argv: list[str]) -> list[str]:
    """The classes one ``plan`` makes before its start, and their seconds, as lines."""
    done = _child(SPLIT, inputs, argv)
    lines = ["classes plan makes before its start (one run, timed inside it):"]
    for line in done.stderr.splitlines():
        if line.startswith("SPLIT "):
            _, kind, where, n, seconds = line.split()
            label = f"{kind} classes"
            lines.append(f"  {label:<17} of {where:<16} {int(n):4d} {float(seconds):7.3f} s")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--target", type=float, default=0.15, help="seconds to the plan's start")
    ap.add_argument("--before", type=Path, help="an earlier version's tree, run alongside")
    ap.add_argument("--split", action="store_true", help="time the classes plan makes")
    args = ap.parse_args()
    before = None
    if args.before is not None:
        before = PLAN.replace(
            "import reconciler.cli\n",
            f"sys.path.insert(0, {str(args.before.resolve())!r})\nimport reconciler.cli\n",
        )
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = example_snapshot(Path(tmp))
        inputs = f"{EXAMPLE},{snapshot}"
        argv = ["plan", str(EXAMPLE), "--snapshot", str(snapshot)]
        argv += ["--state-dir", str(Path(tmp) / "state")]
        timed(PLAN, inputs, argv)  # warm-up: bytecode written, files in the page cache
        rows: dict[str, list[tuple[float, float, float]]] = {
            "python": [],
            "pydantic": [],
            "models": [],
            "plan": [],
        }
        if before is not None:
            timed(before, inputs, argv)
            rows["before"] = []
        for _ in range(args.rounds):
            rows["python"].append(timed(FLOOR, inputs, []))
            rows["pydantic"].append(timed(PYDANTIC, inputs, []))
            rows["models"].append(timed(MODELS, inputs, []))
            rows["plan"].append(timed(PLAN, inputs, argv))
            if before is not None:
                rows["before"].append(timed(before, inputs, argv))
        classes = split(inputs, argv) if args.split else []
    print(f"load average {os.getloadavg()[0]:.1f}, {args.rounds} rounds, medians")
    print(f"{'process':<10} {'start s':>8} {'end s':>7} {'CPU s':>6} {'start / python':>15}")
    floor = statistics.median(s for s, _, _ in rows["python"])
    for name, got in rows.items():
        start = statistics.median(s for s, _, _ in got)
        end = statistics.median(e for _, e, _ in got)
        cpu = statistics.median(c for _, _, c in got)
        print(f"{name:<10} {start:8.3f} {end:7.3f} {cpu:6.3f} {start / floor:15.2f}")
    per_round = [p[0] - f[0] for p, f in zip(rows["plan"], rows["python"], strict=True)]
    over = statistics.median(per_round)
    print(f"plan's start after the interpreter's, per round (median): {over:.3f} s")
    start = statistics.median(s for s, _, _ in rows["plan"])
    verdict = "PASS" if start <= args.target else "FAIL"
    print(f"target: plan starts its work within {args.target} s of process start: {verdict}")
    for line in classes:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
