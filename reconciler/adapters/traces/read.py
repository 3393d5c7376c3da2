"""Reading load traces into ``core.simulation.trace.Trace``.

- **PlanetLab** (CloudSim's ``workload/planetlab/<day>/``): one file per VM (names may contain
  spaces), one integer per line: the VM's CPU utilisation in percent over 300 s. The VM's
  demand is that share of its size (``sizes``: per VM index, compute units, e.g. MIPS).
- **CSV**: a header ``time,vm,cpu`` and optionally ``memory`` (bytes, or a size such as 4GiB)
  and ``dirty`` (bytes per second); ``time`` in seconds since the epoch or ISO 8601; ``cpu``
  in cores. Rows of one VM fill its steps; the step is the smallest gap between two times; a
  step a VM has no row for repeats its last figure (its first, before it).

Errors name the file and line and say how to fix them.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.errors import ConfigError
from reconciler.model.quantity import parse_size

PLANETLAB_STEP = 300.0
MAX_LINES = 100_000
"""Lines read from one PlanetLab file at most (a day has 288)."""


def read_planetlab(
    folder: Path,
    vm: Callable[[int, str], TraceVm],
    sizes: Callable[[int], float],
    *,
    start: datetime | None = None,
) -> Trace:
    """The VMs of the PlanetLab day ``folder``, one per file in name order: ``vm(index,
    name)`` makes each VM, ``sizes(index)`` its compute at 100%. A file shorter than the
    others shortens the day."""
    if not folder.is_dir():
        raise ConfigError(
            f"{folder}: not a folder of PlanetLab trace files",
            hint="give a day's folder, e.g. traces/planetlab/20110303",
        )
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise ConfigError(f"{folder}: no trace files in it", hint="one file per VM")
    rows = [_percentages(p) for p in files]
    length = min(len(r) for r in rows)
    vms = tuple(vm(i, p.name) for i, p in enumerate(files))
    demand = tuple(
        tuple(pct / 100 * sizes(i) for pct in row[:length]) for i, row in enumerate(rows)
    )
    return Trace(
        source=str(folder),
        start=start or datetime(2011, 3, 3, tzinfo=UTC),
        step=PLANETLAB_STEP,
        vms=vms,
        demand=demand,
    )


def _percentages(path: Path) -> list[float]:
    out: list[float] = []
    try:
        with path.open(encoding="ascii", errors="strict") as lines:
            for n, line in enumerate(lines, 1):
                if n > MAX_LINES:
                    break
                text = line.strip()
                if not text:
                    continue
                try:
                    value = float(text)
                except ValueError:
                    raise ConfigError(
                        f"{path}:{n}: {text[:40]!r} is not a CPU percentage",
                        hint="one number from 0 to 100 per line",
                    ) from None
                if not 0 <= value <= 100 or not math.isfinite(value):
                    raise ConfigError(
                        f"{path}:{n}: {value} is not a CPU percentage",
                        hint="one number from 0 to 100 per line",
                    )
                out.append(value)
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot be read: {err}", hint="a text file") from err
    if not out:
        raise ConfigError(f"{path}: no figures in it", hint="one number per line")
    return out


def _time(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"{where}: time {text!r} is neither seconds since the epoch nor ISO 8601",
            hint="e.g. 1700000000 or 2026-12-01T08:00:00Z",
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def read_csv(path: Path, *, default_memory: int, vcpus: Callable[[str], int]) -> Trace:
    """The VMs of a CSV trace (see the module's doc); ``default_memory`` for VMs without a
    ``memory`` column, ``vcpus(name)`` each VM's vCPUs."""
    series: dict[str, dict[float, float]] = {}
    memory: dict[str, int] = {}
    dirty: dict[str, float] = {}
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = set(reader.fieldnames or [])
            if not {"time", "vm", "cpu"} <= fields:
                raise ConfigError(
                    f"{path}:1: the header has {sorted(fields)}, not time, vm and cpu",
                    hint="start the file with: time,vm,cpu[,memory,dirty]",
                )
            for row in reader:
                where = f"{path}:{reader.line_num}"
                name = (row.get("vm") or "").strip()
                if not name:
                    raise ConfigError(f"{where}: no VM name", hint="fill the vm column")
                at = _time((row.get("time") or "").strip(), where)
                try:
                    cpu = float(row["cpu"])
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"{where}: cpu {row.get('cpu')!r} is not a number of cores",
                        hint="e.g. 0.75",
                    ) from None
                if not math.isfinite(cpu) or cpu < 0:
                    raise ConfigError(
                        f"{where}: cpu {cpu} is not a number of cores",
                        hint="a finite number, 0 or more",
                    )
                series.setdefault(name, {})[at] = cpu
                if row.get("memory"):
                    try:
                        memory[name] = parse_size(row["memory"].strip())
                    except ValueError as err:
                        raise ConfigError(f"{where}: memory: {err}", hint="e.g. 4GiB") from err
                if row.get("dirty"):
                    try:
                        dirty[name] = float(row["dirty"])
                    except ValueError:
                        raise ConfigError(
                            f"{where}: dirty {row['dirty']!r} is not bytes per second",
                            hint="e.g. 52428800",
                        ) from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read: {err}", hint="a CSV file") from err
    if not series:
        raise ConfigError(f"{path}: no rows", hint="one row per VM and time")
    times = sorted({t for s in series.values() for t in s})
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    step = min(gaps) if gaps else 300.0
    first = times[0]
    steps = int(round((times[-1] - first) / step)) + 1
    names = sorted(series)
    demand: list[tuple[float, ...]] = []
    for name in names:
        figures: list[float] = []
        points = series[name]
        by_step = {int(round((t - first) / step)): v for t, v in points.items()}
        last = points[min(points)]
        for k in range(steps):
            last = by_step.get(k, last)
            figures.append(last)
        demand.append(tuple(figures))
    vms = tuple(
        TraceVm(
            name=n,
            vcpus=vcpus(n),
            memory=memory.get(n, default_memory),
            dirty=dirty.get(n, 0.0),
        )
        for n in names
    )
    return Trace(
        source=str(path),
        start=datetime.fromtimestamp(first, tz=UTC),
        step=step,
        vms=vms,
        demand=tuple(demand),
    )
