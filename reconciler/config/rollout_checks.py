"""Checks of each rollout against its cluster: hosts, placeholders, secrets, names, pins.

Pure functions: the desired state and the position of each rollout's document in, findings out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from reconciler.config.findings import Finding, Severity, finding_at
from reconciler.config.selectors import (
    hosts_matching,
    is_glob,
    literal_members,
    unknown_host_hint,
)
from reconciler.config.yaml_source import DocPath, Document
from reconciler.core.rollout_hosts import rollout_hosts
from reconciler.core.rollout_steps import host_steps
from reconciler.model.desired import DesiredState
from reconciler.model.rollout import Command, ImmovableAction, Rollout
from reconciler.model.rules import PinRule, Selector

PLACEHOLDERS: Final = ("host", "uri")
_PLACEHOLDER = re.compile(r"\{([^{}\s]*)\}")
_SECRET_OPTION = re.compile(
    r"^--?(?:[a-z0-9]+[-_])*(?:password|passwd|pass|secret|token|apikey|api-key|api_key)"
    r"(?:=(?P<value>.*))?$",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@", re.IGNORECASE)
_SECRET_ENV = re.compile(
    r"(PASSWORD|PASSWD|SECRET|TOKEN|APIKEY|API_KEY|PRIVATE_KEY|ACCESS_KEY|CREDENTIAL)",
    re.IGNORECASE,
)
_SECRET_HINT: Final = (
    "every user of the machine can read a command line, and the file is in git: pass it "
    "through passEnv from the reconciler's environment (e.g. /etc/reconciler/env) and let "
    "the command read it from there"
)


def _at(doc: Document, path: DocPath, message: str, hint: str, *, warn: bool = False) -> Finding:
    severity = Severity.WARNING if warn else Severity.ERROR
    return finding_at(doc, path, severity, message, hint)


def _commands(rollout: Rollout) -> Iterator[tuple[DocPath, Command, bool]]:
    """Every command with its path and whether it runs per host ({host} has a value)."""
    spec = rollout.spec
    for key, steps in (("before", spec.before), ("after", spec.after)):
        for i, step in enumerate(steps):
            yield ("spec", key, i), step, False
    each = spec.each_host
    for i, step in enumerate(each.commands):
        yield ("spec", "eachHost", "commands", i), step, True
    if each.reboot is not None:
        yield ("spec", "eachHost", "reboot"), each.reboot, True
    for i, check in enumerate(each.ready.checks):
        yield ("spec", "eachHost", "ready", "checks", i), check, True


def _placeholder_findings(doc: Document, path: DocPath, text: str, per_host: bool) -> list[Finding]:
    out = []
    for match in _PLACEHOLDER.finditer(text):
        word = match.group(1)
        if word in PLACEHOLDERS and per_host:
            continue
        if word in PLACEHOLDERS:
            out.append(
                _at(
                    doc,
                    path,
                    f"{{{word}}} has no value here: this step runs once for the whole rollout, "
                    "not per host",
                    "move it to eachHost, or write the value out",
                )
            )
        elif word.isidentifier():
            close = [p for p in PLACEHOLDERS if p in word.lower()]
            hint = f"did you mean {{{close[0]}}}? " if close else ""
            out.append(
                _at(
                    doc,
                    path,
                    f"unknown placeholder {{{word}}}",
                    f"{hint}only {{host}} (the host's name) and {{uri}} (its libvirt URI) are "
                    "replaced",
                )
            )
    return out


def _argv_secret(argv: list[str], i: int) -> str | None:
    """Why argument ``i`` carries a secret, or None."""
    arg = argv[i]
    if _URL_PASSWORD.search(arg):
        return "a URL with a password"
    match = _SECRET_OPTION.match(arg)
    if match is None:
        return None
    value = match.group("value")
    if value is None:  # --password VALUE
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if nxt is None or nxt.startswith("-"):
            return None
        return f"{arg} followed by its value"
    return f"{arg.split('=', 1)[0]}=... with its value" if value else None


def _command_findings(
    doc: Document, path: DocPath, command: Command, per_host: bool
) -> list[Finding]:
    out = []
    for i, arg in enumerate(command.argv):
        where = (*path, "argv", i)
        out += _placeholder_findings(doc, where, arg, per_host)
        secret = _argv_secret(command.argv, i)
        if secret is not None:
            out.append(_at(doc, where, f"a secret on argv ({secret})", _SECRET_HINT))
    for name, value in command.env.items():
        where = (*path, "env", name)
        out += _placeholder_findings(doc, where, value, per_host)
        if (_SECRET_ENV.search(name) and value) or _URL_PASSWORD.search(value):
            out.append(
                _at(
                    doc,
                    where,
                    f"env {name} looks like a secret written into git",
                    f"remove it from env and add {name} to passEnv: its value then comes "
                    "from the reconciler's own environment",
                )
            )
    for j, name in enumerate(command.pass_env):
        if name in command.env:
            out.append(
                _at(
                    doc,
                    (*path, "passEnv", j),
                    f"{name} is both in env and in passEnv",
                    "keep one: env for a value written here, passEnv to pass it on",
                )
            )
    return out


def _duplicate_names(doc: Document, rollout: Rollout) -> list[Finding]:
    spec = rollout.spec
    lists: list[tuple[DocPath, list[str]]] = [
        (("spec", "before"), [s.name for s in spec.before]),
        (("spec", "after"), [s.name for s in spec.after]),
        (("spec", "eachHost", "commands"), [s.name for s in spec.each_host.commands]),
        (("spec", "eachHost", "ready", "checks"), [c.name for c in spec.each_host.ready.checks]),
    ]
    out = []
    for path, names in lists:
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in seen:
                out.append(
                    _at(
                        doc,
                        (*path, i, "name"),
                        f"a second step named {name!r} (also {path[-1]}[{seen[name]}])",
                        "give every step its own name: it names the step in status and history",
                    )
                )
            seen.setdefault(name, i)
    return out


def _hosts_path(doc: Document) -> DocPath:
    """Where the host names are written: ``hosts: [...]`` or ``hosts: {names: [...]}``."""
    spec = doc.data.get("spec")
    hosts = spec.get("hosts") if isinstance(spec, dict) else None
    return ("spec", "hosts") if isinstance(hosts, list) else ("spec", "hosts", "names")


def _host_findings(desired: DesiredState, doc: Document, rollout: Rollout) -> list[Finding]:
    hosts = desired.cluster.spec.hosts
    selector = rollout.spec.hosts
    out = []
    names_path = _hosts_path(doc)
    for j, name in enumerate(selector.names or ()):
        if hosts_matching(Selector(names=[name]), hosts):
            continue
        message = f"no host matches {name!r}" if is_glob(name) else f"host {name!r} does not exist"
        out.append(_at(doc, (*names_path, j), message, unknown_host_hint(name, hosts)))
    if out:
        return out
    picked = rollout_hosts(rollout, desired.cluster)
    if not picked:
        out.append(
            _at(
                doc,
                ("spec", "hosts"),
                "the rollout selects no host",
                "name hosts of the Cluster, or labels some of them have",
            )
        )
        return out
    total = len(hosts)
    if min(rollout.spec.max_unavailable, len(picked)) >= total:
        out.append(
            _at(
                doc,
                ("spec", "maxUnavailable"),
                f"maxUnavailable {rollout.spec.max_unavailable} takes every host of the "
                f"cluster out at once ({total}): their VMs would have nowhere to go",
                f"use at most {total - 1}",
            )
        )
    return out


def _pin_warnings(desired: DesiredState, doc: Document, rollout: Rollout) -> list[Finding]:
    """Pins to a host of a rollout that blocks on VMs that cannot leave."""
    if rollout.spec.immovable.action is not ImmovableAction.BLOCK:
        return []
    taken = set(rollout_hosts(rollout, desired.cluster))
    out = []
    for rule in desired.rules.spec.rules:
        if not isinstance(rule, PinRule):
            continue
        picked = hosts_matching(rule.hosts, desired.cluster.spec.hosts)
        if len(picked) != 1 or picked[0].name not in taken:
            continue
        vms = literal_members(rule.vms)
        what = ", ".join(sorted(vms)) if vms else f"the VMs of pin {rule.name}"
        out.append(
            _at(
                doc,
                ("spec", "hosts"),
                f"pin {rule.name} keeps {what} on {picked[0].name}: the rollout stops there "
                "while it runs",
                "shut it down for the host's turn with immovable.action: shutdown, or change "
                "the pin",
                warn=True,
            )
        )
    return out


def _resume_findings(desired: DesiredState, doc: Document, rollout: Rollout) -> list[Finding]:
    """Entries of spec.resume that name a host or a step the rollout does not have."""
    spec = rollout.spec
    hosts = rollout_hosts(rollout, desired.cluster)
    once = [f"before/{s.name}" for s in spec.before] + [f"after/{s.name}" for s in spec.after]
    out = []
    for i, entry in enumerate(spec.resume):
        if entry.host is not None and entry.host not in hosts:
            out.append(
                _at(
                    doc,
                    ("spec", "resume", i, "host"),
                    f"{entry.host!r} is not a host of this rollout",
                    f"its hosts: {', '.join(hosts)}; leave host out for a step before or after",
                )
            )
            continue
        steps = host_steps(rollout) if entry.host is not None else once
        if entry.step not in steps:
            out.append(
                _at(
                    doc,
                    ("spec", "resume", i, "step"),
                    f"{entry.step!r} is not a step "
                    + ("of its hosts" if entry.host is not None else "before or after its hosts"),
                    f"use one of: {', '.join(steps) or 'none'} (as rollout status names them)",
                )
            )
    return out


def _idle_warning(doc: Document, rollout: Rollout) -> list[Finding]:
    each = rollout.spec.each_host
    if each.commands or each.reboot is not None:
        return []
    return [
        _at(
            doc,
            ("spec",),
            "no command and no reboot per host: each host is drained and given back, nothing "
            "runs on it",
            "add eachHost.commands or eachHost.reboot",
            warn=True,
        )
    ]


def rollout_findings(desired: DesiredState, docs: tuple[Document, ...]) -> list[Finding]:
    """Every problem of the cluster's rollouts; ``docs``: the document of each rollout, in the
    order of ``desired.rollouts``."""
    out: list[Finding] = []
    for rollout, doc in zip(desired.rollouts, docs, strict=True):
        out += _host_findings(desired, doc, rollout)
        for path, command, per_host in _commands(rollout):
            out += _command_findings(doc, path, command, per_host)
        out += _duplicate_names(doc, rollout)
        out += _pin_warnings(desired, doc, rollout)
        out += _resume_findings(desired, doc, rollout)
        out += _idle_warning(doc, rollout)
    return out


__all__ = ["PLACEHOLDERS", "rollout_findings"]
