"""The desired state's digest and the plan id: the same for the same meaning written in any
order, different for any change the reconciler acts on."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.identity import desired_digest, plan_id
from reconciler.model.desired import DesiredState
from reconciler.model.rules import Rule
from tests.core.builders import desired, host, rule
from tests.core.rollout_world import rollout

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
LABELS = st.dictionaries(st.sampled_from(["rack", "room", "row", "tier"]), NAMES, max_size=4)


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    """Hosts with labels, rules selecting by labels, and a Placement, as plain data."""
    hosts = {
        f"kvm-{i:02d}": draw(LABELS)
        for i in draw(st.lists(st.integers(0, 20), min_size=1, max_size=6, unique=True))
    }
    rules = []
    for i in range(draw(st.integers(0, 5))):
        vm_labels = draw(LABELS.filter(bool))
        if draw(st.booleans()):
            rules.append(
                {"name": f"apart-{i}", "type": "antiAffinity", "vms": {"labels": vm_labels}}
            )
        else:
            host_labels = draw(LABELS.filter(bool))
            rules.append(
                {
                    "name": f"on-{i}",
                    "type": "hostAffinity",
                    "vms": {"labels": vm_labels},
                    "hosts": {"labels": host_labels},
                }
            )
    placement = {
        f"vm-{v:03d}": draw(st.sampled_from(sorted(hosts)))
        for v in draw(st.lists(st.integers(0, 99), max_size=8, unique=True))
    }
    return {"hosts": hosts, "rules": rules, "placement": placement}


def _reversed(d: dict[str, Any]) -> dict[str, Any]:
    return dict(reversed(list(d.items())))


def state(layout: dict[str, Any], *, shuffled: bool = False, **policy: object) -> DesiredState:
    """``layout`` as a desired state; ``shuffled`` writes every list and mapping whose order
    means nothing in reverse."""
    order = _reversed if shuffled else dict
    hosts = [host(name, labels=order(labels)) for name, labels in layout["hosts"].items()]
    rules: list[Rule] = []
    for r in layout["rules"]:
        fields = dict(r)
        for key in ("vms", "hosts"):
            if key in fields:
                fields[key] = {"labels": order(fields[key]["labels"])}
        rules.append(rule(**fields))
    if shuffled:
        hosts.reverse()
        rules.reverse()
    return desired(hosts, rules=rules, placement=order(layout["placement"]), **policy)


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_order_without_meaning_changes_neither_id(layout: dict[str, Any]) -> None:
    plain, shuffled = state(layout), state(layout, shuffled=True)
    assert desired_digest(plain) == desired_digest(shuffled)
    placement = layout["placement"]
    assert plan_id(plain, [], [], [], placement) == plan_id(
        shuffled, [], [], [], _reversed(placement)
    )


@settings(max_examples=40, deadline=None)
@given(layouts())
def test_notes_records_and_rollouts_are_left_out(layout: dict[str, Any]) -> None:
    plain = state(layout)
    noted = plain.model_copy(
        update={
            "cluster": plain.cluster.model_copy(
                update={
                    "metadata": plain.cluster.metadata.model_copy(
                        update={"annotations": {"owner": "team-a"}}
                    )
                }
            )
        }
    )
    assert desired_digest(noted) == desired_digest(plain)
    assert desired_digest(state(layout, record={"every": "1h"})) == desired_digest(plain)
    rolling = plain.model_copy(update={"rollouts": [rollout({"hosts": sorted(layout["hosts"])})]})
    assert desired_digest(rolling) == desired_digest(plain)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.data())
def test_any_change_the_reconciler_acts_on_changes_the_digest(
    layout: dict[str, Any], data: st.DataObject
) -> None:
    before = desired_digest(state(layout, threshold=20))
    hosts: dict[str, dict[str, str]] = dict(layout["hosts"])
    placement: dict[str, str] = dict(layout["placement"])
    rules: list[dict[str, Any]] = list(layout["rules"])
    what = data.draw(st.sampled_from(["label", "host", "placement", "threshold", "rule"]))
    if what == "label":
        name = data.draw(st.sampled_from(sorted(hosts)))
        hosts[name] = {**hosts[name], "spare": "yes"}
    elif what == "host":
        hosts["kvm-99"] = {}
    elif what == "placement":
        placement["vm-999"] = sorted(hosts)[0]
    elif what == "rule":
        rules.append({"name": "new", "type": "antiAffinity", "vms": {"labels": {"tier": "a"}}})
    changed = {"hosts": hosts, "rules": rules, "placement": placement}
    after = desired_digest(state(changed, threshold=15 if what == "threshold" else 20))
    assert after != before, what


def test_the_digest_is_a_sha256_of_the_documents() -> None:
    digest = desired_digest(state({"hosts": {"kvm-01": {}}, "rules": [], "placement": {}}))
    assert digest.startswith("sha256:")
    assert len(digest) == len("sha256:") + 64
