"""One flag vocabulary: a flag shared by several commands has one spelling, one default and
one help text everywhere, and every command that reads desired state takes --repo."""

from __future__ import annotations

import argparse

import pytest

from reconciler.cli import build_parser

PER_COMMAND = {
    "--format": "each command has its own output formats",
    "--now": "the help names what the time decides for that command",
    "--since": "history filters commits by age; impact replays recorded snapshots",
}
"""Flags whose choices or help legitimately differ, with why."""
READS_DESIRED_STATE = (
    "validate", "observe", "plan", "place", "apply", "drain", "undrain", "run", "propose",
    "history",
)  # fmt: skip


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_a_shared_flag_has_one_default_one_help_and_one_set_of_choices() -> None:
    uses: dict[str, dict[str, tuple[str, str, tuple[object, ...]]]] = {}
    for name, sub in _subparsers().items():
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option not in PER_COMMAND:
                    choices = tuple(action.choices) if action.choices else ()
                    uses.setdefault(option, {})[name] = (
                        repr(action.default),
                        action.help or "",
                        choices,
                    )
    shared = {option: by for option, by in uses.items() if len(by) > 1}
    assert {"--repo", "--branch", "--cache-dir", "--forge", "--state-dir"} <= set(shared)
    differing = {option: by for option, by in shared.items() if len(set(by.values())) > 1}
    assert not differing, differing


def test_every_command_that_reads_desired_state_takes_repo_branch_and_cache_dir() -> None:
    subs = _subparsers()
    for name in READS_DESIRED_STATE:
        options = {o for a in subs[name]._actions for o in a.option_strings}
        assert {"--repo", "--branch", "--cache-dir"} <= options, name


def test_the_forge_defaults_to_none_without_a_token_and_github_with_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reconciler.cli.common import forge_of

    mp = monkeypatch
    mp.delenv("RECONCILER_FORGE", raising=False)
    mp.delenv("RECONCILER_FORGE_TOKEN", raising=False)
    assert forge_of(None) == "none"
    mp.setenv("RECONCILER_FORGE_TOKEN", "t")
    assert forge_of(None) == "github"
    mp.setenv("RECONCILER_FORGE", "gitea")
    assert forge_of(None) == "gitea"
    assert forge_of("gitlab") == "gitlab"
