"""Required host rules on fixed examples: which hosts a rule forbids, and that a preferred rule
forbids none."""

from __future__ import annotations

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
