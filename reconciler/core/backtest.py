"""Replaying recorded observations under a desired state, as ``run`` would have acted.

What "as ``run`` would" means here (docs/review.md):

- **Rounds.** A round at every recorded snapshot, and, until the next one was recorded, a
  round every ``spec.interval`` of the replayed policy on that same snapshot: ``run`` records
  only what changed beyond noise, so a quiet hour is one snapshot but four rounds at 15m, and
  ``holdRounds`` counts rounds, not snapshots. The last snapshot is replayed up to ``until``.
- **Acting.** Each round plans with ``plan()`` on the snapshot as the replay has changed it,
  with the imbalance streak the previous round left (``holdRounds``). Its moves within
  ``batch`` (not the deferred ones) are applied at once and all succeed: the VMs run on their
  targets from the next round on, carry a move record (``cooldown``), and the placement of
  the replayed revision follows them, as the audit commit of ``run`` would. A policy in
  ``apply`` mode acts only inside its ``windows``; ``observe`` and ``propose`` are replayed as
  if every round's moves were carried out (merging a proposal moves the same VMs).
- **The recording's own moves.** Where a recorded snapshot shows a VM on another host because
  the reconciler moved it (its move count grew), the replay keeps it where the replay put it:
  each revision decides its own moves. A VM moved by someone else (its count unchanged),
  created or removed is taken as recorded.
- Loads are the recorded ones and travel with the VM: with ``basis: used`` and a recorded
  load over the window (``Snapshot.load``), the window's, so a threshold is judged on what
  the VMs did over it, not on one look.
- **Counted**: moves per day of the period, and moves that took a VM back to the host its
  previous move left (ping-pong; the balance backoff holds those, mandatory moves do not).

Pure: the snapshots and the period are parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.core import backoff, planner
from reconciler.core.hugepages import pages_moved
from reconciler.core.windows import mode_now
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.impact import Backtest, BacktestRow, SideRound, SideTotals
from reconciler.model.placement import PlacementSpec
from reconciler.model.plan import Move, Plan
from reconciler.model.policy import Mode
from reconciler.model.snapshot import ReconcilerState, Snapshot, VmState

MAX_ROUNDS = 50_000
"""Rounds replayed per revision at most (a week at a 15m interval is 672)."""


@dataclass
class _Side:
    """One revision's replayed world."""

    desired: DesiredState
    hosts: dict[str, str] = field(default_factory=dict)
    """VM -> where the replay runs it."""
    records: dict[str, ReconcilerState] = field(default_factory=dict)
    seen_host: dict[str, str] = field(default_factory=dict)
    """VM -> where the last recorded snapshot saw it."""
    seen_moves: dict[str, int] = field(default_factory=dict)
    streak: dict[str, int] = field(default_factory=dict)
    since: datetime | None = None
    last_at: datetime | None = None

    def observe(self, snapshot: Snapshot) -> None:
        """Take in a recorded snapshot: new, gone and externally moved VMs."""
        vms = _unique(snapshot.vms)
        for vm in vms:
            name = vm.name
            if name not in self.hosts:
                self.hosts[name] = vm.host
                self.records[name] = vm.reconciler.model_copy(update={"intent": None})
            elif vm.host != self.seen_host[name] and vm.reconciler.moves <= self.seen_moves[name]:
                self.hosts[name] = vm.host  # moved by someone else: a fact of the world
            self.seen_host[name] = vm.host
            self.seen_moves[name] = vm.reconciler.moves
        names = {vm.name for vm in vms}
        for gone in [n for n in self.hosts if n not in names]:
            for table in (self.hosts, self.records, self.seen_host, self.seen_moves):
                table.pop(gone, None)

    def view(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` as the replay has changed it."""
        reachable = {h.name for h in snapshot.hosts if h.reachable}
        vms = []
        moves = []
        for vm in _unique(snapshot.vms):
            host = self.hosts.get(vm.name, vm.host)
            host = host if host in reachable else vm.host
            if host != vm.host:
                moves.append((vm, host))
            vms.append(
                vm.model_copy(
                    update={"host": host, "reconciler": self.records.get(vm.name, vm.reconciler)}
                )
            )
        hosts = pages_moved(snapshot.hosts, moves)
        return snapshot.model_copy(update={"vms": vms, "hosts": hosts, "in_flight": []})

    def round(self, snapshot: Snapshot, at: datetime) -> SideRound:
        history = History(
            imbalance_rounds=dict(self.streak),
            observed_since=self.since,
            last_round_at=self.last_at,
        )
        plan = planner.plan(self.desired, self.view(snapshot), history, now=at)
        policy = self.desired.policy
        acting = policy.spec.mode is not Mode.APPLY or mode_now(policy, at) is Mode.APPLY
        applied = plan.moves if acting else []
        back = sum(1 for m in applied if self._back(m.vm, m.target))
        self._apply(plan, applied, at)
        self.streak = dict(plan.imbalance_rounds)
        self.last_at = at
        return SideRound(
            acted=bool(applied),
            moves=len(applied),
            bytes=sum(m.memory for m in applied),
            moved_back=back,
            deferred=len(plan.deferred) + (0 if acting else len(plan.moves)),
            spread={s.arch: s.before for s in plan.spreads},
            rounds_over=dict(plan.imbalance_rounds),
        )

    def _back(self, vm: str, target: str) -> bool:
        record = self.records.get(vm)
        return record is not None and record.last_moved_from == target

    def _apply(self, plan: Plan, moves: Sequence[Move], at: datetime) -> None:
        placement = dict(self.desired.placement.spec.vms)
        for m in moves:
            self.hosts[m.vm] = m.target
            old = self.records.get(m.vm, ReconcilerState())
            self.records[m.vm] = backoff.recorded(
                old,
                reason=m.reason.value,
                source=m.source,
                target=m.target,
                at=at,
                plan_id=plan.plan_id,
            )
            if m.vm in placement:
                placement[m.vm] = m.target
        if moves and placement != self.desired.placement.spec.vms:
            spec = PlacementSpec(vms=placement)
            self.desired = self.desired.model_copy(
                update={"placement": self.desired.placement.model_copy(update={"spec": spec})}
            )


def _unique(vms: Sequence[VmState]) -> list[VmState]:
    """Each VM once (a VM mid-migration is listed on both hosts: its first sighting)."""
    seen: dict[str, VmState] = {}
    for vm in sorted(vms, key=lambda v: (v.name, v.host)):
        seen.setdefault(vm.name, vm)
    return list(seen.values())


def _replay_side(
    desired: DesiredState, snapshots: Sequence[Snapshot], until: datetime
) -> list[tuple[datetime, Snapshot, bool, SideRound]]:
    side = _Side(desired, since=snapshots[0].taken_at if snapshots else None)
    every = desired.policy.spec.interval
    out: list[tuple[datetime, Snapshot, bool, SideRound]] = []
    for i, snapshot in enumerate(snapshots):
        side.observe(snapshot)
        last = i + 1 == len(snapshots)
        end = until if last else snapshots[i + 1].taken_at
        at = snapshot.taken_at
        out.append((at, snapshot, True, side.round(snapshot, at)))
        at += every
        while len(out) < MAX_ROUNDS and (at <= end if last else at < end):
            out.append((at, snapshot, False, side.round(snapshot, at)))
            at += every
    return out


def replay(
    base: DesiredState,
    head: DesiredState,
    snapshots: Sequence[Snapshot],
    *,
    since: datetime,
    until: datetime,
) -> Backtest:
    """Both revisions over ``snapshots`` (oldest first, taken from ``since`` to ``until``)."""
    ordered = sorted(snapshots, key=lambda s: s.taken_at)
    sides = {
        name: _replay_side(desired, ordered, until)
        for name, desired in (("base", base), ("head", head))
    }
    rows: dict[tuple[datetime, bool], dict[str, object]] = {}
    for name, rounds in sides.items():
        for at, snapshot, recorded, result in rounds:
            row = rows.setdefault((at, not recorded), {"observed_at": snapshot.taken_at})
            row[name] = result
    out = [
        BacktestRow(
            at=at,
            observed_at=row["observed_at"],  # type: ignore[arg-type]
            recorded=not synthetic,
            base=row.get("base"),  # type: ignore[arg-type]
            head=row.get("head"),  # type: ignore[arg-type]
        )
        for (at, synthetic), row in sorted(rows.items(), key=lambda kv: kv[0])
    ]

    days = max((until - since).total_seconds() / 86400, 1e-9)

    def totals(name: str) -> SideTotals:
        acc = SideTotals(rounds=0, acted=0, moves=0, bytes=0)
        peak: dict[str, float] = {}
        for _, _, _, r in sides[name]:
            acc = SideTotals(
                rounds=acc.rounds + 1,
                acted=acc.acted + r.acted,
                moves=acc.moves + r.moves,
                bytes=acc.bytes + r.bytes,
                moved_back=acc.moved_back + r.moved_back,
            )
            for arch, value in r.spread.items():
                peak[arch] = max(peak.get(arch, value), value)
        return acc.model_copy(
            update={
                "peak_spread": dict(sorted(peak.items())),
                "moves_per_day": round(acc.moves / days, 2),
            }
        )

    return Backtest(
        since=since,
        until=until,
        snapshots=len(ordered),
        base=totals("base"),
        head=totals("head"),
        rows=out,
    )
