"""Rollouts in a cluster folder: read from rollouts/, checked like every kind, exact lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.config import format_finding, validate_folder, validate_paths
from reconciler.config.folders import cluster_folders
from tests.config.clusters import HEAD, cluster_yaml, findings_text, rules_yaml, write_folder

STEP = "{name: up, argv: [apt-get, upgrade], timeout: 30m, safeToRepeat: true}"


def rollout_yaml(*spec_lines: str, name: str = "kernel") -> str:
    """A Rollout whose spec line number i (0-based) is on line 5 + i."""
    lines = "".join(f"  {s}\n" for s in spec_lines)
    return f"{HEAD}kind: Rollout\nmetadata: {{name: {name}}}\nspec:\n{lines}"


def with_rollout(
    tmp_path: Path, text: str, file: str = "kernel.yaml", name: str = "lab", **extra: str
) -> list[str]:
    folder = write_folder(tmp_path, {"cluster.yaml": cluster_yaml(), **extra}, name=name)
    (folder / "rollouts").mkdir()
    (folder / "rollouts" / file).write_text(text, encoding="utf-8")
    report, _ = validate_folder(folder.relative_to(tmp_path))
    return [format_finding(f) for f in report.findings]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_a_valid_rollout_is_read_into_the_desired_state(tmp_path: Path) -> None:
    text = rollout_yaml("hosts: [kvm-02, kvm-01]", f"eachHost: {{commands: [{STEP}]}}")
    assert with_rollout(tmp_path, text) == []
    report, desired = validate_folder(Path("lab"))
    assert desired is not None
    assert [r.metadata.name for r in desired.rollouts] == ["kernel"]
    assert desired.rollouts[0].spec.hosts.names == ["kvm-02", "kvm-01"]
    assert desired.rollouts[0].spec.max_unavailable == 1
    assert report.summary() == "lab/: cluster lab: 3 hosts, 0 rules, 1 rollout: valid"


def test_the_example_folder_has_a_valid_rollout() -> None:
    root = Path(__file__).parents[2] / "cluster-state"
    report, desired = validate_folder(root)
    assert report.findings == []
    assert desired is not None
    assert [r.metadata.name for r in desired.rollouts] == ["kernel-2026-12"]


def test_model_errors_point_at_their_line(tmp_path: Path) -> None:
    text = rollout_yaml(
        "hosts: [kvm-01]",
        "maxUnavailable: 0",
        "eachHost: {commands: [{name: up, argv: [x], safeToRepeat: true}]}",
        "onFailure: carry-on",
    )
    assert with_rollout(tmp_path, text) == [
        "lab/rollouts/kernel.yaml:6:19: error: spec.maxUnavailable: 0 is too small (use at "
        "least 1)",
        "lab/rollouts/kernel.yaml:7:25: error: spec.eachHost.commands[0].timeout: missing "
        "required key 'timeout' (add timeout: to this mapping)",
        "lab/rollouts/kernel.yaml:8:14: error: spec.onFailure: the string 'carry-on' is not "
        "allowed (use one of 'stop')",
    ]


def test_safe_to_repeat_is_required(tmp_path: Path) -> None:
    text = rollout_yaml(
        "hosts: [kvm-01]", "eachHost: {commands: [{name: up, argv: [x], timeout: 1m}]}"
    )
    assert with_rollout(tmp_path, text) == [
        "lab/rollouts/kernel.yaml:6:25: error: spec.eachHost.commands[0].safeToRepeat: missing "
        "required key 'safeToRepeat' (add safeToRepeat: to this mapping)",
    ]


def test_hosts_must_exist(tmp_path: Path) -> None:
    text = rollout_yaml("hosts: [kvm-01, kvm-09]", f"eachHost: {{commands: [{STEP}]}}")
    assert with_rollout(tmp_path, text) == [
        "lab/rollouts/kernel.yaml:5:19: error: spec.hosts[1]: host 'kvm-09' does not exist (did "
        "you mean 'kvm-03'? the Cluster has kvm-01, kvm-02, kvm-03)",
    ]
    selector = rollout_yaml("hosts: {labels: {rack: r9}}", f"eachHost: {{commands: [{STEP}]}}")
    assert with_rollout(tmp_path, selector, name="b") == [
        "b/rollouts/kernel.yaml:5:10: error: spec.hosts: the rollout selects no host (name "
        "hosts of the Cluster, or labels some of them have)",
    ]


def test_every_host_out_at_once_is_refused(tmp_path: Path) -> None:
    text = rollout_yaml(
        "hosts: {names: ['*']}", "maxUnavailable: 3", f"eachHost: {{commands: [{STEP}]}}"
    )
    assert with_rollout(tmp_path, text) == [
        "lab/rollouts/kernel.yaml:6:19: error: spec.maxUnavailable: maxUnavailable 3 takes every "
        "host of the cluster out at once (3): their VMs would have nowhere to go (use at most 2)",
    ]


def test_placeholders_and_secrets(tmp_path: Path) -> None:
    text = rollout_yaml(
        "hosts: [kvm-01]",
        "before: [{name: b, argv: [ssh, '{host}'], timeout: 1m, safeToRepeat: true}]",
        "eachHost:",
        "  commands:",
        "    - {name: a, argv: [curl, '{hostname}', --token, abc], timeout: 1m, "
        "safeToRepeat: true}",
        "    - {name: c, argv: ['https://u:pw@x/'], env: {DB_PASSWORD: s3cret}, timeout: 1m, "
        "safeToRepeat: true, passEnv: [X]}",
    )
    found = with_rollout(tmp_path, text)
    assert [f.split(": error: ")[0] for f in found] == [
        "lab/rollouts/kernel.yaml:6:34",
        "lab/rollouts/kernel.yaml:9:32",
        "lab/rollouts/kernel.yaml:9:46",
        "lab/rollouts/kernel.yaml:10:26",
        "lab/rollouts/kernel.yaml:10:65",
    ]
    assert "{host} has no value here" in found[0]
    assert "unknown placeholder {hostname} (did you mean {host}?" in found[1]
    assert "a secret on argv (--token followed by its value)" in found[2]
    assert "a secret on argv (a URL with a password)" in found[3]
    assert "env DB_PASSWORD looks like a secret written into git" in found[4]
    for finding in found:
        assert "s3cret" not in finding


def test_step_names_are_unique_per_list(tmp_path: Path) -> None:
    text = rollout_yaml("hosts: [kvm-01]", f"eachHost: {{commands: [{STEP}, {STEP}]}}")
    assert with_rollout(tmp_path, text) == [
        "lab/rollouts/kernel.yaml:6:104: error: spec.eachHost.commands[1].name: a second step "
        "named 'up' (also commands[0]) (give every step its own name: it names the step in "
        "status and history)",
    ]


def test_a_pin_on_a_host_of_a_blocking_rollout_is_a_warning(tmp_path: Path) -> None:
    rules = rules_yaml("{name: p, type: pin, vms: {names: [erp]}, hosts: {names: [kvm-03]}}")
    text = rollout_yaml("hosts: [kvm-03]", f"eachHost: {{commands: [{STEP}]}}")
    assert with_rollout(tmp_path, text, **{"rules.yaml": rules}) == [
        "lab/rollouts/kernel.yaml:5:10: warning: spec.hosts: pin p keeps erp on kvm-03: the "
        "rollout stops there while it runs (shut it down for the host's turn with "
        "immovable.action: shutdown, or change the pin)",
    ]
    shut = rollout_yaml(
        "hosts: [kvm-03]", "immovable: {action: shutdown}", f"eachHost: {{commands: [{STEP}]}}"
    )
    assert with_rollout(tmp_path, shut, name="b", **{"rules.yaml": rules}) == []


def test_a_rollout_that_runs_nothing_is_a_warning(tmp_path: Path) -> None:
    assert with_rollout(tmp_path, rollout_yaml("hosts: [kvm-01]")) == [
        "lab/rollouts/kernel.yaml:5:3: warning: spec: no command and no reboot per host: each "
        "host is drained and given back, nothing runs on it (add eachHost.commands or "
        "eachHost.reboot)",
    ]


def test_windows_are_checked_as_the_policys(tmp_path: Path) -> None:
    text = rollout_yaml(
        "hosts: [kvm-01]",
        "windows: [{schedule: '0 25 * * *', duration: 1h}]",
        f"eachHost: {{commands: [{STEP}]}}",
    )
    assert with_rollout(tmp_path, text) == [
        "lab/rollouts/kernel.yaml:6:24: error: spec.windows[0].schedule: the hour field '25' is "
        "out of range (hours are 0-23) (write minute hour day-of-month month day-of-week, e.g. "
        '"0 22 * * 1-5")',
    ]


def test_the_file_is_named_after_the_rollout(tmp_path: Path) -> None:
    text = rollout_yaml("hosts: [kvm-01]", f"eachHost: {{commands: [{STEP}]}}")
    assert with_rollout(tmp_path, text, file="other.yaml") == [
        "lab/rollouts/other.yaml:3:18: error: metadata.name: the rollout is named 'kernel' in a "
        "file named other.yaml (name the file rollouts/kernel.yaml, or the rollout other)",
    ]


def test_one_rollout_per_file_and_only_rollouts(tmp_path: Path) -> None:
    text = rollout_yaml("hosts: [kvm-01]", f"eachHost: {{commands: [{STEP}]}}")
    two = with_rollout(tmp_path, text + "---\n" + text)
    assert two == [
        "lab/rollouts/kernel.yaml:8:1: error: a second document in kernel.yaml (keep one "
        "rollout per file: rollouts/<name>.yaml (this one is kernel))",
    ]
    other = with_rollout(tmp_path, cluster_yaml().replace("name: lab", "name: kernel"), name="b")
    assert other == [
        "b/rollouts/kernel.yaml:2:7: error: kind: rollouts/ holds only Rollout documents, this "
        "is Cluster (put Cluster, BalancePolicy, PlacementRules and Placement in the cluster "
        "folder itself)",
    ]
    nokind = with_rollout(tmp_path, text.replace("kind: Rollout\n", ""), name="c")
    assert nokind == ["c/rollouts/kernel.yaml:1:1: error: missing kind (add kind: Rollout)"]


def test_a_rollout_outside_rollouts_is_refused(tmp_path: Path) -> None:
    text = rollout_yaml("hosts: [kvm-01]", f"eachHost: {{commands: [{STEP}]}}")
    assert findings_text(tmp_path, {"cluster.yaml": cluster_yaml(), "kernel.yaml": text}) == [
        "lab/kernel.yaml:2:7: error: kind: a Rollout belongs in the cluster's rollouts/ folder "
        "(move it to rollouts/<its name>.yaml, one rollout per file)",
    ]


def test_rollouts_is_no_cluster_of_its_own(tmp_path: Path) -> None:
    text = rollout_yaml("hosts: [kvm-01]", f"eachHost: {{commands: [{STEP}]}}")
    with_rollout(tmp_path, text)
    assert cluster_folders(Path("lab")) == [Path("lab")]
    reports = validate_paths([Path("lab/rollouts")])
    assert [r.summary() for r in reports] == [
        "lab/: cluster lab: 3 hosts, 0 rules, 1 rollout: valid"
    ]
    alone = validate_paths([Path("lab/rollouts/kernel.yaml")])
    assert [r.summary() for r in alone] == [
        "lab/rollouts/kernel.yaml: 1 file checked in cluster lab (3 hosts, 0 rules, 1 rollout): "
        "valid"
    ]


def test_a_symlinked_rollouts_folder_is_refused(tmp_path: Path) -> None:
    folder = write_folder(tmp_path, {"cluster.yaml": cluster_yaml()})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "rollouts").symlink_to(elsewhere)
    report, _ = validate_folder(Path("lab"))
    assert [format_finding(f) for f in report.findings] == [
        "lab/rollouts/: error: the rollouts folder is a symlink (keep the rollouts in a real "
        "folder inside the cluster folder)"
    ]


def test_resume_names_a_host_and_a_step_of_the_rollout(tmp_path: Path) -> None:
    text = rollout_yaml(
        "hosts: [kvm-01, kvm-02]",
        f"eachHost: {{commands: [{STEP}]}}",
        "resume:",
        '  - {host: kvm-02, step: command/up, failedAt: "2026-12-01T22:20:00+00:00", then: retry}',
        '  - {host: kvm-03, step: ready, failedAt: "2026-12-01T22:20:00+00:00", then: skip}',
        '  - {host: kvm-01, step: command/x, failedAt: "2026-12-01T22:20:00+00:00", then: skip}',
        '  - {step: before/noout, failedAt: "2026-12-01T22:20:00+00:00", then: retry}',
        '  - {step: ready, failedAt: "2026-12-01T22:20:00Z", then: again}',
    )
    found = with_rollout(tmp_path, text)
    assert found == [
        "lab/rollouts/kernel.yaml:12:61: error: spec.resume[4].then: the string 'again' is not "
        "allowed (use one of 'retry' or 'skip')",
    ]
    found = with_rollout(tmp_path, text.replace("then: again", "then: retry"), name="b")
    assert [f.split(": error: ")[1] for f in found] == [
        "spec.resume[1].host: 'kvm-03' is not a host of this rollout (its hosts: kvm-01, kvm-02; "
        "leave host out for a step before or after)",
        "spec.resume[2].step: 'command/x' is not a step of its hosts (use one of: drain, "
        "command/up, ready, undrain (as rollout status names them))",
        "spec.resume[3].step: 'before/noout' is not a step before or after its hosts (use one "
        "of: none (as rollout status names them))",
        "spec.resume[4].step: 'ready' is not a step before or after its hosts (use one of: none "
        "(as rollout status names them))",
    ]
