"""Reading cluster folders: files into documents, documents into models, models into findings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from reconciler.config.findings import Finding, Severity, errors_in, format_finding, path_text
from reconciler.config.fleet_checks import shared_name_findings
from reconciler.config.folders import (
    ROLLOUTS,
    cluster_folders,
    hidden_rollout_files,
    is_rollout_file,
    rollout_files,
    yaml_files,
)
from reconciler.config.kinds import KindModel, model_from_document
from reconciler.config.references import reference_findings
from reconciler.config.semantic import Sources, semantic_findings
from reconciler.config.yaml_source import Document, read_documents
from reconciler.errors import ConfigError, DocumentError, ValidationFailed
from reconciler.model.base import Frozen
from reconciler.model.cluster import Cluster
from reconciler.model.desired import DesiredState
from reconciler.model.placement import Placement
from reconciler.model.policy import BalancePolicy
from reconciler.model.rollout import Rollout
from reconciler.model.rules import PlacementRules

_DOCS_HINT = "see docs/cluster-state.md"


class ClusterReport(Frozen):
    """The outcome of validating one cluster folder (or some files of it)."""

    folder: str
    name: str | None = None
    hosts: int = 0
    rules: int = 0
    rollouts: int = 0
    files: int | None = None
    """How many files were checked, when files were given rather than the folder."""
    findings: list[Finding]
    named: tuple[str, str, int, int] | None = Field(default=None, exclude=True)
    """The cluster's name as its Cluster declares it, with the file, line and column: checked
    across the folders validated together (no two may share it)."""

    @property
    def valid(self) -> bool:
        return not errors_in(self.findings)

    def summary(self) -> str:
        """``cluster-state/: cluster lab: 3 hosts, 8 rules: valid``; for a file,
        ``lab/rules.yaml: 1 file checked in cluster lab (3 hosts, 8 rules): valid``."""
        errors = len(errors_in(self.findings))
        warnings = len(self.findings) - errors
        sizes = f"{counted(self.hosts, 'host')}, {counted(self.rules, 'rule')}"
        if self.rollouts:
            sizes += f", {counted(self.rollouts, 'rollout')}"
        what = f"cluster {self.name}: {sizes}" if self.name else ""
        if self.files is not None:
            checked = f"{counted(self.files, 'file')} checked"
            what = f"{checked} in cluster {self.name} ({sizes})" if self.name else checked
        verdict = counted(errors, "error") if errors else "valid"
        if warnings:
            verdict += f", {counted(warnings, 'warning')}"
        return f"{self.folder}: {what + ': ' if what else ''}{verdict}"


@dataclass
class _Folder:
    """What was read from one folder so far."""

    findings: list[Finding] = field(default_factory=list)
    models: dict[str, tuple[KindModel, Document]] = field(default_factory=dict)
    first: dict[str, Document] = field(default_factory=dict)
    rollouts: dict[str, tuple[Rollout, Document]] = field(default_factory=dict)
    unreadable: bool = False


def counted(n: int, noun: str) -> str:
    """``1 host``, ``3 hosts``."""
    return f"{n} {noun}{'s' * (n != 1)}"


def folder_text(folder: Path) -> str:
    """A folder as users write it: ``cluster-state/``."""
    return str(folder).rstrip("/") + "/"


def _document_error_finding(err: DocumentError) -> Finding:
    return Finding(
        file=err.file,
        line=err.line,
        column=err.column,
        severity=Severity.ERROR,
        message=err.message,
        hint=err.hint,
    )


def _doc_finding(doc: Document, path: tuple[str, ...], message: str, hint: str) -> Finding:
    line, column = doc.position(path)
    return Finding(
        file=doc.file,
        line=line,
        column=column,
        severity=Severity.ERROR,
        path=path_text(path),
        message=message,
        hint=hint,
    )


def _add_document(state: _Folder, doc: Document) -> None:
    kind = str(doc.data.get("kind"))
    if kind == "Rollout":
        state.findings.append(
            _doc_finding(
                doc,
                ("kind",),
                "a Rollout belongs in the cluster's rollouts/ folder",
                "move it to rollouts/<its name>.yaml, one rollout per file",
            )
        )
        return
    model, findings = model_from_document(doc)
    state.findings.extend(findings)
    if kind in state.first:
        first = state.first[kind]
        line, column = doc.position(("kind",))
        state.findings.append(
            Finding(
                file=doc.file,
                line=line,
                column=column,
                severity=Severity.ERROR,
                path=path_text(("kind",)),
                message=f"a second {kind} document in this cluster (the first is in "
                f"{first.file}:{first.position(('kind',))[0]})",
                hint=f"keep one {kind} per cluster folder; put each cluster in its own folder",
            )
        )
        return
    if model is not None or kind in ("Cluster", "BalancePolicy", "PlacementRules", "Placement"):
        state.first[kind] = doc
    if model is not None:
        state.models[kind] = (model, doc)


def _add_rollout(state: _Folder, path: Path, documents: list[Document]) -> None:
    """The documents of one file in ``rollouts/``: one Rollout named as the file."""
    stem = path.name.rsplit(".", 1)[0]
    for doc in documents[1:]:
        state.findings.append(
            _doc_finding(
                doc,
                (),
                f"a second document in {path.name}",
                f"keep one rollout per file: rollouts/<name>.yaml (this one is {stem})",
            )
        )
    if not documents:
        return
    doc = documents[0]
    kind = doc.data.get("kind")
    if "kind" not in doc.data:
        state.findings.append(_doc_finding(doc, (), "missing kind", "add kind: Rollout"))
        return
    if kind != "Rollout":
        shown = kind if isinstance(kind, str) else str(kind)
        state.findings.append(
            _doc_finding(
                doc,
                ("kind",),
                f"rollouts/ holds only Rollout documents, this is {shown}",
                "put Cluster, BalancePolicy, PlacementRules and Placement in the cluster "
                "folder itself",
            )
        )
        return
    model, findings = model_from_document(doc)
    state.findings.extend(findings)
    if not isinstance(model, Rollout):
        return
    if model.metadata.name != stem:
        state.findings.append(
            _doc_finding(
                doc,
                ("metadata", "name"),
                f"the rollout is named {model.metadata.name!r} in a file named {path.name}",
                f"name the file rollouts/{model.metadata.name}.yaml, or the rollout {stem}",
            )
        )
        return
    state.rollouts[stem] = (model, doc)


def _desired(state: _Folder) -> tuple[DesiredState, Sources] | None:
    cluster = state.models.get("Cluster")
    if cluster is None or not isinstance(cluster[0], Cluster):
        return None
    parts: dict[str, object] = {"cluster": cluster[0]}
    for kind, key, cls in (
        ("BalancePolicy", "policy", BalancePolicy),
        ("PlacementRules", "rules", PlacementRules),
        ("Placement", "placement", Placement),
    ):
        if kind in state.models and isinstance(state.models[kind][0], cls):
            parts[key] = state.models[kind][0]
    names = sorted(state.rollouts)
    parts["rollouts"] = [state.rollouts[n][0] for n in names]
    desired = DesiredState.model_validate(parts)
    rules = state.models.get("PlacementRules")
    placement = state.models.get("Placement")
    policy = state.models.get("BalancePolicy")
    sources = Sources(
        cluster=cluster[1],
        policy=policy[1] if policy else None,
        rules=rules[1] if rules else None,
        placement=placement[1] if placement else None,
        rollouts=tuple(state.rollouts[n][1] for n in names),
    )
    return desired, sources


def _read_folder(folder: Path, files: Sequence[Path]) -> _Folder:
    state = _Folder()
    for path in files:
        try:
            documents = read_documents(path, root=folder)
        except DocumentError as err:
            state.findings.append(_document_error_finding(err))
            state.unreadable = True
            continue
        if not documents:
            state.findings.append(_empty_file_finding(path))
        if is_rollout_file(path):
            _add_rollout(state, path, documents)
            continue
        for doc in documents:
            _add_document(state, doc)
    return state


def _folder_files(folder: Path) -> tuple[list[Path], list[Finding]]:
    """The cluster folder's YAML files, then those of its ``rollouts/``."""
    rollouts = folder / ROLLOUTS
    if rollouts.is_symlink():
        finding = _folder_finding(
            rollouts,
            "the rollouts folder is a symlink",
            "keep the rollouts in a real folder inside the cluster folder",
        )
        return yaml_files(folder), [finding]
    hidden = [
        Finding(
            file=str(path),
            severity=Severity.WARNING,
            message="a hidden file is not read: no rollout is carried out from it",
            hint=f"to carry it out, name it {path.name.lstrip('.')}; otherwise move it out of "
            f"{ROLLOUTS}/",
        )
        for path in hidden_rollout_files(folder)
    ]
    return yaml_files(folder) + rollout_files(folder), hidden


_EMPTY_KIND_FILES = {
    "cluster": ("no Cluster", "write the Cluster with its hosts; " + _DOCS_HINT),
    "policy": ("no BalancePolicy: the defaults apply", "write the policy, or remove the file"),
    "rules": (
        "no PlacementRules: the cluster has no rules",
        "write the rules, or remove the file if the cluster has none",
    ),
    "placement": (
        "no Placement: no VM has a desired host",
        "write the placement, or remove the file",
    ),
}


def _empty_file_finding(path: Path) -> Finding:
    """A file with no documents (empty, blank, comments only): a warning that says what the
    cluster then lacks when the file is named after a kind."""
    stem = path.name.lower().rsplit(".", 1)[0]
    what, hint = _EMPTY_KIND_FILES.get(stem, ("", "add a document, or remove the file"))
    return Finding(
        file=str(path),
        line=1,
        column=1,
        severity=Severity.WARNING,
        message="the file holds no documents" + (f"; {what}" if what else ""),
        hint=hint,
    )


def _folder_finding(folder: Path, message: str, hint: str) -> Finding:
    return Finding(file=folder_text(folder), severity=Severity.ERROR, message=message, hint=hint)


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.file, f.line or 0, f.column or 0))


def validate_folder(
    folder: Path, files: Sequence[Path] | None = None
) -> tuple[ClusterReport, DesiredState | None]:
    """Every finding of one cluster folder, and its desired state when there is no error.

    ``files`` limits the reading to those files (default: every YAML file of the folder).
    """
    refused: list[Finding] = []
    try:
        if files is None:
            paths, refused = _folder_files(folder)
        else:
            paths = list(files)
    except OSError as exc:
        finding = _folder_finding(
            folder,
            f"cannot list the folder: {exc.strerror or exc}",
            "check that it exists and is readable",
        )
        return ClusterReport(folder=folder_text(folder), findings=[finding]), None
    state = _read_folder(folder, paths)
    state.findings.extend(refused)
    if not paths or (not state.first and not state.findings):
        state.findings.append(
            _folder_finding(
                folder,
                "no cluster documents found",
                f"add a cluster.yaml with kind: Cluster; {_DOCS_HINT}",
            )
        )
    elif "Cluster" not in state.first and not state.unreadable:
        state.findings.append(
            _folder_finding(
                folder,
                "no Cluster document in this folder",
                f"add a cluster.yaml with kind: Cluster listing the hosts; {_DOCS_HINT}",
            )
        )
    built = _desired(state) if not errors_in(state.findings) else None
    desired = None
    name = hosts = rules = None
    if built is not None:
        desired, sources = built
        state.findings.extend(semantic_findings(desired, sources))
        state.findings.extend(reference_findings(desired, sources))
        name = desired.cluster.metadata.name
        hosts = len(desired.cluster.spec.hosts)
        rules = len(desired.rules.spec.rules)
    report = ClusterReport(
        folder=folder_text(folder),
        named=_named(state),
        name=name,
        hosts=hosts or 0,
        rules=rules or 0,
        rollouts=len(desired.rollouts) if desired is not None else 0,
        findings=_sorted(state.findings),
    )
    return report, desired if report.valid else None


def _named(state: _Folder) -> tuple[str, str, int, int] | None:
    cluster = state.models.get("Cluster")
    if cluster is None or not isinstance(cluster[0], Cluster):
        return None
    model, doc = cluster
    line, column = doc.position(("metadata", "name"))
    return model.metadata.name, doc.file, line, column


def validate_paths(paths: Sequence[Path]) -> list[ClusterReport]:
    """One report per cluster found under ``paths`` (files and folders).

    A folder of cluster folders yields one report per cluster; a file is checked with the rest
    of its folder as context, and only the findings in that file are kept. Paths must exist.
    Cluster folders validated together must have cluster names of their own.
    """
    reports: list[ClusterReport] = []
    for given in paths:
        # a cluster's rollouts are checked with their cluster
        path = given.parent if _is_rollouts_folder(given) else given
        if path.is_dir():
            try:
                folders = cluster_folders(path) or [path]
            except OSError:
                folders = [path]
            reports.extend(validate_folder(folder)[0] for folder in folders)
        else:
            reports.append(_validate_file(path))
    return _names_of_their_own(reports)


def _names_of_their_own(reports: list[ClusterReport]) -> list[ClusterReport]:
    """``reports`` with an error in each folder whose cluster name another one declares too;
    a folder given twice is one folder."""
    named: dict[str, tuple[str, tuple[str, str, int, int]]] = {}
    for report in reports:
        if report.files is None and report.named is not None:
            named.setdefault(str(Path(report.folder).resolve()), (report.folder, report.named))
    findings = shared_name_findings(dict(named.values()))
    return [
        r.model_copy(update={"findings": _sorted([*r.findings, findings[r.folder]])})
        if r.folder in findings and r.files is None
        else r
        for r in reports
    ]


def _is_rollouts_folder(path: Path) -> bool:
    return path.is_dir() and path.name == ROLLOUTS and bool(yaml_files(path.parent))


def _validate_file(path: Path) -> ClusterReport:
    folder = path.parent.parent if is_rollout_file(path) else path.parent
    context = [p for p in yaml_files(folder) + rollout_files(folder) if p != path]
    report, _ = validate_folder(folder, [path, *context])
    own = [f for f in report.findings if f.file == str(path)]
    return report.model_copy(update={"folder": str(path), "files": 1, "findings": own})


def load_desired(folder: Path) -> DesiredState:
    """The desired state of the cluster in ``folder``.

    Raises ConfigError when the folder does not exist, and ValidationFailed (with every
    finding in ``.findings``) when it has any error. Warnings do not stop it.
    """
    if not folder.is_dir():
        raise ConfigError(
            f"{folder} is not a folder",
            hint="give the cluster-state folder that holds cluster.yaml",
        )
    report, desired = validate_folder(folder)
    if desired is None:
        errors = errors_in(report.findings)
        lines = "\n".join(format_finding(f) for f in errors)
        raise ValidationFailed(
            f"{report.folder} is not valid ({counted(len(errors), 'error')}):\n{lines}",
            report.findings,
        )
    return desired
