"""Checks of dead-host recovery across the policy and the cluster."""

from __future__ import annotations

from reconciler.config.findings import Finding, Severity, path_text
from reconciler.config.yaml_source import Document
from reconciler.model.cluster import effective_fence
from reconciler.model.desired import DesiredState


def recovery_findings(desired: DesiredState, policy: Document | None) -> list[Finding]:
    """A warning when recovery is enabled and some host has no fence (it is never recovered)."""
    recovery = desired.policy.spec.recovery
    if not recovery.enabled:
        return []
    bare = [
        h.name for h in desired.cluster.spec.hosts if effective_fence(desired.cluster, h) is None
    ]
    if not bare:
        return []
    path = ("spec", "recovery", "enabled")
    message = (
        "recovery is enabled but "
        + (
            "no host has"
            if len(bare) == len(desired.cluster.spec.hosts)
            else ", ".join(bare) + " ha" + ("s" if len(bare) == 1 else "ve")
        )
        + " a fence: a dead host without one is never fenced and its VMs are not restarted"
    )
    hint = (
        "give cluster.yaml spec.defaults.fence (or each host a fence): "
        "{command: [...], timeout: 30s}"
    )
    if policy is None:
        return [
            Finding(
                severity=Severity.WARNING, file="", path=path_text(path), message=message, hint=hint
            )
        ]
    line, column = policy.position(path)
    return [
        Finding(
            file=policy.file,
            line=line,
            column=column,
            severity=Severity.WARNING,
            path=path_text(path),
            message=message,
            hint=hint,
        )
    ]
