"""``reconciler completion bash|zsh|fish``: a shell completion script, generated from the parser.

shtab writes the script from the same argparse parser every command is run with, so
completion knows each command, flag and choice of this version and never runs Python while
you type. Arguments that take a file complete file names; those that take a folder, folders.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import shtab

from reconciler.cli.common import EXIT_OK, Subparsers

SHELLS = ("bash", "zsh", "fish")

INSTALL = {
    "bash": "reconciler completion bash > ~/.local/share/bash-completion/completions/reconciler",
    "zsh": "reconciler completion zsh > ~/.zfunc/_reconciler  # with fpath+=(~/.zfunc)",
    "fish": "reconciler completion fish > ~/.config/fish/completions/reconciler.fish",
}


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print the completion script of SHELL for every command and flag.",
        epilog="Install:\n  " + "\n  ".join(INSTALL.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    p.set_defaults(handler=_run_completion)


def script(shell: str) -> str:
    """The completion script of ``shell`` for the parser of every command."""
    from reconciler.cli import build_parser  # the package imports this module by name

    parser = build_parser()
    _complete_paths(parser)
    text: str = shtab.complete(parser, shell=shell)
    return text if text.endswith("\n") else text + "\n"


def _complete_paths(parser: argparse.ArgumentParser) -> None:
    """Path arguments complete file names (metavar FILE) or folder names (the rest)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _complete_paths(child)
        elif action.type is Path:
            action.complete = shtab.FILE if action.metavar == "FILE" else shtab.DIRECTORY  # type: ignore[attr-defined]


def _run_completion(args: argparse.Namespace) -> int:
    print(script(args.shell), end="")
    return EXIT_OK
