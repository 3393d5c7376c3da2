"""A cluster folder read with another BalancePolicy in place of its own (``simulate
--policy FILE``), or with a rollout not merged yet (``simulate --rollout FILE``): the file is
checked with the folder, as ``validate`` would check it there, and its findings name the file
given."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from reconciler.config.folders import ROLLOUTS
from reconciler.config.loader import load_desired
from reconciler.errors import ConfigError, DocumentError, ValidationFailed
from reconciler.model.desired import DesiredState
from reconciler.model.simulation import HostKinds

_POLICY = re.compile(r"^kind:\s*BalancePolicy\s*$", re.MULTILINE)
_KIND = re.compile(r"^kind:\s*(\S+)\s*$", re.MULTILINE)


def load_with_policy(folder: Path, policy: Path) -> DesiredState:
    """The desired state of ``folder`` with the BalancePolicy of the file ``policy``."""
    try:
        text = policy.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{policy}: cannot be read: {err}", hint="a YAML file") from err
    kinds = set(_KIND.findall(text))
    if kinds != {"BalancePolicy"}:
        raise ConfigError(
            f"{policy}: holds {', '.join(sorted(kinds)) or 'no kind'}, not one BalancePolicy",
            hint="give a file with just the policy to compare (kind: BalancePolicy)",
        )
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder", hint="give the cluster folder")
    with tempfile.TemporaryDirectory(prefix="reconciler-policy-") as tmp:
        work = Path(tmp) / folder.name
        work.mkdir()
        for path in sorted(folder.iterdir()):
            if path.is_dir() or path.suffix not in (".yaml", ".yml"):
                continue
            content = path.read_text(encoding="utf-8", errors="replace")
            if _POLICY.search(content):
                if set(_KIND.findall(content)) != {"BalancePolicy"}:
                    raise ConfigError(
                        f"{path}: holds its BalancePolicy with other kinds",
                        hint="keep the policy in a file of its own to compare policies",
                    )
                continue
            shutil.copyfile(path, work / path.name)
        shutil.copyfile(policy, work / "policy.yaml")
        try:
            return load_desired(work)
        except ValidationFailed as err:
            message = err.message.replace(str(work / "policy.yaml"), str(policy))
            message = message.replace(f"{work}/", f"{folder}/")
            raise ValidationFailed(message, err.findings) from None


def load_with_rollouts(folder: Path, rollouts: Sequence[Path]) -> DesiredState:
    """The desired state of ``folder`` with the Rollouts of the files ``rollouts`` among its
    own (``simulate --rollout FILE``): each as ``rollouts/<its name>.yaml``, replacing the
    folder's rollout of that name, checked with the folder as ``validate`` would check it
    there; its findings name the file given."""
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder", hint="give the cluster folder")
    with tempfile.TemporaryDirectory(prefix="reconciler-rollout-") as tmp:
        work = Path(tmp) / folder.name
        (work / ROLLOUTS).mkdir(parents=True)
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.suffix in (".yaml", ".yml"):
                shutil.copyfile(path, work / path.name)
        own = folder / ROLLOUTS
        if own.is_dir() and not own.is_symlink():
            for path in sorted(own.iterdir()):
                if path.is_file() and path.suffix in (".yaml", ".yml"):
                    shutil.copyfile(path, work / ROLLOUTS / path.name)
        given: dict[Path, Path] = {}
        for rollout in rollouts:
            name = _rollout_name(rollout)
            for suffix in (".yaml", ".yml"):
                (work / ROLLOUTS / f"{name}{suffix}").unlink(missing_ok=True)
            copy = work / ROLLOUTS / f"{name}.yaml"
            if copy in given:
                raise ConfigError(
                    f"{rollout}: a second rollout named {name} (the first is {given[copy]})",
                    hint="give each --rollout once",
                )
            shutil.copyfile(rollout, copy)
            given[copy] = rollout
        try:
            return load_desired(work)
        except ValidationFailed as err:
            message = err.message
            for copy, rollout in given.items():
                message = message.replace(str(copy), str(rollout))
            message = message.replace(f"{work}/", f"{folder}/")
            raise ValidationFailed(message, err.findings) from None


def _rollout_name(path: Path) -> str:
    """``metadata.name`` of the one Rollout in the file ``path``; ConfigError naming the
    file when it holds none."""
    from reconciler.config.yaml_source import read_documents

    hint = "give a file with just the rollout to simulate (kind: Rollout, metadata.name)"
    try:
        documents = read_documents(path, root=path.parent)
    except DocumentError as err:
        raise ConfigError(str(err), hint=hint) from None
    kinds = [d.data.get("kind") for d in documents]
    if kinds != ["Rollout"]:
        shown = ", ".join(str(k) for k in kinds) or "no document"
        raise ConfigError(f"{path}: holds {shown}, not one Rollout", hint=hint)
    metadata = documents[0].data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ConfigError(f"{path}: the rollout has no metadata.name", hint=hint)
    return name


def load_host_kinds(path: Path) -> HostKinds:
    """The HostKinds of the file ``path`` (``simulate --kinds``); ValidationFailed with a
    finding on the line of each problem."""
    from pydantic import ValidationError

    from reconciler.config.findings import format_finding
    from reconciler.config.kinds import error_finding
    from reconciler.config.yaml_source import read_documents

    try:
        documents = read_documents(path, root=path.parent)
    except DocumentError as err:
        raise ConfigError(str(err), hint="a YAML file with kind: HostKinds") from None
    if len(documents) != 1:
        raise ConfigError(
            f"{path}: {len(documents)} documents, not one HostKinds",
            hint="one document: apiVersion, kind: HostKinds, kinds: [...]",
        )
    doc = documents[0]
    try:
        return HostKinds.model_validate(doc.data)
    except ValidationError as err:
        findings = [error_finding(doc, HostKinds, e) for e in err.errors()]
        raise ValidationFailed("\n".join(format_finding(f) for f in findings), findings) from None
