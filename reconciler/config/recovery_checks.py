"""Checks of dead-host recovery across the policy and the cluster."""

from __future__ import annotations

from reconciler.config.findings import Finding, Severity, path_text
from reconciler.config.yaml_source import Document
from reconciler.model.cluster import effective_fence
from reconciler.model.desired import DesiredState

PATH = ("spec", "recovery", "enabled")


def recovery_findings(desired: DesiredState, policy: Document | None) -> list[Finding]:
    """Warnings when recovery is enabled and some host has no fence (it is never recovered),
    or a fence without a status action (only libvirt's silence confirms it)."""
    if not desired.policy.spec.recovery.enabled:
        return []
    hosts = desired.cluster.spec.hosts
    fences = {h.name: effective_fence(desired.cluster, h) for h in hosts}
    bare = [name for name, fence in fences.items() if fence is None]
    blind = [
        name for name, fence in fences.items() if fence is not None and not fence.status_action()
    ]
    out = []
    if bare:
        out.append(
            _warning(
                policy,
                "recovery is enabled but "
                + _who(bare, len(hosts))
                + " a fence: a dead host without one is never fenced and its VMs are not "
                "restarted",
                "give cluster.yaml spec.defaults.fence (or each host a fence): "
                "{command: [...], timeout: 30s}",
            )
        )
    if blind:
        out.append(
            _warning(
                policy,
                "the fence of "
                + ", ".join(blind)
                + " has no status action: only libvirt not answering confirms it, and a hung "
                "libvirtd does not answer either (its VMs may still run)",
                "use a fence agent with --action=off (its status action is asked too), or give "
                "the fence a status: [argv] that prints off only when the host is off",
            )
        )
    return out


def _who(names: list[str], of: int) -> str:
    if len(names) == of:
        return "no host has"
    return ", ".join(names) + " ha" + ("s" if len(names) == 1 else "ve")


def _warning(policy: Document | None, message: str, hint: str) -> Finding:
    if policy is None:
        return Finding(
            severity=Severity.WARNING, file="", path=path_text(PATH), message=message, hint=hint
        )
    line, column = policy.position(PATH)
    return Finding(
        file=policy.file,
        line=line,
        column=column,
        severity=Severity.WARNING,
        path=path_text(PATH),
        message=message,
        hint=hint,
    )
