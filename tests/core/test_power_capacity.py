"""Power-on when capacity is needed, not only by demand: a dead host's VMs with no room on the
hosts in service, recovery's reserve broken while a host is down, a host held out by
maintenance or a rollout whose VMs find no room. The standby hosts powered on are the most
efficient first and no more than the need; emptying stops while capacity is short."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.power import HostFacts, power_next
from reconciler.core.power_need import lost_vms, shortfall, to_power_on
from reconciler.model.desired import DesiredState
from reconciler.model.power import HostCapacity, PowerBook, StandbyHost
from reconciler.model.recovery import HostRecovery, RecoveryState, SavedVm
from reconciler.model.snapshot import Snapshot
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

GIB = 2**30
HOSTS = [f"h{i}" for i in range(6)]
FACTS = {h: HostFacts(idle_watts=100 + 10 * i) for i, h in enumerate(HOSTS)}
"""h0 the most efficient, h5 the least."""
ASLEEP = ("h4", "h5")
BIG = HostCapacity(cpus=16, memory=64 * GIB)


def cluster(*, maintenance: str | None = None, reserve: int = 0) -> DesiredState:
    return desired(
        [host(h, maintenance=h == maintenance) for h in HOSTS],
        power={"mode": "apply", "powerOffAfter": "30m", "powerOnAfter": "5m"},
        recovery={"reserveHosts": reserve},
    )


def standby_book(**update: object) -> PowerBook:
    """h4 and h5 asleep (their capacity remembered from when they served)."""
    return PowerBook(
        standby={h: StandbyHost(since=NOW - timedelta(hours=3), why="x") for h in ASLEEP},
        capacity=dict.fromkeys(ASLEEP, BIG),
    ).model_copy(update=update)


def looked(*, down: tuple[str, ...] = ("h0",), used_gib: float = 40) -> Snapshot:
    """h1-h3 answer, each carrying ``used_gib`` of memory; ``down`` and the standby hosts do
    not answer."""
    silent = {*down, *ASLEEP}
    up = [h for h in HOSTS if h not in silent]
    return snapshot(
        [host_state(h, reachable=h not in silent) for h in HOSTS],
        [vm(f"on-{h}", h, vcpus=2, memory_gib=used_gib, cpu_used=0.5) for h in up],
    )


def saved(
    name: str, memory_gib: float, *, on: str = "h0", blockers: list[str] | None = None
) -> SavedVm:
    return SavedVm(
        name=name,
        uuid=f"uuid-{name}",
        host=on,
        running=True,
        vcpus=2,
        memory=int(memory_gib * GIB),
        blockers=blockers or [],
        xml="<domain/>",
        seen_at=NOW - timedelta(hours=1),
    )


def test_a_dead_hosts_vms_without_room_power_the_most_efficient_standby_host_on() -> None:
    lost = [saved("db-1", 20), saved("db-2", 20)]
    decided = power_next(
        cluster(), looked(), standby_book(), NOW, facts=FACTS, down=("h0",), lost=lost
    )
    assert decided.power_on == ("h4",)  # one host takes both; h4 idles lower than h5
    assert decided.why["h4"].startswith("capacity needed: recovery: 2 VM(s) of h0")
    assert "h4" in decided.book.booting


def test_a_dead_hosts_vms_that_fit_power_nothing_on() -> None:
    lost = [saved("small", 4)]
    decided = power_next(
        cluster(), looked(), standby_book(), NOW, facts=FACTS, down=("h0",), lost=lost
    )
    assert decided.power_on == ()


def test_a_vm_that_cannot_start_elsewhere_powers_nothing_on() -> None:
    lost = [saved("local", 40, blockers=["local disk /var/lib/x.qcow2"])]
    decided = power_next(
        cluster(), looked(), standby_book(), NOW, facts=FACTS, down=("h0",), lost=lost
    )
    assert decided.power_on == ()


def test_a_host_already_booting_counts_before_another_is_powered_on() -> None:
    lost = [saved("db-1", 20), saved("db-2", 20)]
    book = standby_book(
        standby={"h5": StandbyHost(since=NOW, why="x")}, booting={"h4": NOW - timedelta(minutes=2)}
    )
    decided = power_next(cluster(), looked(), book, NOW, facts=FACTS, down=("h0",), lost=lost)
    assert decided.power_on == ()


def test_more_than_one_standby_host_when_one_is_not_enough() -> None:
    lost = [saved(f"db-{i}", 30) for i in range(2)]  # 30 GiB each: one per host
    decided = power_next(
        cluster(), looked(), standby_book(), NOW, facts=FACTS, down=("h0",), lost=lost
    )
    assert decided.power_on == ("h4", "h5")
    assert "still short" not in decided.why["h5"]
    more = [*lost, saved("db-9", 30)]
    short = power_next(
        cluster(), looked(), standby_book(), NOW, facts=FACTS, down=("h0",), lost=more
    )
    assert short.power_on == ("h4", "h5")
    assert "still short" in short.why["h4"]


def test_the_reserve_broken_while_a_host_is_down_powers_a_host_on() -> None:
    d = cluster(reserve=1)
    decided = power_next(d, looked(), standby_book(), NOW, facts=FACTS, down=("h0",))
    assert decided.power_on == ("h4",)
    assert "reserve of 1 host(s) is not met with h0 down" in decided.why["h4"]
    # without a host down the reserve is consolidation's business, not a power-on's
    quiet = power_next(d, looked(down=()), standby_book(), NOW, facts=FACTS)
    assert quiet.power_on == ()


def test_a_host_in_maintenance_whose_vms_find_no_room_powers_a_host_on_and_stops_emptying() -> None:
    d = cluster(maintenance="h3")
    book = standby_book(emptying={"h2": NOW - timedelta(minutes=20)})
    decided = power_next(d, looked(down=(), used_gib=40), book, NOW, facts=FACTS)
    assert decided.power_on == ("h4",)
    assert "on-h3" in decided.why["h4"]
    assert "maintenance" in decided.why["h4"]
    assert decided.empty == ()
    assert decided.book.emptying == {}
    assert "capacity is short" in decided.why["h2"]


def test_a_host_a_rollout_holds_whose_vms_find_no_room_powers_a_host_on() -> None:
    decided = power_next(
        cluster(), looked(down=(), used_gib=40), standby_book(), NOW, facts=FACTS, held=("h3",)
    )
    assert decided.power_on == ("h4",)
    assert "rollout or drain" in decided.why["h4"]


def test_high_demand_powers_on_only_what_brings_it_back_into_the_band() -> None:
    """Standby hosts do not answer: what they bring back is what the book remembers."""
    asleep = ("h3", "h4", "h5")
    busy = snapshot(
        [host_state(h, reachable=h not in asleep) for h in HOSTS],
        [vm(f"v-{h}", h, vcpus=16, cpu_used=13.0, memory_gib=1) for h in HOSTS[:3]],
    )
    book = PowerBook(
        standby={h: StandbyHost(since=NOW - timedelta(hours=3), why="x") for h in asleep},
        capacity=dict.fromkeys(asleep, BIG),
        high_since=NOW - timedelta(minutes=10),
    )
    decided = power_next(cluster(), busy, book, NOW, facts=FACTS)
    assert decided.power_on == ("h3",)  # 39 cores on 48 CPUs is 81%; on 64 it is 61%


def test_no_host_is_emptied_while_a_host_is_down() -> None:
    idle = looked(used_gib=1)
    book = standby_book(low_since=NOW - timedelta(hours=2), standby={})
    decided = power_next(cluster(), idle, book, NOW, facts=FACTS, down=("h0",))
    assert decided.empty == ()
    calm = power_next(cluster(), looked(down=(), used_gib=1), book, NOW, facts=FACTS)
    assert calm.empty  # the same idle cluster with every host up does empty one


def test_lost_vms_are_those_of_hosts_recovery_tracks_that_run_nowhere() -> None:
    state = RecoveryState(
        cluster="test",
        vms={v.uuid: v for v in [saved("a", 1), saved("b", 1), saved("c", 1, on="h1")]},
        hosts={
            "h0": HostRecovery(unreachable_since=NOW),
            "h4": HostRecovery(unreachable_since=NOW),
        },
    )
    seen = snapshot(
        [host_state(h, reachable=h not in ("h0", "h4")) for h in HOSTS],
        [vm("b", "h2").model_copy(update={"uuid": "uuid-b"})],
    )
    down, lost = lost_vms(state, seen, asleep={"h4"})
    assert down == ("h0",)  # h4 is asleep on purpose
    assert [v.name for v in lost] == ["a"]  # b runs on h2 already


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 50), max_size=6), booting=st.booleans())
def test_capacity_power_ons_are_enough_and_no_more(sizes: list[int], booting: bool) -> None:
    lost = [saved(f"vm{i}", s) for i, s in enumerate(sizes)]
    book = standby_book()
    if booting:
        book = standby_book(standby={"h5": StandbyHost(since=NOW, why="x")}, booting={"h4": NOW})
    d = cluster()
    decided = power_next(d, looked(), book, NOW, facts=FACTS, down=("h0",), lost=lost)
    assert set(decided.power_on) <= set(book.standby)
    assert decided.empty == ()
    if decided.power_on:
        # the last one chosen was needed: the hosts before it alone do not cover the need
        need = shortfall(
            d, looked(), NOW, out={*book.standby, *book.booting}, down=("h0",), lost=lost
        )
        booted = {h: BIG for h in book.booting}
        fewer = [(h, BIG) for h in decided.power_on[:-1]]
        _, covered = to_power_on(need, fewer, booted, host_limit=90, band_high=81, reserve_hosts=0)
        assert not covered
