"""Rules compiled into index sets and domain counters, on fixed examples: each measure by its
definition after every step of a fixed walk, probes that leave no trace, and what
``compile_rules`` makes of each kind of rule."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from reconciler.core import rules as rules_module
from reconciler.core.rules import (
    Budget,
    DomainCounts,
    GroupKind,
    GroupRule,
    HostRule,
    compile_rules,
    describe_kind,
    domain_of,
    new_counts,
)
from reconciler.core.semantics import topology_domain
from reconciler.core.state import Model, build
from reconciler.model.rules import Rule
from reconciler.model.snapshot import InFlight, VmState
from tests.core.builders import desired, host, host_state, rule, snapshot, vm

DOMAINS = ("a", "b", "c")
# (member, from, to): a fixed walk that fills, empties and refills each domain
WALK = [
    (0, None, "a"),
    (1, None, "a"),
    (2, None, "a"),
    (3, None, "b"),
    (0, "a", "c"),
    (1, "a", "b"),
    (2, "a", "b"),
    (3, "b", "a"),
    (0, "c", "a"),
    (1, "b", "a"),
    (2, "b", "a"),
    (3, "a", "c"),
    (0, "a", None),
    (3, "c", None),
]


def _measure(kind: GroupKind, skew: int, where: dict[int, str]) -> int:
    """The violation measure by its definition, from where each member is."""
    counts = Counter(where.values())
    if kind == "antiAffinity":
        return sum(max(0, n - 1) for n in counts.values())
    if kind == "affinity":
        return len(where) - max(counts.values(), default=0)
    per_domain = [counts.get(d, 0) for d in DOMAINS]
    return max(0, max(per_domain) - min(per_domain) - skew)


def _fresh(kind: GroupKind, skew: int) -> DomainCounts:
    dc = DomainCounts(kind, skew)
    if kind == "spread":
        for d in DOMAINS:
            dc.add_domain(d)
    return dc


@pytest.mark.parametrize(
    ("kind", "skew"), [("antiAffinity", 1), ("affinity", 1), ("spread", 1), ("spread", 2)]
)
def test_each_measure_follows_its_definition_at_every_step(kind: GroupKind, skew: int) -> None:
    dc = _fresh(kind, skew)
    where: dict[int, str] = {}
    for member, source, target in WALK:
        probed = dc.key_if_moved(source, target)
        dc.shift(source, -1)
        dc.shift(target, 1)
        if target is None:
            del where[member]
        else:
            where[member] = target
        expected = _measure(kind, skew, where)
        squares = sum(n * n for n in Counter(where.values()).values())
        assert dc.key() == (expected, squares), (member, source, target)
        assert probed == dc.key(), "a probe tells what the move gives"
        assert dc.total == len(where)
        assert {d: n for d, n in dc.counts.items() if n} == dict(Counter(where.values()))
        assert dc.hist == Counter(dc.counts.values()), "count -> domains with that count"


@pytest.mark.parametrize("kind", ["antiAffinity", "affinity", "spread"])
def test_a_probe_leaves_the_counts_as_they_were(kind: GroupKind) -> None:
    dc = _fresh(kind, 1)
    for d in ("a", "a", "b"):
        dc.shift(d, 1)
    before = (dc.key(), dc.total, dc.excess, dict(dc.counts), dict(dc.hist))
    assert dc.key_if_moved("a", "c") != dc.key() or kind == "affinity"
    assert dc.key_if_moved("a", None) is not None
    after = (dc.key(), dc.total, dc.excess, dict(dc.counts), dict(dc.hist))
    if kind == "spread":  # every domain is registered up front
        assert after == before
    else:  # the probe registers the target's domain, empty
        assert after[:3] == before[:3]
        assert {d: n for d, n in after[3].items() if n} == before[3]


def test_a_copy_counts_on_its_own() -> None:
    dc = _fresh("antiAffinity", 1)
    for d in ("a", "a", "b"):
        dc.shift(d, 1)
    twin = dc.copy()
    assert (twin.kind, twin.max_skew, twin.total, twin.excess, twin.sumsq) == (
        "antiAffinity",
        1,
        3,
        1,
        5,
    )
    assert (twin.counts, twin.hist) == (dc.counts, dc.hist)
    twin.shift("a", -1)
    twin.shift("c", 1)
    assert twin.key() == (0, 3)
    assert dc.key() == (1, 5)
    assert dc.counts == {"a": 2, "b": 1}
    assert dc.hist == {2: 1, 1: 1}


def test_a_copy_keeps_the_kind_and_skew_of_its_rule() -> None:
    dc = _fresh("spread", 2)
    for d in ("a", "a", "a"):
        dc.shift(d, 1)
    twin = dc.copy()
    assert twin.measure() == dc.measure() == 1
    twin.shift("a", -1)
    assert twin.measure() == 0
    assert dc.measure() == 1


@pytest.mark.parametrize("kind", ["antiAffinity", "affinity", "spread"])
def test_no_member_placed_measures_nothing(kind: GroupKind) -> None:
    assert DomainCounts(kind, 1).measure() == 0


def test_a_member_nowhere_counts_in_no_domain() -> None:
    dc = _fresh("affinity", 1)
    dc.shift(None, 1)
    dc.shift("a", 1)
    assert dc.count(None) == 0
    assert dc.count("a") == 1
    assert dc.count("b") == 0
    assert dc.total == 1


# --- compiled from rules -------------------------------------------------------------------


HOSTS = [
    host("h1", labels={"zone": "z1", "gen": "new"}),
    host("h2", labels={"zone": "z1"}),
    host("h3", labels={"zone": "z2", "gen": "new"}),
    host("h4", maintenance=True, labels={"zone": "z3"}),
    host("h5"),
]


def _model(rules: list[Rule], vms: list[VmState], in_flight: Sequence[InFlight] = ()) -> Model:
    states = [host_state(h.name) for h in HOSTS]
    model, _ = build(desired(HOSTS, rules=rules), snapshot(states, vms, in_flight))
    return model


def _vms() -> list[VmState]:
    return [vm("db-1", "h1"), vm("db-2", "h2"), vm("web-1", "h1"), vm("web-2", "h3")]


def test_host_rules_become_the_hosts_they_allow_or_forbid_in_name_order() -> None:
    rules = [
        rule(
            name="z-rather",
            type="hostAffinity",
            vms={"names": ["web-1"]},
            hosts={"labels": {"gen": "new"}},
            enforcement="preferred",
        ),
        rule(
            name="m-off", type="hostAntiAffinity", vms={"names": ["web-*"]}, hosts={"names": ["h2"]}
        ),
        rule(name="p-pin", type="pin", vms={"names": ["web-1"]}, hosts={"names": ["h1"]}),
        rule(name="a-pin", type="pin", vms={"names": ["web-1"]}, hosts={"names": ["h3"]}),
    ]
    model = _model(rules, _vms())
    web1, web2, db1 = (model.vm_index[n] for n in ("web-1", "web-2", "db-1"))
    assert model.rules.host_rules[web1] == (
        HostRule("a-pin", "pin", True, frozenset({2}), allow=True),
        HostRule("m-off", "hostAntiAffinity", True, frozenset({1}), allow=False),
        HostRule("p-pin", "pin", True, frozenset({0}), allow=True),
        HostRule("z-rather", "hostAffinity", False, frozenset({0, 2}), allow=True),
    )
    assert model.rules.host_rules[web2] == (
        HostRule("m-off", "hostAntiAffinity", True, frozenset({1}), allow=False),
    )
    assert model.rules.host_rules[db1] == ()
    assert dict(model.rules.pinned) == {web1: "a-pin"}, "the first pin by name"
    assert model.rules.groups == ()
    assert model.rules.budgets == ()


def test_excludes_and_budgets_name_their_members() -> None:
    rules = [
        rule(name="z-keep", type="exclude", vms={"names": ["db-1"]}),
        rule(name="a-keep", type="exclude", vms={"names": ["db-*"]}),
        rule(name="b-few", type="disruptionBudget", vms={"names": ["*-1"]}, maxConcurrent=2),
        rule(name="c-one", type="disruptionBudget", vms={"names": ["web-*"]}),
    ]
    model = _model(rules, _vms())
    db1, db2, web1, web2 = (model.vm_index[n] for n in ("db-1", "db-2", "web-1", "web-2"))
    assert dict(model.rules.excluded) == {db1: "a-keep", db2: "a-keep"}
    assert model.rules.budgets == (
        Budget("b-few", 2, frozenset({db1, web1})),
        Budget("c-one", 1, frozenset({web1, web2})),
    )
    assert model.rules.vm_budgets == ((0,), (), (0, 1), (1,))
    assert dict(model.rules.pinned) == {}


def test_group_rules_count_members_per_domain_of_their_key() -> None:
    rules = [
        rule(name="a-together", type="affinity", vms={"names": ["db-*"]}),
        rule(name="b-apart", type="antiAffinity", vms={"names": ["web-*"]}, topologyKey="zone"),
        rule(
            name="c-spread",
            type="spread",
            vms={"names": ["*"]},
            topologyKey="zone",
            maxSkew=2,
            enforcement="preferred",
        ),
    ]
    model = _model(rules, _vms())
    together, apart, spread = model.rules.groups
    assert together == GroupRule(
        index=0,
        name="a-together",
        kind="affinity",
        required=True,
        members=(0, 1),
        domains=("h1", "h2", "h3", "h4", "h5"),
        eligible=frozenset({"h1", "h2", "h3", "h5"}),
        max_skew=1,
        topology_key=None,
    )
    assert apart == GroupRule(
        index=1,
        name="b-apart",
        kind="antiAffinity",
        required=True,
        members=(2, 3),
        domains=("zone=z1", "zone=z1", "zone=z2", "zone=z3", "host=h5"),
        eligible=frozenset({"zone=z1", "zone=z2", "host=h5"}),
        max_skew=1,
        topology_key="zone",
    )
    assert spread == GroupRule(
        index=2,
        name="c-spread",
        kind="spread",
        required=False,
        members=(0, 1, 2, 3),
        domains=("zone=z1", "zone=z1", "zone=z2", "zone=z3", None),
        eligible=frozenset({"zone=z1", "zone=z2"}),
        max_skew=2,
        topology_key="zone",
    )
    assert model.rules.vm_groups == ((0, 2), (0, 2), (1, 2), (1, 2))


def test_a_spread_counts_only_domains_its_members_may_go_to() -> None:
    rules = [
        rule(
            name="a-off", type="hostAntiAffinity", vms={"names": ["db-*"]}, hosts={"names": ["h3"]}
        ),
        rule(name="b-db", type="spread", vms={"names": ["db-*"]}, topologyKey="zone"),
        rule(name="c-web", type="spread", vms={"names": ["web-*"]}, topologyKey="zone"),
        rule(
            name="d-soft",
            type="hostAntiAffinity",
            vms={"names": ["web-*"]},
            hosts={"names": ["h3"]},
            enforcement="preferred",
        ),
    ]
    model = _model(rules, _vms())
    db, web = model.rules.groups
    assert db.eligible == frozenset({"zone=z1"}), "no member may go to z2, z3 is in maintenance"
    assert web.eligible == frozenset({"zone=z1", "zone=z2"}), "a preferred rule forbids nothing"
    assert domain_of(db, 2) is None, "a member in z2 does not count for the db spread"
    assert domain_of(web, 2) == "zone=z2"
    assert domain_of(web, 0) == "zone=z1"
    assert domain_of(web, -1) is None


def test_a_spread_counts_domains_some_member_may_go_to() -> None:
    rules = [
        rule(
            name="a-off", type="hostAntiAffinity", vms={"names": ["db-1"]}, hosts={"names": ["h3"]}
        ),
        rule(name="b-all", type="spread", vms={"names": ["db-*"]}, topologyKey="zone"),
    ]
    model = _model(rules, _vms())
    assert model.rules.groups[0].eligible == frozenset({"zone=z1", "zone=z2"})


def test_a_vm_seen_twice_is_a_member_once() -> None:
    vms = [*_vms(), vm("web-1", "h2")]
    flight = [InFlight(name="web-1", uuid="uuid-web-1", hosts=["h1", "h2"])]
    model = _model([rule(name="apart", type="antiAffinity", vms={"names": ["web-*"]})], vms, flight)
    assert len(model.vms) == 5
    web1 = model.vm_index["web-1"]
    assert model.rules.groups[0].members == (web1, model.vm_index["web-2"])
    assert model.rules.vm_groups[web1 + 1] == (), "the second sighting is no member"


def test_a_host_that_would_refuse_a_vm_is_a_required_rule_named_for_why() -> None:
    refused = vm("db-1", "h1").model_copy(
        update={"refused_by": {"h3": "its CPU lacks avx512f", "gone": "unknown host"}}
    )
    model = _model([], [refused, vm("db-2", "h2")])
    db1 = model.vm_index["db-1"]
    assert model.rules.host_rules[db1] == (
        HostRule(
            "compatibility: h3 refuses it (its CPU lacks avx512f)",
            "hostAntiAffinity",
            True,
            frozenset({2}),
            allow=False,
        ),
    )
    assert model.rules.allowed(db1, 2) == "compatibility: h3 refuses it (its CPU lacks avx512f)"
    assert model.rules.allowed(db1, 1) is None


def test_counts_of_a_spread_start_with_every_eligible_domain_empty() -> None:
    rules = [rule(name="s", type="spread", vms={"names": ["web-*"]}, topologyKey="zone")]
    model = _model(rules, _vms())
    group = model.rules.groups[0]
    dc = new_counts(group, [0, 1, 0, -1])
    assert dc.counts == {"zone=z1": 1, "zone=z2": 0}
    assert dc.measure() == 0
    dc = new_counts(group, [0, 1, 0, 0])
    assert dc.counts == {"zone=z1": 2, "zone=z2": 0}
    assert dc.measure() == 1


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("antiAffinity", "anti-affinity"),
        ("affinity", "affinity"),
        ("spread", "spread"),
        ("pin", "pin"),
        ("hostAffinity", "host affinity"),
        ("hostAntiAffinity", "host anti-affinity"),
        ("compatibility", "compatibility"),
    ],
)
def test_each_kind_of_rule_is_named_in_words(kind: str, words: str) -> None:
    assert describe_kind(kind) == words


# --- the work compile_rules shares between rules -------------------------------------------


def _work(monkeypatch: pytest.MonkeyPatch, rules: list[Rule]) -> Counter[str]:
    """How often ``compile_rules`` reads a host's domain and asks a host rule about a host."""
    calls: Counter[str] = Counter()
    domain, permits = topology_domain, HostRule.permits

    def counted_domain(*args: Any, **kwargs: Any) -> str | None:
        calls["domain"] += 1
        return domain(*args, **kwargs)

    def counted_permits(self: HostRule, h: int) -> bool:
        calls["permits"] += 1
        return permits(self, h)

    model = _model([], _vms())
    with monkeypatch.context() as m:
        m.setattr(rules_module, "topology_domain", counted_domain)
        m.setattr(HostRule, "permits", counted_permits)
        compile_rules(rules, model.hosts, model.vms)
    return calls


OFF = rule(name="off", type="hostAntiAffinity", vms={"names": ["db-*"]}, hosts={"names": ["h3"]})


def _spread(name: str, key: str = "zone") -> Rule:
    return rule(name=name, type="spread", vms={"names": ["db-*"]}, topologyKey=key)


def test_rules_over_the_same_key_share_the_hosts_domains(monkeypatch: pytest.MonkeyPatch) -> None:
    one = _work(monkeypatch, [OFF, _spread("s1")])
    assert one["domain"] == len(HOSTS)
    assert _work(monkeypatch, [OFF, _spread("s1"), _spread("s2")]) == one
    apart = rule(name="apart", type="antiAffinity", vms={"names": ["db-*"]}, topologyKey="zone")
    other = _work(monkeypatch, [OFF, _spread("s1"), apart, _spread("s2", "rack")])
    assert other["domain"] == 3 * len(HOSTS), "a spread and an antiAffinity count hosts apart"


def test_members_with_the_same_host_rules_share_the_eligible_domains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one = _work(monkeypatch, [OFF, _spread("s1")])
    assert one["permits"] > 0
    assert _work(monkeypatch, [OFF, _spread("s1"), _spread("s2")]) == one


@pytest.mark.parametrize("kind", ["antiAffinity", "affinity"])
def test_a_domain_left_empty_stays_counted_when_a_new_one_fills(kind: GroupKind) -> None:
    dc = DomainCounts(kind, 1)
    dc.shift("a", 1)
    dc.shift("a", -1)
    dc.shift("b", 1)
    dc.shift("c", 1)
    assert dc.counts == {"a": 0, "b": 1, "c": 1}
    assert dc.hist == {0: 1, 1: 2}
    dc.shift("b", -1)
    dc.shift("c", -1)
    assert dc.hist == {0: 3}
    assert dc.measure() == 0
