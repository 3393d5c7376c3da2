"""Every command parses its ``argparse.Namespace`` once, at the parser, into a frozen request;
nothing past that sees a Namespace.

Two checks anyone can run: the parser of every command word is walked, and each command that
reads desired state or acts builds a request that is frozen all the way down (the acting ones
an ``ActRequest``, the one thing ``acting.ActingPath`` is built from); and the source of the
whole package is read: a function that takes a Namespace is a command's handler, a request
builder or the parser's own plumbing, a handler hands its Namespace only to a request builder,
no Namespace is rebuilt, and no command reaches into another command's handler.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import importlib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli import COMMANDS, MODULE_OF, build_parser
from reconciler.cli.requests import (
    ActRequest,
    Confirmation,
    FolderRequest,
    HoldKind,
    RepoRequest,
)

PACKAGE = Path(__file__).resolve().parents[2] / "reconciler"

ARGV: dict[str, list[str]] = {
    "validate": ["validate", "some/folder"],
    "observe": ["observe", "some/folder"],
    "plan": ["plan", "some/folder", "--without-host", "kvm-01"],
    "place": ["place", "--vcpus", "2", "--memory", "4GiB", "--labels", "tier=web"],
    "apply": ["apply", "some/folder", "--yes", "--shared-path", "/srv/images"],
    "drain": ["drain", "kvm-01", "some/folder", "--apply", "--yes", "--lock-timeout", "30s"],
    "undrain": ["undrain", "kvm-01", "some/folder"],
    "run": ["run", "some/folder", "--identity", "standby-1"],
    "propose": ["propose", "--repo", "file:///srv/state.git"],
    "impact": ["impact", "--repo", "file:///srv/state.git", "--base", "main", "--head", "x"],
    "rollout": ["rollout", "status", "kernel-2026-12", "some/folder", "--format", "json"],
    "simulate": ["simulate", "some/folder", "--trace", "day", "--hosts", "4xG5", "--for", "6h"],
}
"""A command line of each command that builds a request."""
BUILDER = {"undrain": "edit_request"}
"""The request builder of a command word, where it is not its module's ``request``."""
NO_REQUEST = {
    "schema": "reads only its own flags, loads no desired state",
    "lab": "reads only its own flags, loads no desired state",
    "completion": "reads only its own flags",
    "history": "reads the git log through requests.repo_of, loads no desired state",
}
ACTING = ("apply", "drain", "run")
PARSER_PLUMBING = {
    ("__init__.py", "_handle"): "hands the parsed Namespace to the command's handler",
    ("common.py", "strict_parse_known_args"): "the parser's own parse, for exit 1 on errors",
}


def _words() -> set[str]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _builder(word: str) -> Callable[[argparse.Namespace], Any]:
    module = importlib.import_module(f"reconciler.cli.{MODULE_OF[word]}")
    builder: Callable[[argparse.Namespace], Any] = getattr(module, BUILDER.get(word, "request"))
    return builder


def _request(argv: list[str]) -> Any:
    return _builder(argv[0])(build_parser().parse_args(argv))


def _frozen(value: object, where: str) -> Iterator[object]:
    """Every value inside ``value``; fails on anything that could change after the parser."""
    yield value
    if value is None or isinstance(
        value, str | int | float | bool | Path | datetime | timedelta | enum.Enum
    ):
        return
    if isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from _frozen(item, f"{where}[{i}]")
        return
    kind = type(value).__name__
    assert dataclasses.is_dataclass(value), f"{where} is a {kind}, not a frozen request"
    params = getattr(value, "__dataclass_params__", None)
    assert params is not None, f"{where}: {kind} is not a dataclass instance"
    assert params.frozen, f"{where}: {kind} is not frozen"
    for field in dataclasses.fields(value):
        yield from _frozen(getattr(value, field.name), f"{where}.{field.name}")


def test_every_command_word_either_builds_a_request_or_says_why_not() -> None:
    words = _words()
    assert words == set(ARGV) | set(NO_REQUEST), "a new command needs a line in ARGV or NO_REQUEST"
    assert set(MODULE_OF) == words
    assert set(COMMANDS) <= words


@pytest.mark.parametrize("word", sorted(ARGV))
def test_each_request_is_frozen_all_the_way_down(word: str) -> None:
    request = _request(ARGV[word])
    inside = list(_frozen(request, word))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.__setattr__(dataclasses.fields(request)[0].name, None)
    acting = [v for v in inside if isinstance(v, ActRequest)]
    if word in ACTING:
        assert len(acting) == 1, f"{word} acts: its request holds one ActRequest"
        assert acting[0].command == word
    else:
        assert not acting, f"{word} does not act, yet its request holds an ActRequest"
    assert not any(isinstance(v, argparse.Namespace) for v in inside)


def test_acting_requests_carry_source_hold_observe_and_confirmation_from_their_flags() -> None:
    apply = _request(ARGV["apply"]).acting
    assert apply.source == FolderRequest(Path("some/folder"))
    assert apply.hold.kind is HoldKind.LOCK
    assert apply.observe.shared_paths == ("/srv/images",)
    assert apply.confirmation is Confirmation.YES
    drain = _request(ARGV["drain"]).evacuation
    assert drain.trigger == "maintenance"
    assert drain.hold.timeout == 30.0
    run = _request(ARGV["run"]).acting
    assert run.hold.identity == "standby-1"
    repo = ["apply", "cs", "--repo", "file:///r.git", "--branch", "prod", "--dry-run"]
    by_repo = _request(repo).acting
    assert by_repo.source == RepoRequest(
        "file:///r.git", "prod", "cs", actor=by_repo.source.actor, audit_branch=None
    )
    assert by_repo.hold.kind is HoldKind.GIT_LEASE
    assert by_repo.hold.url == "file:///r.git"
    assert by_repo.confirmation is Confirmation.DRY_RUN
    etcd = _request([*repo, "--coordination", "etcd3+http://e:2379"]).acting.hold
    assert (etcd.kind, etcd.url) == (HoldKind.ETCD, "etcd3+http://e:2379")

    secret = _request(["apply", "--repo", "https://bot:s3cret@forge/state.git", "--yes"])
    assert "s3cret" not in repr(secret), "a request's repr must not carry credentials"


# -- the source, read ------------------------------------------------------------------------


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _namespace_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
    return [
        p.arg
        for p in params
        if p.annotation is not None and "Namespace" in ast.unparse(p.annotation)
    ]


def _handlers(tree: ast.AST) -> set[str]:
    """The functions a module registers with ``set_defaults(handler=...)``."""
    return {
        k.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "set_defaults"
        for k in node.keywords
        if k.arg == "handler" and isinstance(k.value, ast.Name)
    }


def _is_builder(path: Path, name: str) -> bool:
    return path.name == "requests.py" or name == "request" or name.endswith("_request")


def test_only_handlers_request_builders_and_the_parser_take_a_namespace() -> None:
    wrong = []
    for path, tree in _modules():
        rel = path.relative_to(PACKAGE)
        handlers = _handlers(tree)
        for fn in _functions(tree):
            if not _namespace_params(fn):
                continue
            allowed = rel.parts[0] == "cli" and (
                fn.name in handlers
                or _is_builder(path, fn.name)
                or (path.name, fn.name) in PARSER_PLUMBING
            )
            if not allowed:
                wrong.append(f"{rel}:{fn.lineno} {fn.name}")
    assert not wrong, "these take a Namespace past the parser: " + ", ".join(wrong)


def _callee(call: ast.Call) -> str:
    return ast.unparse(call.func)


def test_a_handler_hands_its_namespace_only_to_a_request_builder() -> None:
    wrong = []
    for path, tree in _modules():
        handlers = _handlers(tree)
        for fn in _functions(tree):
            if fn.name not in handlers:
                continue
            (args,) = _namespace_params(fn)
            parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Name) and node.id == args):
                    continue
                parent = parents[node]
                if isinstance(parent, ast.Attribute):
                    continue  # reading one of its own flags
                callee = _callee(parent) if isinstance(parent, ast.Call) else ""
                name = callee.rsplit(".", 1)[-1]
                if callee.startswith("requests.") or _is_builder(path, name) or name == "repo_of":
                    continue
                wrong.append(f"{path.name}:{node.lineno} {fn.name} -> {callee or 'not a call'}")
    assert not wrong, "a Namespace handed on past the parser: " + ", ".join(wrong)


def test_a_handler_with_a_request_builder_parses_its_namespace_once() -> None:
    """``args`` appears once in such a handler: as the builder's argument (no flag read
    beside the request, no second parse)."""
    for word in ARGV:
        module = f"{MODULE_OF[word]}.py"
        tree = ast.parse((PACKAGE / "cli" / module).read_text(encoding="utf-8"))
        for fn in _functions(tree):
            if fn.name not in _handlers(tree):
                continue
            (args,) = _namespace_params(fn)
            uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == args]
            assert len(uses) == 1, f"{module} {fn.name} reads its Namespace {len(uses)} times"


def test_no_namespace_is_rebuilt_or_read_through_getattr() -> None:
    wrong = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = _callee(node)
            if callee.endswith("Namespace"):
                wrong.append(f"{path.name}:{node.lineno} builds a Namespace")
            if callee == "getattr" and node.args and ast.unparse(node.args[0]) == "args":
                wrong.append(f"{path.name}:{node.lineno} reads a flag through getattr")
    assert not wrong, ", ".join(wrong)


def test_no_command_calls_into_another_commands_handler_or_builder() -> None:
    """``drain`` neither runs ``apply`` nor ``plan``: they share ``applying`` and
    ``planning``, which take requests."""
    commands = set(MODULE_OF.values())
    takes_namespace: dict[str, set[str]] = {}
    for name in commands:
        tree = ast.parse((PACKAGE / "cli" / f"{name}.py").read_text(encoding="utf-8"))
        takes_namespace[name] = {fn.name for fn in _functions(tree) if _namespace_params(fn)}
    wrong = []
    for path, tree in _modules():
        own = path.stem
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "reconciler.cli":
                    imported = {a.name for a in node.names} & commands
                    if imported - {own}:
                        wrong.append(f"{path.name}:{node.lineno} imports {sorted(imported)}")
                    continue
                other = node.module.removeprefix("reconciler.cli.")
                if other in commands and other != own:
                    reached = {a.name for a in node.names} & takes_namespace[other]
                    if reached:
                        wrong.append(f"{path.name}:{node.lineno} imports {sorted(reached)}")
    # the package's __init__ imports command modules by name to register them: not a call
    wrong = [w for w in wrong if not w.startswith("__init__.py")]
    assert not wrong, "a command reaching into another: " + ", ".join(wrong)
