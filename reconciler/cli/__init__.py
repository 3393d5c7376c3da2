"""The composition root: parses arguments, builds adapters, calls engine or core, prints.

The only package that prints or picks exit codes; one module per command. Each command's
handler parses its ``argparse.Namespace`` once into a frozen request (``requests.py`` has the
parts) and passes only that on. Exit codes: 0 success, 1 error (bad input, failed validation,
unreachable world), 2 usage error. Commands that answer a question with their exit code use 2
for an answer and exit 1 on usage errors: ``plan`` follows ``terraform plan
-detailed-exitcode`` (0 no changes, 2 changes, 1 error), ``place`` exits 0 when a host fits, 2
when none does, ``drain`` 2 when moves are planned, ``propose`` 2 when a proposal is open,
``impact`` 2 on a difference. ``apply`` exits 3 when some moves failed or were skipped, 130/143
when interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

from reconciler import __version__
from reconciler.errors import ReconcilerError

if TYPE_CHECKING:
    from reconciler.cli import common

ONE_SHOT = frozenset({"validate", "plan", "place", "observe", "schema"})
"""Commands that end in seconds: they run without the cyclic garbage collector."""

COMMANDS = (
    "validate",
    "schema",
    "lab",
    "observe",
    "plan",
    "place",
    "apply",
    "drain",
    "rollout",
    "run",
    "propose",
    "history",
    "impact",
    "simulate",
    "completion",
)
"""One module of ``reconciler.cli`` per command, in the order ``--help`` lists them."""

MODULE_OF = {name: name for name in COMMANDS} | {"undrain": "drain"}
"""The module that registers each command word."""


def _command(name: str) -> ModuleType:
    return importlib.import_module(f"reconciler.cli.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``only`` that one: a run imports just its command's
    module (importing them all took a tenth of a second, a big part of ``plan``'s run)."""
    parser = argparse.ArgumentParser(
        prog="reconciler",
        description="Declarative GitOps reconciler for VM placement on libvirt/KVM clusters.",
    )
    parser.add_argument("--version", action="version", version=f"reconciler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        _command(name).register(sub)
    return parser


def _quiet_broken_pipe() -> int:
    """``reconciler plan | head -1``: the reader left; end without a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, as a shell reports it


def main(argv: Sequence[str] | None = None) -> int:
    collecting = gc.isenabled()
    # Importing the command's modules makes a few hundred classes and leaves no cycle to
    # collect; the cyclic collector would only rescan what they allocate. Commands that end
    # in seconds run without it too: building a large cluster's model allocates millions of
    # objects, freed by reference counting (the collector took a third of plan's time at
    # 1,000 hosts). Long runs (apply, run) get it back once their modules are imported.
    gc.disable()
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        # anything else (no command, --help, --version, a typo) gets every command's parser
        parser = build_parser(MODULE_OF.get(words[0]) if words else None)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
            return int(exc.code or 0)
        handler: common.Handler = args.handler
        if collecting and args.command not in ONE_SHOT:
            gc.enable()
        return _handle(handler, args)
    finally:
        if collecting:
            gc.enable()


def main_then_exit() -> NoReturn:
    """The ``reconciler`` command (the console script, ``python -m reconciler``): ``main()``,
    then the process ends as soon as what it wrote is out.

    Tearing the interpreter down (every module, model and validator freed one by one) took
    0.3-0.5 s after an ``apply`` had finished, longer than its look at the hosts. When nothing
    but daemon threads is left, the exit handlers run (logging's flush among them), the
    standard streams are flushed, and the process exits with ``os._exit``; otherwise it
    exits as usual. ``main()`` itself, which tests call in their own process, returns.

    Pydantic's plugins (third-party packages that hook every validation) stay off unless
    ``PYDANTIC_DISABLE_PLUGINS`` is set: looking for them reads the metadata of every installed
    distribution, a cost paid on every run for hooks a reconciler never asked for. Setting the
    variable to an empty value loads them all again, to a list of names all but those.
    """
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    code = main()
    if all(t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _handle(handler: common.Handler, args: argparse.Namespace) -> int:
    from reconciler.cli import common

    try:
        code = handler(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except ReconcilerError as err:
        common.print_error(err)
        return common.EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return common.EXIT_SIGINT
