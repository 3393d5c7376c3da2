"""A cluster folder read with another BalancePolicy in place of its own (``simulate
--policy FILE``): the policy file is checked with the folder, as ``validate`` would check it
there, and its findings name the file given."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

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
