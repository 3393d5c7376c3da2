"""place(): the best host for a new VM, or why none fits."""

from __future__ import annotations

from reconciler.core.placer import place
from tests.core.builders import GIB, NOW, desired, host, host_state, rule, snapshot, vm


def test_new_vm_goes_to_the_least_loaded_compatible_host() -> None:
    d = desired([host("a"), host("b"), host("c", maintenance=True)])
    s = snapshot([host_state("a"), host_state("b"), host_state("c")], [vm("x", "a", memory_gib=32)])
    r = place(d, s, vcpus=2, memory=4 * GIB, labels={}, now=NOW)
    assert r.host == "b"
    by_host = {c.host: c for c in r.candidates}
    assert by_host["a"].fits
    assert not by_host["c"].fits
    assert "maintenance" in by_host["c"].reasons[0]
    assert "b" in r.message


def test_required_rules_apply_as_if_the_vm_existed() -> None:
    d = desired(
        [host("a"), host("b"), host("c")],
        rules=[rule(name="db-apart", type="antiAffinity", vms={"names": ["db-*"]})],
    )
    s = snapshot(
        [host_state("a"), host_state("b"), host_state("c")], [vm("db-1", "a"), vm("db-2", "c")]
    )
    r = place(d, s, vcpus=1, memory=GIB, labels={}, name="db-3", now=NOW)
    assert r.host == "b"
    r = place(d, s, vcpus=1, memory=GIB, labels={}, name="web-1", now=NOW)
    assert r.host in {"a", "b", "c"}


def test_preferred_rules_count_as_cost() -> None:
    d = desired(
        [host("a"), host("b", labels={"gen": "old"})],
        rules=[
            rule(
                name="keep-off-old",
                type="hostAntiAffinity",
                vms={"labels": {"tier": "prod"}},
                hosts={"labels": {"gen": "old"}},
                enforcement="preferred",
            )
        ],
    )
    s = snapshot([host_state("a"), host_state("b")], [vm("x", "a", memory_gib=40)])
    assert place(d, s, vcpus=1, memory=GIB, labels={"tier": "prod"}, now=NOW).host == "a"
    assert place(d, s, vcpus=1, memory=GIB, labels={}, now=NOW).host == "b"


def test_nothing_fits_explains_every_host() -> None:
    d = desired([host("a"), host("b")])
    s = snapshot([host_state("a", memory_gib=8), host_state("b", reachable=False)], [])
    r = place(d, s, vcpus=2, memory=16 * GIB, labels={}, now=NOW)
    assert r.host is None
    assert all(not c.fits and c.reasons for c in r.candidates)
    assert "no host" in r.message
