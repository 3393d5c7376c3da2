"""The load over the window, read from ``run``'s samples or from Prometheus.

Each is a ``LoadReader`` (``engine/ports.py``), which ``engine/load_window.py`` puts into every
observation of a round. A load source that fails never fails the round: its VMs' load is
unknown, said in the plan, and balance does not act on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from reconciler.adapters.files.load_history import FileLoadHistory
from reconciler.adapters.files.load_samples import FileLoadSamples
from reconciler.adapters.prometheus.client import PrometheusClient
from reconciler.core import load_history, load_samples, load_view
from reconciler.core.forecast import HISTORY_STEP, history_step
from reconciler.core.load_series import Series
from reconciler.errors import ReconcilerError
from reconciler.model.load import LoadSpec, Statistic
from reconciler.model.quantity import format_duration
from reconciler.model.snapshot import Snapshot

log = logging.getLogger(__name__)

__all__ = ["HISTORY_STEP", "PrometheusLoad", "SamplesLoad"]

HOLD = (
    "no balance move on a short sample: keep `reconciler run` sampling for a window, or give "
    "apply --balance-on-sample"
)


class SamplesLoad:
    """The window ``run`` keeps in the state directory.

    ``short``: when the samples are not fresh (``run`` is not sampling), decide on the
    observation's own short sample and say so (``plan``, ``apply``, ``impact``), holding
    balance when ``hold`` (``apply`` without ``--balance-on-sample``); without it (``run``
    itself), what the samples cover is the window and the rest is unknown.
    """

    def __init__(
        self,
        store: FileLoadSamples,
        *,
        short: bool,
        hold: bool = False,
        history: FileLoadHistory | None = None,
    ) -> None:
        self.store = store
        self.short = short
        self.hold = hold
        self.history = history

    def window(self, snapshot: Snapshot, spec: LoadSpec, now: datetime) -> Snapshot:
        where = str(self.store.path.parent)
        try:
            samples = self.store.load()
        except ReconcilerError as err:
            log.warning("load samples not read: %s", err)
            if self.short:
                return self._short(snapshot, spec, err.message)
            return load_view.failed(snapshot, spec, err.message, now)
        stale = load_samples.stale(samples, spec, now, where)
        if stale is not None and self.short:
            return self._short(snapshot, spec, stale)
        series = load_samples.readings(samples) if samples is not None else {}
        history, bucket = self._history(snapshot, spec)
        return load_view.from_readings(
            snapshot, spec, series, now, history=history, history_step=bucket
        )

    def _history(
        self, snapshot: Snapshot, spec: LoadSpec
    ) -> tuple[dict[str, list[tuple[float, float]]] | None, float]:
        """The buckets ``run`` keeps (``statistic: forecast``) and their width; a history that
        cannot be read leaves every VM without a forecast (the window's mean stands), not its
        load unknown."""
        if spec.statistic is not Statistic.FORECAST or self.history is None:
            return None, load_history.BUCKET
        try:
            kept = self.history.load()
        except ReconcilerError as err:
            log.warning("no forecast, the history was not read: %s", err)
            return None, load_history.BUCKET
        bucket = load_history.BUCKET if kept is None else kept.bucket
        return load_history.points(kept, (vm.name for vm in snapshot.vms)), bucket

    def _short(self, snapshot: Snapshot, spec: LoadSpec, why: str) -> Snapshot:
        note = (
            f"the observation's own short CPU sample, not the {format_duration(spec.window)} "
            f"window: {why}"
        )
        return load_view.short_sample(snapshot, spec, note, hold=HOLD if self.hold else None)


class PrometheusLoad:
    """The window from Prometheus: one range query for every VM (and one for the hosts'
    pressure, when the policy reads it) each time; each VM's series joined by its name and
    UUID, counted once where several series give it at once. With ``statistic: forecast``,
    one more over ``forecast.history`` at a step of 5m (a 48th of a shorter seasonal period;
    ``sampleEvery`` if longer), which the forecast learns from."""

    def __init__(self, client: Callable[[LoadSpec], PrometheusClient] | None = None) -> None:
        self._client = client or (lambda spec: PrometheusClient(spec.prometheus))

    def window(self, snapshot: Snapshot, spec: LoadSpec, now: datetime) -> Snapshot:
        end = now.timestamp()
        start = end - spec.window.total_seconds()
        step = spec.sample_every.total_seconds()
        client = self._client(spec)
        try:
            vms = client.range_query(spec.prometheus.vm_cpu, start=start, end=end, step=step)
            hosts = None
            if spec.prometheus.host_pressure is not None:
                hosts = client.range_query(
                    spec.prometheus.host_pressure, start=start, end=end, step=step
                )
            every = history_step(spec)
            history = self._history(client, spec, end, every)
        except ReconcilerError as err:
            log.warning("load over the window unknown: %s", err)
            return load_view.failed(snapshot, spec, err.message, now)
        finally:
            client.close()
        return load_view.from_series(
            snapshot,
            spec,
            vms,
            now,
            host_series=hosts,
            history_series=history,
            history_step=every,
        )

    @staticmethod
    def _history(
        client: PrometheusClient, spec: LoadSpec, end: float, every: float
    ) -> list[Series] | None:
        """The VMs over ``forecast.history`` (``statistic: forecast``), on the step's grid so
        that the same history gives the same forecast; a query that fails leaves every VM
        without a forecast (the window's mean stands), not its load unknown."""
        if spec.statistic is not Statistic.FORECAST:
            return None
        last = end // every * every
        try:
            return client.range_query(
                spec.prometheus.vm_cpu,
                start=last - spec.forecast.history.total_seconds() + every,
                end=last,
                step=every,
            )
        except ReconcilerError as err:
            log.warning("no forecast, the history was not read: %s", err)
            return []
