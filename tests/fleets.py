"""A folder (or a git repository) of many clusters of libvirt test-driver hosts, for fleets."""

from __future__ import annotations

from pathlib import Path

POLICY = (
    "apiVersion: placement/v1alpha1\nkind: BalancePolicy\nmetadata: {{name: p}}\n"
    "spec: {{mode: observe, interval: {interval}}}\n"
)


def cluster_yaml(name: str, hosts: list[tuple[str, str]]) -> str:
    lines = [
        "apiVersion: placement/v1alpha1",
        "kind: Cluster",
        f"metadata: {{name: {name}}}",
        "spec:",
        "  hosts:",
    ]
    lines += [f"    - {{name: {h}, uri: '{uri}'}}" for h, uri in hosts]
    return "\n".join(lines) + "\n"


def write_fleet(
    root: Path,
    nodes: Path,
    clusters: int,
    *,
    hosts: int = 2,
    vms_per_host: int = 1,
    interval: str = "1h",
    prefix: str = "cluster",
) -> list[str]:
    """``clusters`` cluster folders ``<prefix>-NN`` under ``root`` (each ``hosts`` test-driver
    hosts whose node files are kept under ``nodes``, outside ``root``); their folder names."""
    from reconciler.adapters.lab import write_node_files

    names = []
    for i in range(clusters):
        name = f"{prefix}-{i:02d}"
        cluster = write_node_files(nodes / name, hosts, vms_per_host, name=name)
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cluster.yaml").write_text(
            cluster_yaml(name, [(h.name, h.uri) for h in cluster.spec.hosts])
        )
        (folder / "policy.yaml").write_text(POLICY.format(interval=interval))
        names.append(name)
    return names
