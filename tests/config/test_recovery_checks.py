"""validate's warnings about dead-host recovery: hosts without a fence, fences without a
status action."""

from __future__ import annotations

from reconciler.config.recovery_checks import recovery_findings
from reconciler.model.cluster import ClusterSpec, Defaults
from reconciler.model.desired import DesiredState
from reconciler.model.recovery import Fence
from tests.core.builders import desired, host


def cluster(fence: Fence | None, *, enabled: bool = True) -> DesiredState:
    base = desired([host("a"), host("b")], recovery={"enabled": enabled})
    spec = ClusterSpec(hosts=base.cluster.spec.hosts, defaults=Defaults(fence=fence))
    return base.model_copy(update={"cluster": base.cluster.model_copy(update={"spec": spec})})


def messages(d: DesiredState) -> list[str]:
    return [f.message for f in recovery_findings(d, None)]


def test_hosts_without_a_fence_are_never_recovered() -> None:
    assert messages(cluster(None)) == [
        "recovery is enabled but no host has a fence: a dead host without one is never fenced "
        "and its VMs are not restarted"
    ]


def test_a_fence_without_a_status_action_is_confirmed_by_libvirt_alone() -> None:
    [said] = messages(cluster(Fence(command=["/usr/local/bin/power-off", "{host}"])))
    assert said.startswith("the fence of a, b has no status action: only libvirt not answering")


def test_a_fence_agent_or_an_explicit_status_action_is_not_warned_about() -> None:
    agent = Fence(command=["fence_ipmilan", "--ip={host}-bmc", "--action=off"])
    script = Fence(command=["power-off", "{host}"], status=["power-state", "{host}"])
    assert messages(cluster(agent)) == []
    assert messages(cluster(script)) == []
    assert messages(cluster(None, enabled=False)) == []
