"""Minimal edits of cluster documents: the one entry that changes, everything else kept.

Proposals and drains change a few values in files that people own: their comments, key
order, quoting, flow style and the ``# yaml-language-server`` header must survive, so a pull
request shows only the lines that matter. ruamel.yaml's round-trip mode keeps all of that;
the indentation is not recorded by it, so it is found by trying the usual layouts until one
reproduces the original text exactly.

Pure functions, text in, text out: the engine edits text read from git with them, and
``reconciler.adapters.files.text`` applies them to files.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, ScalarString
from ruamel.yaml.tokens import CommentToken

from reconciler.errors import ConfigError

# (mapping, sequence, offset) layouts tried in order; the first that round-trips wins.
_LAYOUTS = ((2, 4, 2), (2, 2, 0), (4, 4, 2), (4, 6, 4), (4, 4, 0), (3, 3, 1))


class _LoaderResolver(VersionedResolver):
    """Plain scalars mean what they mean to the loader (PyYAML, YAML 1.1): ``0o10`` and
    ``1e3`` are strings there, numbers in ruamel's 1.2 and 1.1; ``yes`` is a boolean there.
    Editing with another meaning would duplicate keys or quote untouched values."""

    @property
    def versioned_resolver(self) -> Any:
        # a fresh copy: ruamel extends the lists it gets back
        return {k: list(v) for k, v in yaml.resolver.Resolver.yaml_implicit_resolvers.items()}


def _yaml(layout: tuple[int, int, int]) -> YAML:
    y = YAML(typ="rt")
    y.Resolver = _LoaderResolver
    y.preserve_quotes = True
    y.width = 1 << 16  # never re-wrap long lines or flow mappings
    mapping, sequence, offset = layout
    y.indent(mapping=mapping, sequence=sequence, offset=offset)
    return y


def _dump(y: YAML, docs: list[Any]) -> str:
    out = io.StringIO()
    y.dump_all(docs, out)
    return out.getvalue()


def _explicit_start(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped.startswith("---")
    return False


def _load(text: str, file: str) -> tuple[YAML, list[Any]]:
    """Load every document and pick the layout that writes ``text`` back unchanged."""
    best: tuple[int, YAML] | None = None
    for layout in _LAYOUTS:
        y = _yaml(layout)
        y.explicit_start = _explicit_start(text)
        try:
            docs = list(y.load_all(text))
        except YAMLError as err:
            raise ConfigError(
                f"{file}: not valid YAML: {err}", hint="fix the YAML syntax first"
            ) from None
        dumped = _dump(y, docs)
        if dumped == text:
            return y, docs
        differing = sum(
            a != b for a, b in zip(dumped.splitlines(), text.splitlines(), strict=False)
        )
        if best is None or differing < best[0]:
            best = (differing, y)
    assert best is not None
    y = best[1]
    return y, list(y.load_all(text))


def _documents_of_kind(docs: list[Any], kind: str, file: str) -> Iterator[CommentedMap]:
    found = False
    for doc in docs:
        if isinstance(doc, CommentedMap) and doc.get("kind") == kind:
            found = True
            yield doc
    if not found:
        raise ConfigError(
            f"{file}: no document of kind {kind}",
            hint=f"pass the file that holds the {kind} document",
        )


def _child_map(parent: CommentedMap, key: str) -> CommentedMap:
    """``parent[key]`` as a mapping, created (block style) when missing, null or empty."""
    found: object = parent.get(key)
    if isinstance(found, CommentedMap):
        value = found
    elif found is None:
        value = CommentedMap()
        parent[key] = value
    else:
        raise ConfigError(
            f"{key} is a {type(found).__name__}, not a mapping",
            hint=f"write {key} as a mapping of names to values",
        )
    if not value and value.fa.flow_style():
        value.fa.set_block_style()  # `spec: {}` grows into readable block lines
    return value


def _plain_is_string(text: str) -> bool:
    """Whether ``text`` unquoted reads back as this string to the loader (YAML 1.1)."""
    try:
        return bool(yaml.safe_load(text) == text)
    except yaml.YAMLError:
        return False


def _scalar(old: object, new: str) -> str:
    """``new`` in the quoting style of the value it replaces; double quotes where needed."""
    if isinstance(old, ScalarString):
        return type(old)(new)
    return new if _plain_is_string(new) else DoubleQuotedScalarString(new)


def _split_trailing_comment(table: CommentedMap) -> CommentToken | None:
    """Detach the comment lines after the last entry (ruamel keeps them on its end-of-line
    comment) so new entries go above them, not below a trailing comment."""
    if not table:
        return None
    last = list(table)[-1]
    slots = table.ca.items.get(last)
    token = slots[2] if slots and len(slots) > 2 else None
    if not isinstance(token, CommentToken) or "\n" not in token.value:
        return None
    first, rest = token.value.split("\n", 1)
    if not rest:
        return None
    moved = copy.copy(token)  # keeps the marks the emitter needs
    moved.value = "\n" + rest
    token.value = first + "\n"
    return moved


def _attach_trailing_comment(table: CommentedMap, token: CommentToken) -> None:
    table.ca.items[list(table)[-1]] = [None, None, token, None]


def set_placement(text: str, vms: Mapping[str, str], *, file: str = "placement.yaml") -> str:
    """Set the desired host of each VM in the Placement document of ``text``.

    Listed VMs change in place (their comments stay); new ones are added at the end of
    ``spec.vms``. Returns ``text`` unchanged when every VM already has that host.
    """
    y, docs = _load(text, file)
    changed = False
    for doc in _documents_of_kind(docs, "Placement", file):
        table = _child_map(_child_map(doc, "spec"), "vms")
        new = [vm for vm in vms if vm not in table]
        trailing = _split_trailing_comment(table) if new and not table.fa.flow_style() else None
        for vm, host in vms.items():
            if table.get(vm) != host:
                key = vm if vm in table or _plain_is_string(vm) else DoubleQuotedScalarString(vm)
                table[key] = _scalar(table.get(vm), host)
                changed = True
        if trailing is not None:
            _attach_trailing_comment(table, trailing)
    return _dump(y, docs) if changed else text


def _hosts(doc: CommentedMap, file: str) -> CommentedSeq:
    spec = doc.get("spec")
    hosts = spec.get("hosts") if isinstance(spec, CommentedMap) else None
    if not isinstance(hosts, CommentedSeq):
        raise ConfigError(f"{file}: the Cluster has no spec.hosts list", hint="add the hosts")
    return hosts


def set_maintenance(text: str, host: str, maintenance: bool, *, file: str = "cluster.yaml") -> str:
    """Set or clear ``maintenance: true`` of ``host`` in the Cluster document of ``text``.

    Setting keeps an existing ``maintenance`` key's place and comment; clearing removes the
    key (false is the default), so ``undrain`` takes away what ``drain`` added.
    """
    y, docs = _load(text, file)
    for doc in _documents_of_kind(docs, "Cluster", file):
        for entry in _hosts(doc, file):
            if isinstance(entry, CommentedMap) and entry.get("name") == host:
                current = bool(entry.get("maintenance", False))
                if current == maintenance or ("maintenance" not in entry and not maintenance):
                    return text
                if maintenance:
                    entry["maintenance"] = True
                else:
                    del entry["maintenance"]
                return _dump(y, docs)
    raise ConfigError(
        f"{file}: host {host!r} is not in the Cluster",
        hint="use a host name from spec.hosts",
    )


def placement_entries(text: str | None, *, file: str = "placement.yaml") -> dict[str, str]:
    """The VM -> host entries of the Placement document in ``text`` ({} when there is none)."""
    if not text:
        return {}
    _, docs = _load(text, file)
    out: dict[str, str] = {}
    for doc in _documents_of_kind(docs, "Placement", file):
        spec = doc.get("spec")
        vms = spec.get("vms") if isinstance(spec, Mapping) else None
        if isinstance(vms, Mapping):
            out.update({str(k): str(v) for k, v in vms.items()})
    return out


def three_way(
    base: Mapping[str, str], theirs: Mapping[str, str], ours: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Which of ``ours`` (entries a round wants to write) to write over ``theirs`` (the file
    now), given ``base`` (the file the round read): (to write, kept as a person wrote them).

    An entry a person changed since ``base`` is theirs: the round does not overwrite it.
    """
    write: dict[str, str] = {}
    kept: dict[str, str] = {}
    for vm, host in ours.items():
        if theirs.get(vm) != base.get(vm) and theirs.get(vm) != host:
            kept[vm] = theirs.get(vm, "(removed)")
        else:
            write[vm] = host
    return write, kept
