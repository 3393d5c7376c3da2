"""The lab's cluster folder: its hosts, and copies of the example documents shipped with it.

The example documents are package data (``assets/cluster-state/``, kept equal to the
project's ``cluster-state/`` by a test), so an installed lab writes the same folder as one run
from the source tree.
"""

from __future__ import annotations

import json
import re
from typing import Final

import yaml

from reconciler.adapters.lab.layout import asset_text
from reconciler.adapters.lab.state import Lab

LAB_POLICY_OVERRIDES: Final[dict[str, object]] = {
    "basis": "allocated",
    "holdRounds": 1,
    "minUptime": "0s",
}
"""Policy settings the lab changes so its imbalance shows up in the first plan."""

_WHY: Final[dict[str, str]] = {
    "basis": "lab: its idle VMs use next to nothing; balance what they are given",
    "holdRounds": "lab: one round, to demonstrate balance at once (keep 2 on real hosts)",
    "minUptime": "lab: its VMs have only just started",
}
"""The comment each overridden line gets in the lab's policy, in place of the example's."""

EXAMPLE_DOCUMENTS: Final = ("cluster.yaml", "policy.yaml", "rules.yaml", "placement.yaml")
"""The example documents shipped under ``assets/cluster-state/``."""

_SCHEMA_RE = re.compile(r"^#\s*yaml-language-server:\s*\$schema=(\S+)\s*$")

_MINIMAL: Final[dict[str, str]] = {
    "policy.yaml": "apiVersion: placement/v1alpha1\nkind: BalancePolicy\n"
    "metadata: {name: lab}\nspec:\n  mode: propose\n",
    "rules.yaml": "apiVersion: placement/v1alpha1\nkind: PlacementRules\n"
    "metadata: {name: lab}\nspec:\n  rules: []\n",
    "placement.yaml": "apiVersion: placement/v1alpha1\nkind: Placement\n"
    "metadata: {name: lab}\nspec:\n  vms: {}\n",
}


def example_text(name: str) -> str:
    """The shipped example document ``name`` without its ``$schema`` line.

    That line points at the project's ``schemas/`` by a relative path, which means nothing in
    the lab's folder.
    """
    text = asset_text("cluster-state", name)
    return "".join(line for line in text.splitlines(True) if not _SCHEMA_RE.match(line.rstrip()))


def _suits(text: str, hosts: set[str]) -> bool:
    """An example that names a host the lab lacks (``kvm-03`` in a 2-host lab) would not
    validate there."""
    return set(re.findall(r"\bkvm-\d+\b", text)) <= hosts


def _example_host_labels() -> dict[str, dict[str, str]]:
    data = yaml.safe_load(example_text("cluster.yaml"))
    return {
        str(h["name"]): {str(k): str(v) for k, v in (h.get("labels") or {}).items()}
        for h in data["spec"]["hosts"]
    }


WORKLOAD_OVERRIDES: Final[dict[str, object]] = {**LAB_POLICY_OVERRIDES, "basis": "used"}
"""A lab of workload guests balances on what they really do: they burn CPU."""

_WHY_USED: Final = "lab: its workload guests burn real CPU; balance what they use"
LOAD_WINDOW: Final = "1m"
"""The load window of a workload lab: a demo sees its load after a minute, not ten."""


def lab_policy_text(
    text: str,
    overrides: dict[str, object] | None = None,
    *,
    prometheus: str | None = None,
) -> str:
    """The policy document ``text`` with ``overrides`` (``LAB_POLICY_OVERRIDES`` by default)
    set in its ``spec``; with ``prometheus``, its load read from that Prometheus over a
    window of ``LOAD_WINDOW``.

    Lines are edited in place so the example's other comments stay; each overridden line says
    why the lab sets it. A key the text lacks is added right under ``spec:``.
    """
    text = _with_overrides(text, LAB_POLICY_OVERRIDES if overrides is None else overrides)
    return text if prometheus is None else _with_prometheus(text, prometheus)


def _with_prometheus(text: str, url: str) -> str:
    """``spec.load`` of the example set to read the lab's Prometheus over ``LOAD_WINDOW``."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if re.match(r"^  load:", line)), None)
    if at is None:
        data = yaml.safe_load(text)
        data["spec"]["load"] = {
            "source": "prometheus",
            "window": LOAD_WINDOW,
            "sampleEvery": "15s",
            "prometheus": {"url": url},
        }
        return yaml.safe_dump(data, sort_keys=False)
    why = "  # lab: the lab's Prometheus (lab up --metrics)"
    edits = {
        "source": f"    source: prometheus{why}",
        "window": f"    window: {LOAD_WINDOW}            # lab: its load shows after a minute",
        "sampleEvery": "    sampleEvery: 15s     # lab: the step of the query",
    }
    end = at + 1
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        key = lines[end].strip().split(":")[0]
        if key in edits:
            lines[end] = edits.pop(key)
        end += 1
    lines[end:end] = [*edits.values(), f"    prometheus: {{url: '{url}'}}{why}"]
    return "\n".join(lines) + "\n"


def _with_overrides(text: str, overrides: dict[str, object]) -> str:
    lines = text.splitlines()
    spec_at = next((i for i, line in enumerate(lines) if re.match(r"^spec:\s*(#.*)?$", line)), None)
    if spec_at is None:
        data = yaml.safe_load(text) if text.strip() else {}
        data = data if isinstance(data, dict) else {}
        spec = data.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.update(overrides)
        return yaml.safe_dump(data, sort_keys=False)
    indent = "  "
    for line in lines[spec_at + 1 :]:
        match = re.match(r"^(\s+)\S", line)
        if match and not line.lstrip().startswith("#"):
            indent = match.group(1)
            break
    for key, value in overrides.items():
        new = f"{indent}{key}: {value}"
        pattern = re.compile(rf"^{indent}{re.escape(key)}:(\s*)([^#]*?)(\s*#.*)?$")
        for i in range(spec_at + 1, len(lines)):
            if lines[i] and not lines[i].startswith((" ", "#")):
                break  # left spec
            match = pattern.match(lines[i])
            if match:
                column = len(lines[i]) - len((match.group(3) or "").lstrip())
                lines[i] = f"{new}{' ' * max(1, column - len(new))}# {_why(key, value)}"
                break
        else:
            lines.insert(spec_at + 1, f"{new}  # {_why(key, value)}")
    return "\n".join(lines) + "\n"


def cluster_yaml(lab: Lab) -> str:
    """The lab's ``cluster.yaml`` (without its header comments).

    Live migration between lab hosts works from it alone: every daemon listens on 127.0.0.1
    on ports of its own, which the migration URI template reaches through ``address``.
    """
    example_labels = _example_host_labels()
    lines = [
        "apiVersion: placement/v1alpha1",
        "kind: Cluster",
        "metadata: {name: lab}",
        "spec:",
        "  defaults:",
        "    reserve: {memory: 256MiB, cpus: 0}   # the lab's hosts are small",
        "    # every lab daemon takes incoming migrations on 127.0.0.1, on ports of its own",
        "    migration: {maxOutbound: 2, maxInbound: 2, uri: 'tcp://{address}'}",
        "  hosts:",
    ]
    for host in lab.hosts:
        labels = {"rack": host.rack, **example_labels.get(host.name, {})}
        flow = ", ".join(f"{k}: {json.dumps(v)}" for k, v in labels.items())
        lines += [
            f"    - name: {host.name}",
            f"      uri: '{host.uri}'",
            "      address: 127.0.0.1",
            f"      labels: {{{flow}}}",
        ]
        if host.bmc_port:
            # the lab's BMC (lab up --bmc); its user and password are in <dir>/bmc.env
            lines += [
                "      power:",
                "        driver: redfish",
                f"        address: http://127.0.0.1:{host.bmc_port}",
                "        credentials: {passEnv: [LAB_BMC_USER, LAB_BMC_PASSWORD]}",
                "        bootTimeout: 2m",
                "        timeout: 10s",
            ]
    return "\n".join(lines) + "\n"


def _why(key: str, value: object) -> str:
    return _WHY_USED if (key, value) == ("basis", "used") else _WHY[key]


def _header(note: str) -> str:
    return "".join(f"# {line}\n" for line in note.split("\n"))


def write_cluster_state(lab: Lab) -> None:
    dest = lab.cluster_dir
    dest.mkdir(parents=True, exist_ok=True)
    note = "Written by `reconciler lab up`"
    (dest / "cluster.yaml").write_text(
        _header(f"{note}: the hosts of the local lab in {lab.dir}.") + cluster_yaml(lab)
    )
    names = {h.name for h in lab.hosts}
    for name in ("policy.yaml", "rules.yaml", "placement.yaml"):
        text: str | None = example_text(name)
        if text is not None and not _suits(text, names):
            text = None
        source = f"a copy of the example's {name}" if text else f"a minimal {name}"
        if text is None:
            text = _MINIMAL[name]
        if name == "policy.yaml" and lab.workload:
            url = f"http://127.0.0.1:{lab.prometheus_port}" if lab.prometheus_port else None
            text = lab_policy_text(text, WORKLOAD_OVERRIDES, prometheus=url)
            source += (
                ",\nwith basis used (its guests burn real CPU), holdRounds 1 and minUptime 0s so "
                "the lab's imbalance shows at once"
                + (f",\nits load from the lab's Prometheus over {LOAD_WINDOW}" if url else "")
            )
        elif name == "policy.yaml":
            text = lab_policy_text(text)
            source += (
                ",\nwith basis allocated, holdRounds 1 and minUptime 0s so the lab's imbalance "
                "shows at once"
            )
        (dest / name).write_text(_header(f"{note}: {source}.") + text)
