"""The Prometheus metrics of ``reconciler run``, with the names dashboards share.

Kept in a registry of their own (not prometheus_client's global one), so several loops in one
test process do not collide and ``/metrics`` shows only these.
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from reconciler.engine.execute import Event
from reconciler.model.plan import HostLoad, Plan, PlanLoad
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import MoveOutcome, ReconcileStatus, RoundOutcome

DUPLICATE_KINDS = ("running", "defined")
"""``reconciler_duplicate_vms{kind}``: running on two hosts, or defined on two."""
ROLLOUT_PHASES = ("NotStarted", "InProgress", "Paused", "Blocked", "Stopped", "Done")
"""The phases of a rollout (``reconciler.core.rollout.Phase``), each a series of its own."""
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: an observe-only round takes well under a second, one with migrations minutes."""


class Metrics:
    """Every metric of one cluster's loop; methods are safe to call from any thread."""

    def __init__(self, cluster: str, registry: CollectorRegistry | None = None) -> None:
        self.cluster = cluster
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reconciles = Counter(
            "reconciler_reconciles_total",
            "Reconcile rounds, by result (ok or error).",
            ["cluster", "result"],
            registry=r,
        )
        self.duration = Histogram(
            "reconciler_reconcile_duration_seconds",
            "Wall time of a reconcile round.",
            ["cluster"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.migrations = Counter(
            "reconciler_migrations_total",
            "Migrations by outcome (succeeded, failed, skipped, aborted).",
            ["cluster", "outcome"],
            registry=r,
        )
        self.fences = Counter(
            "reconciler_fence_total",
            "Fence commands run, by host and result (ok, failed, timeout).",
            ["cluster", "host", "result"],
            registry=r,
        )
        self.spread = Gauge(
            "reconciler_spread",
            "Max - min host score within one CPU architecture, percent.",
            ["cluster", "arch"],
            registry=r,
        )
        self.spread_threshold = Gauge(
            "reconciler_spread_threshold",
            "The policy's threshold for the spread within one CPU architecture, percent.",
            ["cluster", "arch"],
            registry=r,
        )
        self.spread_rounds_over = Gauge(
            "reconciler_spread_rounds_over",
            "Consecutive rounds the spread has been over the threshold, the last one included.",
            ["cluster", "arch"],
            registry=r,
        )
        self.spread_hold_rounds = Gauge(
            "reconciler_spread_hold_rounds",
            "The policy's holdRounds: rounds over the threshold before balancing starts.",
            ["cluster", "arch"],
            registry=r,
        )
        self.host_score = Gauge(
            "reconciler_host_score",
            "Load score of a host, percent.",
            ["cluster", "host"],
            registry=r,
        )
        self.host_reachable = Gauge(
            "reconciler_host_reachable",
            "1 when the host answered the last observation, else 0.",
            ["cluster", "host"],
            registry=r,
        )
        self.host_last_observed = Gauge(
            "reconciler_host_last_observed_timestamp_seconds",
            "Unix time the host was last observed reachable.",
            ["cluster", "host"],
            registry=r,
        )
        self.duplicates = Gauge(
            "reconciler_duplicate_vms",
            "VMs the last observation found running on two hosts (kind=running) or defined on "
            "two outside a move (kind=defined).",
            ["cluster", "kind"],
            registry=r,
        )
        self.standby = Gauge(
            "reconciler_hosts_standby",
            "Hosts power saving has powered off (docs/power.md): capacity that costs a "
            "power-on.",
            ["cluster"],
            registry=r,
        )
        self.power_failures = Counter(
            "reconciler_power_failures_total",
            "Power actions on a host that failed (docs/power.md), by action: on (the BMC "
            "refused or did not answer, or the boot took longer than bootTimeout), off (the BMC "
            "refused or did not say off).",
            ["cluster", "host", "action"],
            registry=r,
        )
        self.load_unknown = Gauge(
            "reconciler_load_unknown",
            "Running VMs (kind=vm) and hosts (kind=host) whose load over the window is unknown "
            "in the last plan; balance leaves them alone.",
            ["cluster", "kind"],
            registry=r,
        )
        self.forecast_error = Gauge(
            "reconciler_forecast_error_cores",
            "statistic: forecast: the forecast's mean absolute error over the last day, cores, "
            "averaged over the VMs it could be measured for (which=forecast), and the same of "
            "the window's mean held over the horizon (which=window).",
            ["cluster", "which"],
            registry=r,
        )
        self.forecast_error_ratio = Gauge(
            "reconciler_forecast_error_ratio",
            "statistic: forecast: the forecast's error over the window's (which=forecast over "
            "which=window above); below 1 the forecast tells the coming load better.",
            ["cluster"],
            registry=r,
        )
        self.forecast_vms = Gauge(
            "reconciler_forecast_vms",
            "statistic: forecast: VMs whose figure blends their forecast in (use=used), with too "
            "little history (use=no_history) and whose forecast erred too much (use=ignored).",
            ["cluster", "use"],
            registry=r,
        )
        self.host_cpu = Gauge(
            "reconciler_host_cpu_percent",
            "CPU utilisation of a host's VMs in the last plan (basis used), percent: over the "
            "policy's load window (over=window, while known) and in the observation's own "
            "short sample (over=sample).",
            ["cluster", "host", "over"],
            registry=r,
        )
        self.rollout_phase = Gauge(
            "reconciler_rollout_phase",
            "1 for the phase a rollout is in (NotStarted, InProgress, Paused, Blocked, Stopped, "
            "Done), 0 for the others.",
            ["cluster", "rollout", "phase"],
            registry=r,
        )
        self.rollout_hosts_out = Gauge(
            "reconciler_rollout_hosts_out",
            "Hosts a rollout holds out of service now (drained, being worked on).",
            ["cluster", "rollout"],
            registry=r,
        )
        self.leader = Gauge(
            "reconciler_leader",
            "1 on the active instance, 0 on a standby.",
            ["cluster"],
            registry=r,
        )
        self.migration_remaining = Gauge(
            "reconciler_migration_remaining_bytes",
            "Memory a running migration still has to send in its current pass (bytes).",
            ["cluster", "vm"],
            registry=r,
        )
        self.migration_dirty_rate = Gauge(
            "reconciler_migration_dirty_rate_bytes",
            "Memory the guest of a running migration writes per second (bytes/s).",
            ["cluster", "vm"],
            registry=r,
        )
        self.migration_iteration = Gauge(
            "reconciler_migration_iteration",
            "The pass over memory a running migration is in (1: the first).",
            ["cluster", "vm"],
            registry=r,
        )
        self.migration_throttle = Gauge(
            "reconciler_migration_throttle_percent",
            "Share of a migrating guest's vCPU time auto-converge holds back.",
            ["cluster", "vm"],
            registry=r,
        )
        self.migration_post_copy = Gauge(
            "reconciler_migration_post_copy",
            "1 once a running migration has switched to post-copy.",
            ["cluster", "vm"],
            registry=r,
        )
        self._lock = threading.Lock()
        self._last_counted: object = None
        # Zero series exist from the start, so rate() and absent() work before the first round.
        for result in ("ok", "error"):
            self.reconciles.labels(cluster, result)
        for outcome in MoveOutcome:
            self.migrations.labels(cluster, outcome.value)
        self.leader.labels(cluster).set(0)
        for kind in DUPLICATE_KINDS:
            self.duplicates.labels(cluster, kind).set(0)

    def record_fence(self, host: str, result: str) -> None:
        self.fences.labels(self.cluster, host, result).inc()

    def record_power_failure(self, host: str, action: str) -> None:
        self.power_failures.labels(self.cluster, host, action).inc()

    def set_leader(self, leader: bool) -> None:
        self.leader.labels(self.cluster).set(1 if leader else 0)

    def record_error(self, seconds: float) -> None:
        self.reconciles.labels(self.cluster, "error").inc()
        self.duration.labels(self.cluster).observe(seconds)

    def record_rollouts(self, status: ReconcileStatus) -> None:
        """The phase and hosts out of each rollout the round's status names."""
        for state in status.rollouts:
            for phase in ROLLOUT_PHASES:
                value = 1 if phase == state.phase else 0
                self.rollout_phase.labels(self.cluster, state.rollout, phase).set(value)
            self.rollout_hosts_out.labels(self.cluster, state.rollout).set(len(state.out))

    def record_round(self, status: ReconcileStatus, seconds: float) -> None:
        """Count one finished round and the moves of its result (each result only once)."""
        self.record_rollouts(status)
        self.standby.labels(self.cluster).set(len(status.standby))
        result = status.last_result
        failed = result is not None and result.outcome is RoundOutcome.FAILED
        self.reconciles.labels(self.cluster, "error" if failed else "ok").inc()
        self.duration.labels(self.cluster).observe(seconds)
        for kind in DUPLICATE_KINDS:
            running = kind == "running"
            count = sum(d.running is running for d in status.duplicates)
            self.duplicates.labels(self.cluster, kind).set(count)
        if result is None:
            return
        key = (result.started_at, result.finished_at, result.plan_id)
        with self._lock:
            if key == self._last_counted:
                return
            self._last_counted = key
        for move in result.moves:
            self.migrations.labels(self.cluster, move.outcome.value).inc()

    def _migration_gauges(self) -> tuple[Gauge, ...]:
        return (
            self.migration_remaining,
            self.migration_dirty_rate,
            self.migration_iteration,
            self.migration_throttle,
            self.migration_post_copy,
        )

    def record_event(self, event: Event) -> None:
        """The executor's ``on_event`` hook: each running migration's figures, while it runs."""
        vm = event.move.vm
        if event.kind == "progress" and event.progress is not None:
            p = event.progress
            figures = (p.memory_remaining, p.dirty_rate, p.iteration, p.throttle, p.post_copy)
            for gauge, value in zip(self._migration_gauges(), figures, strict=True):
                gauge.labels(self.cluster, vm).set(float(value))
        elif event.kind in ("done", "skip"):
            for gauge in self._migration_gauges():
                with contextlib.suppress(KeyError):
                    gauge.remove(self.cluster, vm)

    def record_observation(self, plan: Plan, snapshot: Snapshot) -> None:
        """The round's ``on_plan`` hook: host and spread gauges of this round."""
        self.record_snapshot(snapshot)
        self.record_plan(plan)

    def record_snapshot(self, snapshot: Snapshot) -> None:
        for host in snapshot.hosts:
            self.host_reachable.labels(self.cluster, host.name).set(1 if host.reachable else 0)
            if host.reachable:
                self.host_last_observed.labels(self.cluster, host.name).set(
                    snapshot.taken_at.timestamp()
                )

    def record_plan(self, plan: Plan) -> None:
        load = plan.load  # None: basis allocated, no load is read
        self.load_unknown.labels(self.cluster, "vm").set(len(load.unknown_vms) if load else 0)
        self.load_unknown.labels(self.cluster, "host").set(len(load.unknown_hosts) if load else 0)
        self._record_forecast(load)
        for spread in plan.spreads:
            self.spread.labels(self.cluster, spread.arch).set(spread.before)
            self.spread_threshold.labels(self.cluster, spread.arch).set(spread.threshold)
            self.spread_rounds_over.labels(self.cluster, spread.arch).set(spread.rounds_over)
            self.spread_hold_rounds.labels(self.cluster, spread.arch).set(spread.hold_rounds)
        for host in plan.hosts:
            if host.known:
                self.host_score.labels(self.cluster, host.host).set(host.score_before)
            else:  # an unknown host has no score; a stale one would mislead a dashboard
                with contextlib.suppress(KeyError):
                    self.host_score.remove(self.cluster, host.host)
            self._record_host_cpu(host, load)

    def _record_forecast(self, load: PlanLoad | None) -> None:
        """Per cluster, never per VM: a fleet of thousands of VMs would make thousands of
        series; each VM's error is in the plan (``load.forecast.errors``)."""
        f = load.forecast if load is not None else None
        for use, count in (
            ("used", len(f.used) if f else None),
            ("no_history", len(f.no_history) if f else None),
            ("ignored", len(f.ignored) if f else None),
        ):
            self._set_or_remove(self.forecast_vms, count, use)
        error, held = (f.error, f.window_error) if f else (None, None)
        self._set_or_remove(self.forecast_error, error, "forecast")
        self._set_or_remove(self.forecast_error, held, "window")
        ratio = error / held if error is not None and held else None
        self._set_or_remove(self.forecast_error_ratio, ratio)

    def _set_or_remove(self, gauge: Gauge, value: float | None, *labels: str) -> None:
        if value is None:
            with contextlib.suppress(KeyError):
                gauge.remove(self.cluster, *labels)
        else:
            gauge.labels(self.cluster, *labels).set(value)

    def _record_host_cpu(self, host: HostLoad, load: PlanLoad | None) -> None:
        """over=window: the figure balance decides on, only while the host's window is known;
        over=sample: the short sample (beside the window, or what the plan read without one)."""
        window = sample = None
        if host.known and load is not None:
            if load.basis == "window":
                window = host.cpu_before if host.load_known else None
                sample = host.cpu_now
            else:
                sample = host.cpu_before
        for over, value in (("window", window), ("sample", sample)):
            if value is None:
                with contextlib.suppress(KeyError):
                    self.host_cpu.remove(self.cluster, host.host, over)
            else:
                self.host_cpu.labels(self.cluster, host.host, over).set(value)
