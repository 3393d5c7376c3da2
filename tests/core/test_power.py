"""Power saving's pure decision: hosts emptied when demand stays below the band, powered off
only once empty, powered on when demand stays above it; never an excluded host, never below
the spares, never more in standby than allowed."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.power import HostFacts, power_next
from reconciler.model.desired import DesiredState
from reconciler.model.power import PowerBook, StandbyHost
from reconciler.model.snapshot import Snapshot
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

HOSTS = [f"h{i}" for i in range(6)]


def cluster(**power: object) -> DesiredState:
    return desired(
        [host(h, labels={"rack": "a" if h != "h5" else "keep"}) for h in HOSTS],
        power={"mode": "apply", "powerOffAfter": "30m", "powerOnAfter": "5m", **power},
    )


FACTS = {h: HostFacts(idle_watts=100 + 10 * i) for i, h in enumerate(HOSTS)}


def looked(load: float, *, on: list[str] | None = None) -> Snapshot:
    """Every host up (16 CPUs each); one 16-vCPU VM on each of ``on`` but the last, each
    using ``load`` cores."""
    hosts = on or HOSTS
    return snapshot(
        [host_state(h) for h in HOSTS],
        [vm(f"v{i}", h, vcpus=16, cpu_used=load, memory_gib=1) for i, h in enumerate(hosts[:-1])],
    )


def test_low_demand_for_long_enough_empties_the_least_efficient_host_first() -> None:
    d = cluster()
    first = power_next(d, looked(0.5), PowerBook(), NOW, facts=FACTS)
    assert first.empty == ()  # below the band since now: not yet
    later = power_next(d, looked(0.5), first.book, NOW + timedelta(minutes=31), facts=FACTS)
    assert later.empty[0] == "h5"  # 150 W idle: the least efficient
    assert "below the band" in later.why["h5"]


def test_an_excluded_host_is_never_emptied() -> None:
    d = cluster(exclude={"labels": {"rack": "keep"}})
    book = PowerBook(low_since=NOW - timedelta(hours=1))
    decided = power_next(d, looked(0.1), book, NOW, facts=FACTS)
    assert decided.empty
    assert "h5" not in decided.empty


def test_a_host_being_emptied_is_powered_off_only_once_it_runs_nothing() -> None:
    d = cluster()
    book = PowerBook(emptying={"h0": NOW - timedelta(minutes=10)}, low_since=NOW)
    busy = power_next(d, looked(0.1), book, NOW, facts=FACTS)
    assert busy.power_off == ()
    empty = power_next(d, looked(0.1, on=HOSTS[1:] + ["h0"]), book, NOW, facts=FACTS)
    assert empty.power_off == ("h0",)
    assert "h0" in empty.book.standby


def test_high_demand_powers_a_standby_host_on() -> None:
    d = cluster()
    book = PowerBook(
        standby={"h4": StandbyHost(since=NOW - timedelta(hours=2), why="x")},
        high_since=NOW - timedelta(minutes=10),
    )
    decided = power_next(d, looked(16.5, on=HOSTS[:4] + ["h5"]), book, NOW, facts=FACTS)
    assert decided.power_on == ("h4",)
    assert "h4" in decided.book.booting
    assert "h4" not in decided.book.standby


def test_mode_off_powers_every_standby_host_on() -> None:
    d = cluster(mode="off")
    book = PowerBook(standby={h: StandbyHost(since=NOW, why="x") for h in ("h1", "h2")})
    decided = power_next(d, looked(0.1), book, NOW, facts=FACTS)
    assert decided.power_on == ("h1", "h2")
    assert decided.book.standby == {}


@settings(max_examples=60, deadline=None)
@given(
    load=st.floats(0, 20),
    spares=st.integers(0, 4),
    max_standby=st.one_of(st.none(), st.integers(0, 4)),
    standby=st.sets(st.sampled_from(HOSTS), max_size=3),
)
def test_never_below_the_spares_nor_above_max_standby_nor_a_busy_host_off(
    load: float, spares: int, max_standby: int | None, standby: set[str]
) -> None:
    d = cluster(minSpareHosts=spares, maxStandby=max_standby)
    book = PowerBook(
        standby={h: StandbyHost(since=NOW, why="x") for h in standby},
        low_since=NOW - timedelta(hours=2),
    )
    on = [h for h in HOSTS if h not in standby]
    seen = looked(load, on=on)
    decided = power_next(d, seen, book, NOW, facts=FACTS)
    busy = {v.host for v in seen.vms}
    assert not busy & set(decided.power_off)
    if decided.empty:
        in_service = len(on) - len(decided.empty)
        assert in_service >= 1 + spares
    if max_standby is not None:
        assert len(decided.book.standby) + len(decided.book.emptying) <= max(
            max_standby, len(standby)
        )


def test_hosts_that_cannot_be_emptied_make_way_for_the_next_candidates() -> None:
    """The least efficient hosts carry VMs a required rule binds to them: they cannot be
    emptied, and the next hosts in line are chosen instead of none."""
    from tests.core.builders import rule

    names = [f"h{i:02d}" for i in range(12)]
    gold = {"h10", "h11"}  # the least efficient: chosen first (a tenth of the hosts a round)
    d = desired(
        [host(h, labels={"tier": "gold" if h in gold else "plain"}) for h in names],
        rules=[
            rule(
                name="gold-stays",
                type="hostAffinity",
                vms={"labels": {"app": "gold"}},
                hosts={"labels": {"tier": "gold"}},
            )
        ],
        power={"mode": "apply", "powerOffAfter": "30m", "powerOnAfter": "5m"},
    )
    facts = {h: HostFacts(idle_watts=100 + 10 * i) for i, h in enumerate(names)}
    snap = snapshot(
        [host_state(h) for h in names],
        [
            vm(f"v{i}", h, vcpus=2, cpu_used=0.1, memory_gib=1,
               labels={"app": "gold" if h in gold else "web"})
            for i, h in enumerate(names)
        ],
    )  # fmt: skip
    book = PowerBook(low_since=NOW - timedelta(hours=1))
    decided = power_next(d, snap, book, NOW, facts=facts)
    assert decided.empty, "hosts that can be emptied are chosen"
    assert not set(decided.empty) & gold
    assert set(decided.empty) <= {"h09", "h08", "h07", "h06"}
