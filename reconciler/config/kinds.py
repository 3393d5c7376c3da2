"""YAML documents into models, by ``kind``; model errors into findings on the YAML lines."""

from __future__ import annotations

import json
import types
import typing
from datetime import timedelta
from typing import Any, Final, Union

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from reconciler.config.findings import Finding, Severity, path_text
from reconciler.config.yaml_source import DocPath, Document
from reconciler.model.base import API_VERSION, LABEL_KEY_PATTERN, NAME_PATTERN
from reconciler.model.cluster import Cluster
from reconciler.model.placement import Placement
from reconciler.model.policy import (
    CRON_EXAMPLE,
    BalancePolicy,
    Window,
    cron_problem,
    timezone_problem,
)
from reconciler.model.rollout import Rollout
from reconciler.model.rules import PlacementRules

KindModel = Cluster | BalancePolicy | PlacementRules | Placement | Rollout

KINDS: Final[dict[str, type[KindModel]]] = {
    "Cluster": Cluster,
    "BalancePolicy": BalancePolicy,
    "PlacementRules": PlacementRules,
    "Placement": Placement,
    "Rollout": Rollout,
}
_KIND_LIST: Final = ", ".join(k for k in KINDS if k != "Rollout")
"""The kinds of a cluster folder's own files (a Rollout has a folder of its own)."""

_PATTERN_HINTS: Final = {
    NAME_PATTERN: "use up to 128 letters, digits and _ . : + -, starting with a letter, digit or _",
    LABEL_KEY_PATTERN: "use up to 63 letters, digits and _ . / -, starting and ending with a "
    "letter or digit",
    r"^\S+(\s+\S+){4}$": 'write a five-field cron expression, e.g. "0 22 * * 1-5"',
}

_DOCS_HINT: Final = "see docs/cluster-state.md for what this key accepts"

_TYPE_NAMES: Final = {
    "string_type": "a string",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}


def describe(value: object) -> str:
    """How a YAML reader would name ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _has(container: object, item: str | int) -> bool:
    if isinstance(container, dict):
        return item in container
    return isinstance(container, list) and isinstance(item, int) and 0 <= item < len(container)


def _data_path(data: object, loc: tuple[str | int, ...]) -> DocPath:
    """``loc`` as a path in the document: union tags (a rule's ``type``) dropped."""
    out: list[str | int] = []
    current: object = data
    for i, item in enumerate(loc):
        if _has(current, item):
            current = current[item]  # type: ignore[index]
        elif isinstance(current, dict) and i < len(loc) - 1 and current.get("type") == item:
            continue
        else:
            current = None
        out.append(item)
    return tuple(out)


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return tp


def _union_member(tp: Any, tag: object) -> Any:
    for candidate in typing.get_args(tp):
        member = _unwrap(candidate)
        if isinstance(member, type) and issubclass(member, BaseModel):
            field = member.model_fields.get("type")
            if field is not None and typing.get_args(field.annotation) == (tag,):
                return member
    return None


def allowed_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """Keys the model accepts in the mapping at ``loc`` (a pydantic loc, tags included)."""
    tp: Any = model
    for item in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {f.alias or name: f for name, f in tp.model_fields.items()}
            if item not in fields:
                return []
            tp = fields[str(item)].annotation
        elif origin is list:
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        elif origin in (Union, types.UnionType):
            tp = _union_member(tp, item)
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items()]
    return []


_BOUND_KEYS: Final = {
    "less_than_equal": "le",
    "less_than": "lt",
    "greater_than_equal": "ge",
    "greater_than": "gt",
}


def _bounds_message(kind: str, value: object, bound: object) -> tuple[str, str]:
    shown = describe(value).removeprefix("the number ")
    if isinstance(bound, float) and bound.is_integer():
        bound = int(bound)
    return {
        "less_than_equal": (f"{shown} is too large", f"use at most {bound}"),
        "less_than": (f"{shown} is too large", f"use less than {bound}"),
        "greater_than_equal": (f"{shown} is too small", f"use at least {bound}"),
        "greater_than": (f"{shown} is too small", f"use more than {bound}"),
    }[kind]


def _split_hint(text: str) -> tuple[str, str]:
    """Model validators write "what is wrong; how to fix it"."""
    what, sep, how = text.partition("; ")
    return (what, how) if sep else (text, _DOCS_HINT)


_YAML11_BOOLS: Final = frozenset("y Y yes Yes YES n N no No NO on On ON off Off OFF".split())
"""Words YAML 1.1 reads as booleans, besides true and false."""
_NUMBER_KINDS: Final = frozenset(
    {"int_type", "int_parsing", "int_from_float", "float_type", "float_parsing"}
)


def _type_message(kind: str, value: object, raw: str | None) -> tuple[str, str]:
    """A value of the wrong type; YAML's readings of ``yes`` and ``"20"`` explained."""
    expected = _TYPE_NAMES[kind]
    found = f"expected {expected}, found {describe(value)}"
    if kind == "string_type" and raw is not None and not isinstance(value, str):
        return found, f'put it in quotes: "{raw}"'
    if kind in _NUMBER_KINDS and isinstance(value, bool) and raw in _YAML11_BOOLS:
        return f"expected {expected}, found {raw} (YAML reads it as {describe(value)})", (
            f"write {expected} here"
        )
    if kind in _NUMBER_KINDS and isinstance(value, str) and _is_number(value):
        return found, f"remove the quotes: {value.strip()}"
    if kind == "bool_type" and isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
        return found, f"remove the quotes: {value.strip().lower()}"
    return found, f"write {expected} here"


_BOOL_WORDS: Final = frozenset({"true", "false"})


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def message_and_hint(
    doc: Document, model: type[BaseModel], error: ErrorDetails, path: DocPath
) -> tuple[str, str | None]:
    """What is wrong and how to fix it, for one pydantic error."""
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    key = path[-1] if path else ""
    if kind == "extra_forbidden":
        allowed = allowed_keys(model, error["loc"][:-1])
        import difflib  # only for the hint of an unknown key: off every valid run's path

        close = difflib.get_close_matches(str(key), allowed, n=1)
        listed = ", ".join(allowed)
        if close:
            return f"unknown key {key!r}", f"did you mean {close[0]!r}? allowed here: {listed}"
        return f"unknown key {key!r}", f"remove it; allowed here: {listed}"
    if kind == "missing":
        return f"missing required key {key!r}", f"add {key}: to this mapping"
    if kind == "union_tag_not_found":
        return "missing key 'type'", f"add type: one of {ctx.get('expected_tags')}"
    if kind == "union_tag_invalid":
        return f"unknown type {ctx.get('tag')!r}", f"use one of {ctx.get('expected_tags')}"
    if kind in ("enum", "literal_error"):
        return f"{describe(value)} is not allowed", f"use one of {ctx.get('expected')}"
    if kind in ("less_than_equal", "less_than", "greater_than_equal", "greater_than"):
        return _bounds_message(kind, value, ctx.get(_BOUND_KEYS[kind]))
    if kind == "finite_number":
        raw = doc.raw.get(path, str(value))
        return f"{raw} is not a finite number", "write a number such as 1 or 0.5"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        return (
            f"{describe(value)} is not a valid value here",
            _PATTERN_HINTS.get(pattern, f"write a value matching {pattern}"),
        )
    if kind == "too_short":
        return "must not be empty", f"give at least {ctx.get('min_length', 1)}, or remove the key"
    if kind in _TYPE_NAMES:
        return _type_message(kind, value, doc.raw.get(path))
    if kind in ("value_error", "assertion_error"):
        text = str(ctx.get("error", error["msg"]))
        return _split_hint(text)
    return error["msg"], _DOCS_HINT


def error_finding(doc: Document, model: type[BaseModel], error: ErrorDetails) -> Finding:
    """One pydantic error as a finding on the line it concerns."""
    path = _data_path(doc.data, error["loc"])
    kind = error["type"]
    if kind == "missing":
        line, column = doc.position(path[:-1], key=True)
    else:
        line, column = doc.position(path, key=kind == "extra_forbidden")
    message, hint = message_and_hint(doc, model, error, path)
    return _at(doc, path, message, hint, position=(line, column))


def _at(
    doc: Document,
    path: DocPath,
    message: str,
    hint: str | None,
    *,
    position: tuple[int, int] | None = None,
) -> Finding:
    """An error at ``path``, on the line of its value unless ``position`` says otherwise."""
    line, column = position if position is not None else doc.position(path)
    return Finding(
        file=doc.file,
        line=line,
        column=column,
        severity=Severity.ERROR,
        path=path_text(path),
        message=message,
        hint=hint,
    )


def header_findings(doc: Document) -> list[Finding]:
    """Problems with ``apiVersion`` and ``kind``, said more plainly than the models would."""
    out = []
    api = doc.data.get("apiVersion")
    if "apiVersion" not in doc.data:
        out.append(_at(doc, (), "missing apiVersion", f"add apiVersion: {API_VERSION}"))
    elif api != API_VERSION:
        out.append(
            _at(
                doc,
                ("apiVersion",),
                f"unknown apiVersion {describe(api).removeprefix('the string ')}",
                f"use apiVersion: {API_VERSION}",
            )
        )
    kind = doc.data.get("kind")
    if "kind" not in doc.data:
        out.append(_at(doc, (), "missing kind", f"add kind: one of {_KIND_LIST}"))
    elif kind not in KINDS:
        shown = describe(kind).removeprefix("the string ")
        out.append(_at(doc, ("kind",), f"unknown kind {shown}", f"use one of {_KIND_LIST}"))
    return out


def model_from_document(doc: Document) -> tuple[KindModel | None, list[Finding]]:
    """The model of ``doc``'s kind, or None with the findings that prevent it."""
    findings = header_findings(doc)
    model = KINDS.get(str(doc.data.get("kind")))
    if model is None:
        return None, findings
    try:
        # Strict, as for JSON: a number must be written as a number (not "20", not yes), a
        # boolean as true or false; enums and sizes still read from their strings.
        value = model.model_validate_json(
            json.dumps(doc.data), strict=True, by_alias=True, by_name=False
        )
    except ValidationError as exc:
        findings += [
            error_finding(doc, model, error)
            for error in exc.errors()
            if error["loc"] not in (("apiVersion",), ("kind",))
        ]
        return None, findings
    if isinstance(value, BalancePolicy | Rollout):
        findings += window_findings(doc, value.spec.windows)
    return (None, findings) if findings else (value, findings)


def window_findings(doc: Document, windows: list[Window] | None) -> list[Finding]:
    """Windows (``spec.windows`` of a policy or a rollout) the core could never open: a cron
    field out of range (read by cronsim, as the core reads it), a duration of 0, an unknown
    time zone. The model accepts them so that the core, not a constructor, decides what an
    unreadable window means (it stays closed)."""
    out = []
    for i, window in enumerate(windows or ()):
        where: DocPath = ("spec", "windows", i)
        problem = cron_problem(window.schedule)
        if problem is not None:
            out.append(_at(doc, (*where, "schedule"), problem, CRON_EXAMPLE))
        if window.duration <= timedelta(0):
            out.append(
                _at(
                    doc,
                    (*where, "duration"),
                    "a window of 0s never opens",
                    "give how long it stays open, e.g. 2h",
                )
            )
        zone = window.timezone
        problem = None if zone is None else timezone_problem(zone)
        if problem is not None:
            out.append(_at(doc, (*where, "timezone"), *_split_hint(problem)))
    return out


__all__ = ["KINDS", "KindModel", "model_from_document"]
