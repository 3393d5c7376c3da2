"""Rules and room on fixed examples: which hosts a required host rule forbids (a preferred one
forbids none), and what a memory refusal says."""

from __future__ import annotations

from reconciler.core.feasibility import check_move
from reconciler.core.state import build
from tests.core.builders import desired, host, host_state, rule, snapshot, vm


def test_allowed_names_the_first_required_host_rule_that_forbids_the_host() -> None:
    hosts = [host("old", labels={"gen": "old"}), host("new", labels={"gen": "new"})]
    rules = [
        rule(
            name="keep-off-old",
            type="hostAntiAffinity",
            vms={"names": ["web-*"]},
            hosts={"labels": {"gen": "old"}},
        ),
        rule(
            name="rather-new",
            type="hostAffinity",
            vms={"names": ["db-*"]},
            hosts={"labels": {"gen": "new"}},
            enforcement="preferred",
        ),
    ]
    d = desired(hosts, rules=rules, hostLimit=100)
    snap = snapshot([host_state("old"), host_state("new")], [vm("web-1", "new"), vm("db-1", "new")])
    model, _ = build(d, snap)
    web, db = model.vm_index["web-1"], model.vm_index["db-1"]
    old, new = model.host_index["old"], model.host_index["new"]
    assert model.rules.allowed(web, old) == "keep-off-old"
    assert model.rules.allowed(web, new) is None
    assert model.rules.allowed(db, old) is None, "a preferred rule forbids nothing"


def test_a_memory_refusal_says_how_much_is_free_even_when_none_or_less_than_none() -> None:
    d = desired([host("a"), host("b")], hostLimit=100, cpuOvercommit=16)
    texts = []
    for used in (8, 12):  # b has 8 GiB: full, then overcommitted by another 4 GiB
        snap = snapshot(
            [host_state("a"), host_state("b", memory_gib=8)],
            [vm("x", "a", memory_gib=4), vm("y", "b", memory_gib=used)],
        )
        model, state = build(d, snap)
        refusal = check_move(state, model.vm_index["x"], model.host_index["b"])
        assert refusal is not None
        texts.append(refusal.text)
    assert texts == [
        "b has 0B free, the VM needs 4GiB",
        "b has -4GiB free, the VM needs 4GiB",
    ]
