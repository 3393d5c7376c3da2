"""The history ``statistic: forecast`` learns from with ``source: samples``: each VM's CPU in
5-minute buckets over ``forecast.history`` (narrower with a seasonal ``period`` shorter than
4h: a 48th of it, at least ``sampleEvery``), folded from ``run``'s own samples.

Pure: the history and the samples go in, the history with the buckets completed since comes
out, time passed in as seconds since the epoch. ``run``'s samples (``load_samples``) keep
the window at ``sampleEvery``; past it, only these buckets stay: per VM a fixed-step array,
``forecast.history / bucket`` slots (2,016 for 7d at 5m), each the mean of the rates that
held inside the bucket, or unknown (NaN) when they cover less than half of it, never zero. A
bucket is folded once, at the first sample after it ends; the readings kept reach back over it
(:func:`keep_seconds`). A VM follows its name across hosts, as its window does; another
domain of the name (a new UUID) starts an empty row; a VM with no known bucket left in the
history is dropped. Kept as half-precision floats: 2 bytes a bucket, 4 MB a week of 1,000 VMs
(a relative rounding of 0.05%, far below what a forecast can tell).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reconciler.core.forecast import MAX_POINTS, phase_step
from reconciler.core.load_view import max_gap
from reconciler.core.load_window import Reading, Span, spans_of_readings
from reconciler.model.load import MIN_COVERED, LoadSpec

BUCKET = 300.0
"""Seconds a bucket of the history stands for with a daily period: the step a forecast reads,
as Prometheus's."""
DTYPE = np.float16
"""How a bucket is kept: half precision, 2 bytes."""

Values = npt.NDArray[np.float16]


@dataclass(frozen=True, slots=True, eq=False)
class LoadHistory:
    """Every VM's buckets: row ``i`` is ``names[i]``'s; column ``slots - 1`` is bucket
    ``end`` (the seconds ``[end x bucket, (end + 1) x bucket)``), each column before it the
    bucket before."""

    cluster: str
    end: int
    names: tuple[str, ...]
    uuids: tuple[str, ...]
    values: Values
    """Shape ``(len(names), slots)``; NaN: unknown."""
    bucket: float = BUCKET
    """Seconds a bucket stands for (:func:`width`)."""

    @property
    def slots(self) -> int:
        return int(self.values.shape[1])


def width(spec: LoadSpec) -> float:
    """Seconds a bucket stands for: 5 minutes; with a seasonal ``period`` shorter than 4h a
    48th of it (at least ``sampleEvery``), so that a short cycle's shape is kept; never so
    narrow that ``history`` takes more than ``MAX_POINTS`` buckets."""
    history = spec.forecast.history.total_seconds()
    step = phase_step(spec)
    if step < BUCKET:
        step = min(BUCKET, max(step, spec.sample_every.total_seconds()))
    return max(step, history / MAX_POINTS)


def slots_of(spec: LoadSpec) -> int:
    """Buckets kept per VM: ``forecast.history`` over the bucket's width."""
    return max(1, round(spec.forecast.history.total_seconds() / width(spec)))


def keep_seconds(spec: LoadSpec) -> float:
    """How far back ``run``'s readings must reach so that a bucket is folded whole: the window
    (or a bucket, if longer) and the longest gap before it."""
    return max(spec.window.total_seconds(), width(spec)) + max_gap(spec)


def empty(cluster: str, spec: LoadSpec, end: int) -> LoadHistory:
    return LoadHistory(
        cluster,
        end,
        (),
        (),
        np.full((0, slots_of(spec)), np.nan, dtype=DTYPE),
        width(spec),
    )


def bucket_mean(spans: Iterable[Span], start: float, end: float) -> float:
    """The mean of ``spans`` inside ``[start, end)``, each weighted by how long it held there;
    NaN when they cover less than ``MIN_COVERED`` of it."""
    covered = 0.0
    total = 0.0
    for s in spans:
        inside = min(s.end, end) - max(s.start, start)
        if inside > 0:
            covered += inside
            total += s.rate * inside
    if covered <= 0 or covered < MIN_COVERED * (end - start):
        return math.nan
    return total / covered


def folded(
    history: LoadHistory | None,
    cluster: str,
    spec: LoadSpec,
    series: Mapping[str, Sequence[Reading]],
    uuids: Mapping[str, str],
    taken: float,
) -> LoadHistory | None:
    """``history`` with the buckets completed by ``taken`` folded from ``series`` (VM name ->
    its readings, as ``run`` keeps them; ``uuids``: VM name -> its domain's UUID); None when
    no bucket completed since (nothing to write). A history of buckets of another width (the
    period changed) starts again."""
    bucket = width(spec)
    upto = math.floor(taken / bucket) - 1  # the last bucket that has ended
    n = slots_of(spec)
    first = history is None
    if history is not None and history.bucket != bucket:
        history = None  # another grid: its buckets say nothing of this one's
    if history is None:
        history = empty(cluster, spec, upto - 1)
    upto = max(upto, history.end)  # a clock gone back folds nothing twice
    if upto == history.end and n == history.slots:
        return None
    shift = upto - history.end
    rows = dict(zip(history.names, range(len(history.names)), strict=True))
    names = sorted(set(history.names) | set(series))
    values = np.full((len(names), n), np.nan, dtype=DTYPE)
    keep = min(n - shift, history.slots)  # old columns that stay, moved ``shift`` left
    if keep > 0:
        old = history.values[:, history.slots - keep :]
        for i, name in enumerate(names):
            r = rows.get(name)
            if r is not None and history.uuids[r] == uuids.get(name, history.uuids[r]):
                values[i, n - shift - keep : n - shift] = old[r]
    # the new buckets, from the readings that reach them
    fresh = min(shift, n)
    gap = max_gap(spec)
    for i, name in enumerate(names):
        readings = series.get(name)
        if not readings:
            continue
        spans = spans_of_readings(readings, gap)
        if not spans:
            continue
        began = spans[0].start
        for k in range(fresh):
            b = upto - k
            lo = b * bucket
            if lo + bucket <= began:
                break
            values[i, n - 1 - k] = bucket_mean(spans, lo, lo + bucket)
    known = np.asarray(~np.isnan(values).all(axis=1), dtype=np.bool_)
    kept = [name for i, name in enumerate(names) if known[i]]
    if first and not kept:
        return None  # nothing known yet: no file to write
    old_uuid = dict(zip(history.names, history.uuids, strict=True))
    return LoadHistory(
        cluster,
        upto,
        tuple(kept),
        tuple(uuids.get(name) or old_uuid.get(name, "") for name in kept),
        values[known],
        bucket,
    )


def points(
    history: LoadHistory | None, names: Iterable[str]
) -> dict[str, list[tuple[float, float]]]:
    """The known buckets of each of ``names`` as rate points ``(time, cores)``, each at the
    end of its bucket (standing for the bucket before it, as Prometheus's points do)."""
    if history is None:
        return {}
    out: dict[str, list[tuple[float, float]]] = {}
    rows = dict(zip(history.names, range(len(history.names)), strict=True))
    n = history.slots
    bucket = history.bucket
    first = (history.end - n + 2) * bucket  # the end of the first column's bucket
    for name in names:
        r = rows.get(name)
        if r is None:
            continue
        row = history.values[r].astype(np.float64)
        at = np.flatnonzero(~np.isnan(row))
        out[name] = [(first + bucket * int(k), float(row[k])) for k in at]
    return out


def bucket_of(at: float, bucket: float = BUCKET) -> int:
    """The bucket of ``bucket`` seconds that holds the instant ``at``."""
    return math.floor(at / bucket)
