"""What each workload guest does: the lab's workload file, and the words its guest understands.

A workload file (YAML) declares each VM's load::

    defaults: {cpu: 2, dirty: 0, wss: 16}     # for every VM the file does not name
    vms:
      web-1: {cpu: 60}                        # 60% of each of its vCPUs, steadily
      db-1: {cpu: 30, dirty: 20, wss: 48}     # and 20 MiB/s written over 48 MiB
      app-1: {cpu: 10, spike: {cpu: 100, for: 5s, every: 60s}}
      erp: {cpu: 10, ramp: {to: 80, over: 2m}}

``cpu`` is a percentage (0-100) of each of the VM's vCPUs, ``dirty`` MiB written per second,
``wss`` the MiB the guest keeps filled and writes over. ``spike`` raises ``cpu`` to its own
``cpu`` for ``for`` every ``every``; ``ramp`` moves it to ``to`` over ``over``, then holds.
Durations are seconds, or a number with ``s``, ``m`` or ``h``. ``assets/workload.yaml`` is the
lab's own, used by ``lab up --workload`` without a file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import yaml

from reconciler.adapters.lab.layout import asset_text
from reconciler.adapters.lab.state import LabVm
from reconciler.errors import ConfigError

DEFAULT_FILE: Final = "workload.yaml"
"""The lab's own workload file, package data under ``assets/``."""

GUEST_MIN_MIB: Final = 128
"""A workload guest's least memory: the kernel boots from 96 MiB and keeps about 60 of it."""
GUEST_KERNEL_MIB: Final = 72
"""Memory a workload guest's kernel and ``/init`` keep beside the working set."""
MAX_SECONDS: Final = 86400
MAX_DIRTY: Final = 100000

_DURATION = re.compile(r"^\s*(\d+)\s*([smh]?)\s*$")
_UNIT: Final = {"": 1, "s": 1, "m": 60, "h": 3600}


@dataclass(frozen=True)
class Spike:
    """``cpu`` percent for ``seconds`` out of every ``every`` seconds."""

    cpu: int
    seconds: int
    every: int


@dataclass(frozen=True)
class Ramp:
    """From the workload's ``cpu`` to ``to`` percent over ``seconds``, then held."""

    to: int
    seconds: int


@dataclass(frozen=True)
class Workload:
    """The load one guest makes."""

    cpu: int = 0
    dirty: int = 0
    wss: int = 16
    spike: Spike | None = None
    ramp: Ramp | None = None

    @property
    def pattern(self) -> str:
        return "spike" if self.spike else "ramp" if self.ramp else "steady"

    def settings(self) -> dict[str, int | str]:
        """The guest's settings (``workload-init.c``): its kernel command line and console."""
        out: dict[str, int | str] = {
            "cpu": self.cpu,
            "dirty": self.dirty,
            "wss": self.wss,
            "pattern": self.pattern,
        }
        if self.spike:
            out |= {"peak": self.spike.cpu, "on": self.spike.seconds, "every": self.spike.every}
        if self.ramp:
            out |= {"to": self.ramp.to, "over": self.ramp.seconds}
        return out

    def describe(self) -> str:
        """``cpu 60%, dirty 20 MiB/s over 48 MiB, spike to 100% for 5s every 60s``"""
        text = f"cpu {self.cpu}%"
        text += f", dirty {self.dirty} MiB/s over {self.wss} MiB" if self.dirty else ""
        if self.spike:
            text += f", spike to {self.spike.cpu}% for {self.spike.seconds}s"
            text += f" every {self.spike.every}s"
        if self.ramp:
            text += f", ramp to {self.ramp.to}% over {self.ramp.seconds}s"
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu": self.cpu, "dirty": self.dirty, "wss": self.wss}
        if self.spike:
            out["spike"] = {
                "cpu": self.spike.cpu,
                "for": self.spike.seconds,
                "every": self.spike.every,
            }
        if self.ramp:
            out["ramp"] = {"to": self.ramp.to, "over": self.ramp.seconds}
        return out


def from_json(data: dict[str, Any]) -> Workload:
    """The workload ``Workload.to_json`` wrote (``lab.json``)."""
    return parse_workload(data, Workload(), where="workload")


def from_settings(settings: dict[str, str]) -> Workload:
    """The workload of a guest's answer (``cpu=80 dirty=0 wss=48 pattern=spike peak=100 ...``)."""

    def number(key: str) -> int:
        try:
            return int(settings[key])
        except (KeyError, ValueError) as err:
            raise ValueError(f"the guest's answer has no number {key}: {settings}") from err

    out = Workload(cpu=number("cpu"), dirty=number("dirty"), wss=number("wss"))
    if settings.get("pattern") == "spike":
        out = replace(out, spike=Spike(number("peak"), number("on"), number("every")))
    elif settings.get("pattern") == "ramp":
        out = replace(out, ramp=Ramp(number("to"), number("over")))
    return out


def cmdline(workload: Workload) -> str:
    """The guest's kernel command line: a serial console, and its settings."""
    words = " ".join(f"workload.{k}={v}" for k, v in workload.settings().items())
    # quiet: the boot's messages only slow it down on an emulated serial port
    # panic=-1: a guest whose /init dies reboots at once, which its domain turns into shut off
    return f"console=ttyS0 quiet panic=-1 {words}"


def guest_memory(vm: LabVm) -> int:
    """The memory a workload guest of ``vm`` gets: its own, at least ``GUEST_MIN_MIB``."""
    return max(vm.memory_mib, GUEST_MIN_MIB)


def max_wss(memory_mib: int) -> int:
    return memory_mib - GUEST_KERNEL_MIB


# --- the workload file ------------------------------------------------------------------------


def _fail(where: str, message: str, hint: str | None = None) -> ConfigError:
    return ConfigError(
        f"{where}: {message}",
        hint=hint or "see docs/observe.md (workload guests) for the workload file's keys",
    )


def _percent(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise _fail(where, f"must be a whole percentage 0-100, not {value!r}")
    return value


def _whole(value: object, where: str, low: int, high: int, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(where, f"must be a whole number of {unit} {low}-{high}, not {value!r}")
    return value


def duration(value: object, where: str, *, low: int = 1) -> int:
    """Seconds from ``5``, ``"5s"``, ``"2m"`` or ``"1h"``."""
    seconds: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = int(match.group(1)) * _UNIT[match.group(2)]
    if seconds is None or not low <= seconds <= MAX_SECONDS:
        raise _fail(where, f"must be a duration of {low}s to 24h (e.g. 5s, 2m), not {value!r}")
    return seconds


def _mapping(value: object, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"must be a mapping of {', '.join(sorted(keys))}, not {value!r}")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r}; the keys are {', '.join(sorted(keys))}")
    return value


def parse_workload(data: object, base: Workload, *, where: str) -> Workload:
    """``base`` with the keys of ``data`` (one VM's mapping) set; ConfigError names the key."""
    keys = {"cpu", "dirty", "wss", "spike", "ramp"}
    item = _mapping(data, where, keys)
    out = base
    if "cpu" in item:
        out = replace(out, cpu=_percent(item["cpu"], f"{where}.cpu"))
    if "dirty" in item:
        out = replace(out, dirty=_whole(item["dirty"], f"{where}.dirty", 0, MAX_DIRTY, "MiB/s"))
    if "wss" in item:
        out = replace(out, wss=_whole(item["wss"], f"{where}.wss", 1, 1 << 20, "MiB"))
    if item.get("spike") is not None:
        spike = _mapping(item["spike"], f"{where}.spike", {"cpu", "for", "every"})
        for key in ("cpu", "for", "every"):
            if key not in spike:
                raise _fail(f"{where}.spike", f"needs {key} (a spike has cpu, for and every)")
        parsed = Spike(
            cpu=_percent(spike["cpu"], f"{where}.spike.cpu"),
            seconds=duration(spike["for"], f"{where}.spike.for", low=0),
            every=duration(spike["every"], f"{where}.spike.every"),
        )
        if parsed.seconds > parsed.every:
            raise _fail(f"{where}.spike", "for must not be longer than every")
        out = replace(out, spike=parsed, ramp=None)
    if item.get("ramp") is not None:
        if item.get("spike") is not None:
            raise _fail(where, "has both spike and ramp; give one pattern")
        ramp = _mapping(item["ramp"], f"{where}.ramp", {"to", "over"})
        for key in ("to", "over"):
            if key not in ramp:
                raise _fail(f"{where}.ramp", f"needs {key} (a ramp has to and over)")
        out = replace(
            out,
            ramp=Ramp(
                to=_percent(ramp["to"], f"{where}.ramp.to"),
                seconds=duration(ramp["over"], f"{where}.ramp.over"),
            ),
            spike=None,
        )
    return out


def read_workloads(path: Path | None, vms: list[LabVm]) -> dict[str, Workload]:
    """Each VM's workload from the file at ``path`` (the lab's own when None).

    A file of the user's may name only VMs of ``vms`` (the lab's; the lab's own file names
    more, for larger labs); every working set must fit in its guest's memory. ConfigError
    says where the file is wrong and how.
    """
    if path is None:
        text, name = asset_text(DEFAULT_FILE), f"the lab's {DEFAULT_FILE}"
    else:
        try:
            text, name = path.read_text(), str(path)
        except OSError as err:
            raise ConfigError(
                f"cannot read the workload file {path}: {err.strerror}",
                hint="give --workload an existing file, or none for the lab's own",
            ) from err
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{name} is not YAML: {err}") from err
    top = _mapping(data if data is not None else {}, name, {"defaults", "vms"})
    defaults = parse_workload(top.get("defaults") or {}, Workload(), where=f"{name}: defaults")
    per_vm = top.get("vms") or {}
    if not isinstance(per_vm, dict):
        raise _fail(f"{name}: vms", f"must map VM names to workloads, not {per_vm!r}")
    names = {vm.name for vm in vms}
    for vm_name in per_vm:
        if vm_name not in names and path is not None:  # the lab's own names every VM it may have
            raise _fail(
                f"{name}: vms.{vm_name}",
                f"the lab has no VM {vm_name!r}",
                hint=f"name one of {', '.join(sorted(names))}, or start the lab with more --vms",
            )
    out: dict[str, Workload] = {}
    for vm in vms:
        workload = defaults
        if vm.name in per_vm:
            workload = parse_workload(per_vm[vm.name], defaults, where=f"{name}: vms.{vm.name}")
        limit = max_wss(guest_memory(vm))
        if workload.wss > limit:
            raise _fail(
                f"{name}: vms.{vm.name}.wss" if vm.name in per_vm else f"{name}: defaults.wss",
                f"{workload.wss} MiB does not fit in {vm.name}'s {guest_memory(vm)} MiB "
                f"(its kernel keeps about {GUEST_KERNEL_MIB}): at most {limit}",
                hint=f"lower wss to {limit} or less",
            )
        out[vm.name] = workload
    return out


# --- a schedule that lab load follows ---------------------------------------------------------

MAX_POINTS: Final = 100


@dataclass(frozen=True)
class Schedule:
    """CPU percentages at offsets into a cycle that repeats (``lab load --schedule``): a day
    compressed into minutes. Between two points the CPU moves in a straight line from the one
    to the next; the last point ends the cycle, which starts again from the first."""

    points: tuple[tuple[int, int], ...]
    """(seconds into the cycle, CPU percent), the first at 0, strictly later each."""

    @property
    def period(self) -> int:
        return self.points[-1][0]

    def segment(self, elapsed: float) -> tuple[int, int, int, int]:
        """At ``elapsed`` seconds since the schedule began: (seconds into the cycle the
        segment began, its CPU from, its CPU to, its seconds)."""
        into = int(elapsed) % self.period
        for (at, cpu), (end, to) in zip(self.points, self.points[1:], strict=False):
            if at <= into < end:
                return at, cpu, to, end - at
        raise AssertionError("a cycle's offsets cover it")  # pragma: no cover

    def settings(self, elapsed: float) -> dict[str, int | str]:
        """What the guest is told at the start of the segment at ``elapsed``: a ramp from its
        CPU to the next point's over the segment, or that CPU steadily where they are equal."""
        _, cpu, to, seconds = self.segment(elapsed)
        if cpu == to:
            return {"cpu": cpu, "pattern": "steady"}
        return {"cpu": cpu, "pattern": "ramp", "to": to, "over": seconds}

    def next_change(self, elapsed: float) -> float:
        """Seconds since the schedule began at which the segment after ``elapsed`` begins."""
        cycle = int(elapsed) // self.period * self.period
        at, _, _, seconds = self.segment(elapsed)
        return float(cycle + at + seconds)


SCHEDULE_HINT: Final = (
    'points OFFSET:CPU in time order from 0, e.g. --schedule "0m:10,5m:80,10m:10": 10% '
    "rising to 80% over 5 minutes, back to 10% over the next 5, repeated"
)


def parse_schedule(text: str) -> Schedule:
    """``0m:10,5m:80,10m:10`` as a :class:`Schedule`; ConfigError saying which item is wrong."""
    try:
        return _schedule(text)
    except ConfigError as err:
        raise ConfigError(err.message, hint=SCHEDULE_HINT) from None


def _schedule(text: str) -> Schedule:
    where = "--schedule"
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not 2 <= len(items) <= MAX_POINTS:
        raise _fail(where, f"{text!r} needs 2 to {MAX_POINTS} points OFFSET:CPU, comma-separated")
    points: list[tuple[int, int]] = []
    for n, item in enumerate(items, 1):
        offset, sep, cpu = item.partition(":")
        if not sep or not cpu.strip().isdigit():
            raise _fail(where, f"point {n}, {item!r}, is not OFFSET:CPU (e.g. 5m:80)")
        at = duration(offset.strip(), f"{where}: point {n}'s offset", low=0)
        percent = _percent(int(cpu.strip()), f"{where}: point {n}'s CPU")
        if n == 1 and at != 0:
            raise _fail(where, f"the first point, {item!r}, must be at 0 (e.g. 0m:{percent})")
        if points and at <= points[-1][0]:
            raise _fail(where, f"point {n}, {item!r}, is not later than the point before it")
        points.append((at, percent))
    return Schedule(tuple(points))


def follow(
    schedule: Schedule,
    tell: Callable[[dict[str, int | str]], None],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    cycles: int | None = None,
) -> int:
    """Tell the guest each segment of ``schedule`` as it begins (``tell``), from its start now,
    for ``cycles`` cycles (None: until interrupted); the segments told. A segment whose start
    has passed while telling the one before (a slow answer) is told at once, from where the
    schedule stands, never skipped over a whole cycle."""
    began = clock()
    told = 0
    end = None if cycles is None else cycles * schedule.period
    while True:
        elapsed = clock() - began
        if end is not None and elapsed >= end:
            return told
        tell(schedule.settings(elapsed))
        told += 1
        change = schedule.next_change(elapsed)
        if end is not None:
            change = min(change, float(end))
        wait = change - (clock() - began)
        if wait > 0:
            sleep(wait)
