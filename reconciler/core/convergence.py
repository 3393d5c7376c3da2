"""Will the live migration of a guest that writes memory converge at the bandwidth allowed?

Pre-copy sends all memory once (a move of class ``copy`` sends its disks first), then, pass
after pass, what the guest wrote meanwhile; it ends when what is left fits in the downtime QEMU
allows (``DOWNTIME``). A guest that writes as fast as the link carries never gets there: every
pass leaves as much to send as the one before. Pure: the forecast of one move from the guest's
measured dirty rate, its memory and disk bytes, and what the policy allows
(:class:`Allowed`), simulated pass by pass the way the migration is watched
(``reconciler/adapters/libvirt/live_move.py``):

- a pass counts as progress when it leaves at least ``PASS_GAIN`` less to send than every pass
  before it (so does each pass of the first sweep, and each rise of auto-converge's throttle);
  ``progressTimeout`` without progress, or ``timeoutPerGiB`` x GiB in all, is an abort;
- **auto-converge** (QEMU's defaults): from the third pass on the guest's vCPUs are throttled,
  ``THROTTLE_INITIAL`` percent first and ``THROTTLE_STEP`` more every second pass, up to
  ``THROTTLE_MAX``, so what it writes falls until it fits;
- **post-copy**: planned for a move that would not converge otherwise, it switches after the
  first pass; the target then fetches what is left, so it always ends, but a failure after
  the switch splits the VM's memory between the hosts (the risk the plan names).

:func:`forecast` chooses the help per move: none when pre-copy alone converges, else
auto-converge when allowed and predicted to converge within the limits, else post-copy when
allowed, else none (the move is predicted to be aborted, the VM staying on its source).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Assist, Convergence
from reconciler.model.snapshot import MigrationClass

MIB: Final = 1024**2
GIB: Final = 1024**3
DOWNTIME: Final = 0.3
"""Seconds the guest may stand still for the last pass: libvirt's and QEMU's default."""
ASSUMED_LINK: Final = 1024 * MIB
"""Bytes per second assumed where the policy sets no bandwidth (about a 10 Gb/s link)."""
PASS_GAIN: Final = 1 / 16
"""A later pass is progress when it leaves this much less to send than every pass before."""
THROTTLE_INITIAL: Final = 20
THROTTLE_STEP: Final = 10
THROTTLE_MAX: Final = 99
THROTTLE_FROM_PASS: Final = 3
"""QEMU throttles once two passes saw the guest write over half of what was sent, then
again after every two more such passes."""
MAX_PASSES: Final = 10_000
"""A bound on the simulation; a pre-copy that needs more does not converge for any purpose."""
LIVE: Final = frozenset({MigrationClass.SHARED, MigrationClass.COPY})


@dataclass(frozen=True, slots=True)
class Allowed:
    """What the policy allows one live move: bytes per second (0: not limited), the help, the
    time limit (``timeoutPerGiB`` x GiB) and ``progressTimeout``, in seconds."""

    bandwidth: int
    auto_converge: bool
    post_copy: bool
    time_limit: float
    stall: float


@dataclass(frozen=True, slots=True)
class Run:
    """One simulated migration: whether it ends, and when, with what sent."""

    converges: bool
    seconds: float
    bytes: int
    passes: int
    throttle: int = 0
    """The highest auto-converge throttle reached, percent."""
    why: str = ""
    """Why it does not converge: ``stall`` (progressTimeout) or ``time`` (timeoutPerGiB)."""


def allowed(
    desired: DesiredState, target: Host | None, klass: MigrationClass, copied: int
) -> Allowed:
    """What ``desired`` allows a live move of class ``klass`` to ``target`` that copies
    ``copied`` bytes (guest memory, plus disks for class ``copy``); ``target`` None: the
    smallest bandwidth of any host (the target not chosen yet)."""
    defaults = desired.cluster.spec.defaults.migration
    tuning = desired.policy.spec.migration
    if target is not None:
        bandwidth = _bandwidth(target, defaults.bandwidth)
    else:
        limits = [_bandwidth(h, defaults.bandwidth) for h in desired.cluster.spec.hosts]
        limited = [b for b in limits if b > 0]
        bandwidth = min(limited) if limited and len(limited) == len(limits) else 0
    auto, post = tuning.auto_converge, tuning.post_copy
    per_gib, stall = tuning.timeout_per_gib, tuning.progress_timeout
    if klass is MigrationClass.COPY:
        over = tuning.copy_moves
        bandwidth = bandwidth if over.bandwidth is None else over.bandwidth
        auto = auto if over.auto_converge is None else over.auto_converge
        post = post if over.post_copy is None else over.post_copy
        per_gib = over.timeout_per_gib or per_gib
        stall = over.progress_timeout or stall
    gib = max(1, math.ceil(copied / GIB))
    return Allowed(
        bandwidth=bandwidth * MIB,
        auto_converge=auto,
        post_copy=post,
        time_limit=per_gib.total_seconds() * gib,
        stall=stall.total_seconds(),
    )


def _bandwidth(host: Host, default: int | None) -> int:
    own = host.migration.bandwidth
    return own if own is not None else (default or 0)


def precopy(
    memory: int,
    disk: int,
    dirty: float,
    bandwidth: float,
    *,
    throttle: bool = False,
    stall: float = math.inf,
    limit: float = math.inf,
) -> Run:
    """Pre-copy of ``memory`` bytes (after ``disk`` bytes of disks) of a guest writing
    ``dirty`` bytes per second, at ``bandwidth`` bytes per second, with auto-converge when
    ``throttle``; aborted after ``stall`` seconds without progress or ``limit`` in all."""
    seconds = (memory + disk) / bandwidth
    sent = float(memory + disk)
    left = min(float(memory), dirty * memory / bandwidth)
    least = left  # what the first pass left: later passes must shrink it to be progress
    since = 0.0  # seconds without progress
    passes, pct, top = 1, 0, 0
    done = bandwidth * DOWNTIME
    while left > done:
        if seconds > limit:
            return Run(False, seconds, int(sent), passes, top, "time")
        if since > stall or passes >= MAX_PASSES:
            return Run(False, seconds, int(sent), passes, top, "stall")
        passes += 1
        raised = False
        if throttle and _throttles(passes) and pct < THROTTLE_MAX:
            pct = min(THROTTLE_MAX, THROTTLE_STEP + pct if pct else THROTTLE_INITIAL)
            top, raised = pct, True
        took = left / bandwidth
        seconds += took
        sent += left
        written = min(float(memory), dirty * (1 - pct / 100) * took)
        if written <= least * (1 - PASS_GAIN):
            least, since = written, 0.0
        elif raised:
            since = 0.0
        else:
            since += took
            if (not throttle or pct >= THROTTLE_MAX) and written >= left:
                # a fixed point: nothing left to change
                return Run(False, math.inf, int(sent), passes, top, "stall")
        left = written
    seconds += left / bandwidth
    sent += left
    if seconds > limit:
        return Run(False, seconds, int(sent), passes, top, "time")
    return Run(True, seconds, int(sent), passes, top)


def _throttles(passes: int) -> bool:
    """Whether auto-converge raises its throttle as pass ``passes`` starts: QEMU raises it
    after every second pass in which the guest wrote more than half of what was sent."""
    return passes >= THROTTLE_FROM_PASS and (passes - THROTTLE_FROM_PASS) % 2 == 0


def postcopy(memory: int, disk: int, dirty: float, bandwidth: float) -> Run:
    """One pre-copy pass, then post-copy: the target fetches what the guest wrote meanwhile
    (at most its memory); it always ends unless a host or the link fails."""
    first = (memory + disk) / bandwidth
    rest = min(float(memory), dirty * memory / bandwidth)
    return Run(True, first + rest / bandwidth, int(memory + disk + rest), 1)


def forecast(memory: int, disk: int, dirty: int, allow: Allowed) -> Convergence:
    """The prediction and the help for a live move (see the module's doc)."""
    assumed = allow.bandwidth <= 0
    bandwidth = ASSUMED_LINK if assumed else allow.bandwidth
    plain = precopy(memory, disk, dirty, bandwidth, stall=allow.stall, limit=allow.time_limit)
    base = Convergence(
        dirty_rate=dirty,
        bandwidth=bandwidth,
        bandwidth_assumed=assumed,
        converges=plain.converges,
        assist=Assist.NONE,
    )
    if plain.converges:
        return _with(base, plain)
    if allow.auto_converge:
        throttled = precopy(
            memory, disk, dirty, bandwidth, throttle=True, stall=allow.stall, limit=allow.time_limit
        )
        if throttled.converges:
            risk = (
                f"auto-converge: its vCPUs are slowed down by up to {throttled.throttle}% for "
                f"about {throttled.seconds:.0f}s until what it writes fits in {_rate(bandwidth)}"
            )
            out = base.model_copy(update={"converges": True, "assist": Assist.AUTO_CONVERGE})
            return _with(out, throttled, risk)
    if allow.post_copy:
        post = postcopy(memory, disk, dirty, bandwidth)
        risk = (
            "post-copy: after one pass it runs on the target while its source still holds part "
            "of its memory; if either host or the link fails then, the VM stays paused until "
            "the post-copy is resumed"
        )
        out = base.model_copy(update={"converges": True, "assist": Assist.POST_COPY})
        return _with(out, post, risk)
    limit = (
        f"progressTimeout ({allow.stall:g}s)"
        if plain.why == "stall"
        else f"its time limit ({allow.time_limit:g}s)"
    )
    why = (
        f"writes {_rate(dirty)}, too fast for {_rate(bandwidth)}: pre-copy does not converge "
        f"and is expected to be aborted after {limit}, the VM staying on its source; allow "
        "autoConverge or postCopy, or raise the bandwidth"
    )
    return base.model_copy(update={"risk": why, "passes": plain.passes})


def _with(out: Convergence, run: Run, risk: str | None = None) -> Convergence:
    return out.model_copy(
        update={
            "seconds": round(run.seconds, 1),
            "bytes": run.bytes,
            "passes": run.passes,
            "risk": risk,
        }
    )


def _rate(value: float) -> str:
    return f"{value / MIB:.0f} MiB/s" if value >= MIB else f"{value / 1024:.0f} KiB/s"


def needs_help(convergence: Convergence | None) -> bool:
    """Whether a move with this forecast is not a plain pre-copy that converges."""
    return convergence is not None and (
        not convergence.converges or convergence.assist is not Assist.NONE
    )
