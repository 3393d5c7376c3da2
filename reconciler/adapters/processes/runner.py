"""The one way the reconciler runs an external program: fence agents and hooks through
``run_command``, git through ``run_process`` (``reconciler.adapters.git.runner``).

``run_process`` is the process handling both share:

- **The timeout bounds the whole call.** The program runs in a session of its own. When the
  time is up its process group is killed (SIGKILL) and the call returns at once: the output
  pipes are not read past the deadline and nothing waits for a process that left the group
  (``setsid``) and still holds a pipe. When the program exits in time, what it wrote is read
  and the call returns without waiting for the end of its pipes, which a process it left
  behind may hold (an ssh ``ControlPersist`` master, a daemonized helper); what is left of
  its process group is killed.
- **The whole tree, on demand** (``whole_tree``, what ``run_command`` asks for): the program
  runs under a keeper (``tree``) that makes every process it starts, ``setsid`` and
  double-forked ones included, findable and ends them all, at the timeout and when the
  program exits, before the call returns.
- **Bounded output.** At most ``max_output`` bytes of each stream are kept (the first and the
  last half), the rest is counted and dropped, so a program that writes without end neither
  blocks nor fills memory. ``None`` keeps all of stdout (git's data); stderr stays bounded.
  ``ProcessResult.parts`` gives the two kept halves apart.

``run_command`` adds what a command from the user's configuration needs. It never raises for
the command's own failure (the result says what happened); stdout and stderr are read as one
stream. **No secret on argv or in the output:** argv is visible to every user (``ps``), so a
command whose argv holds a known secret (``reconciler.redact``: the reconciler's secret
environment variables, what was registered, ``secrets`` given here) or a URL's password is not
run. Secrets reach a command through its environment (``env``) or stdin (``input``); the
output is scrubbed of them. The reconciler's own secrets (``redact.SECRET_ENV``) are not
passed on. Output whose middle was dropped is scrubbed half by half (``redact.scrub_parts``):
a secret that a cut goes through shows nothing of itself on either side (what may be part of
one at a cut is masked, and a character of several bytes cut in two is left out). Nothing
the command started outlives the call (``whole_tree``).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from reconciler.adapters.processes import tree
from reconciler.redact import SECRET_ENV, holds_secret, register, scrub, scrub_parts

log = logging.getLogger(__name__)

MAX_OUTPUT: Final = 64 * 1024
"""Bytes of a command's output kept by default."""
_CHUNK: Final = 64 * 1024
_DRAIN_READS: Final = 64
"""Reads of what is already in a pipe once the program has exited: four times the largest
pipe an unprivileged program can ask for (1 MiB); a process it left behind that keeps
writing must not hold the call."""
_POLL: Final = 0.05
"""Seconds between checks for the command's exit where pidfd_open is not available."""
_URL_PASSWORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")
_REAP: Final = 2.0
"""Seconds to wait for a killed command to be reaped before leaving it to the interpreter."""
_KEEPER: Final = tree.__file__


@dataclass(frozen=True)
class CommandResult:
    """What became of one command."""

    argv: tuple[str, ...]
    returncode: int | None
    """Its exit status (negative: the signal that ended it); None when it did not start or
    was killed at the timeout."""
    output: str
    """stdout and stderr as one text, scrubbed, at most ``max_output`` bytes of it."""
    seconds: float
    timed_out: bool = False
    dropped: int = 0
    """Bytes of output left out (the middle of it)."""
    error: str | None = None
    """Why it did not start."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def name(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else "?"

    def describe(self, timeout: float) -> str:
        """What happened, on one line, for a message: ``exit 3``, ``killed by signal 9``,
        ``ran longer than 2 s and was killed``, ``cannot run ...``."""
        if self.error is not None:
            return self.error
        if self.timed_out:
            return f"{self.name} ran longer than {timeout:g} s and was killed"
        code = self.returncode
        if code is not None and code < 0:
            return f"killed by signal {-code}"
        return f"exit {code}"


@dataclass(frozen=True)
class ProcessResult:
    """What a program did: its exit, its output, and whether it was killed at the timeout."""

    returncode: int | None
    """Its exit status (negative: the signal that ended it); None when killed at the timeout."""
    stdout: bytes
    """stdout (with stderr when merged), at most ``max_output`` bytes of it."""
    stderr: bytes
    seconds: float
    timed_out: bool = False
    dropped: int = 0
    """Bytes of stdout left out (the middle of it)."""
    parts: tuple[bytes, bytes] | None = None
    """The beginning and the end kept of stdout when its middle was left out."""


class _Output:
    """The first and last ``limit // 2`` bytes of a stream (all of it when ``limit`` is
    None), and how many were dropped."""

    def __init__(self, limit: int | None) -> None:
        self.head_limit = limit - limit // 2 if limit is not None else None
        self.tail_limit = limit // 2 if limit is not None else 0
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        if self.head_limit is None:
            self.head += chunk
            return
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        over = len(self.tail) - self.tail_limit
        if over > 0:
            del self.tail[:over]
            self.dropped += over

    def data(self) -> bytes:
        if self.dropped:
            return bytes(self.head) + _left_out(self.dropped).encode() + self.tail
        return bytes(self.head + self.tail)

    def parts(self) -> tuple[bytes, bytes] | None:
        return (bytes(self.head), bytes(self.tail)) if self.dropped else None


def _left_out(dropped: int) -> str:
    return f"\n[... {dropped} bytes left out ...]\n"


def _text(done: ProcessResult, secrets: Sequence[str]) -> str:
    """stdout as text, scrubbed; when its middle was left out, each half apart, so that a
    secret the cut goes through shows nothing of itself (a character cut in two is left out
    of either half)."""
    if done.parts is None:
        return scrub(done.stdout.decode("utf-8", "replace"), secrets)
    head, tail = done.parts
    first = codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=False)
    skip = 0
    while skip < min(3, len(tail)) and 0x80 <= tail[skip] < 0xC0:  # continuation bytes
        skip += 1
    first, last = scrub_parts(first, tail[skip:].decode("utf-8", "replace"), secrets)
    return first + _left_out(done.dropped) + last


def _environment(
    extra: Mapping[str, str] | None, inherit: Sequence[str] | None = None
) -> dict[str, str]:
    """The reconciler's environment without its own secrets (only the ``inherit`` variables
    of it when given), and ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in SECRET_ENV and (inherit is None or k in inherit)
    }
    env.update(extra or {})
    return env


def _secret_on_argv(argv: Sequence[str], secrets: Sequence[str]) -> int | None:
    """The index of the first argument that holds a secret (a known one, or the password of
    a URL), or None."""
    for i, arg in enumerate(argv):
        if holds_secret(arg) or _URL_PASSWORD.search(arg) or any(s and s in arg for s in secrets):
            return i
    return None


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    cwd: Path | None = None,
    max_output: int = MAX_OUTPUT,
    secrets: Sequence[str] = (),
    inherit: Sequence[str] | None = None,
) -> CommandResult:
    """Run ``argv`` for at most ``timeout`` seconds, output included; never raises for what
    the command does. ``env`` is added to the reconciler's environment (without its own
    secrets; only its ``inherit`` variables when given); ``input`` is written to its stdin
    (else stdin is empty); ``secrets`` are values (e.g. a password in ``env``) that must appear
    neither on argv nor in the output."""
    args = tuple(argv)
    started = time.monotonic()
    if not args:
        return CommandResult(args, None, "", 0.0, error="no command given")
    register(*secrets)
    where = _secret_on_argv(args, secrets)
    if where is not None:
        shown = tuple(scrub(a, secrets) for a in args)
        return CommandResult(
            shown,
            None,
            "",
            0.0,
            error=f"not run: argument {where} of {os.path.basename(args[0])} holds a secret "
            "(the command line is visible to every user); pass it in the environment or on stdin",
        )
    log.debug("running %s (timeout %g s)", " ".join(args), timeout)
    try:
        done = run_process(
            args, timeout=timeout, env=_environment(env, inherit), input=input, cwd=cwd,
            max_output=max_output, whole_tree=True,
        )  # fmt: skip
    except OSError as err:
        return CommandResult(
            args,
            None,
            "",
            time.monotonic() - started,
            error=f"cannot run {args[0]}: {err.strerror or err}",
        )
    return CommandResult(
        args,
        done.returncode,
        _text(done, secrets),
        done.seconds,
        timed_out=done.timed_out,
        dropped=done.dropped,
    )


def run_process(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str],
    input: bytes | None = None,
    cwd: Path | None = None,
    max_output: int | None = MAX_OUTPUT,
    merge_stderr: bool = True,
    whole_tree: bool = False,
) -> ProcessResult:
    """Run ``argv`` with exactly ``env`` for at most ``timeout`` seconds, its output pipes
    included; OSError when it cannot start. ``input`` is written to its stdin (else stdin is
    empty); stderr is read with stdout unless ``merge_stderr`` is off. ``whole_tree``: every
    process it starts is ended with it (through the keeper, ``tree``)."""
    started = time.monotonic()
    command, status = list(argv), None
    if whole_tree:  # the keeper reports on ``status`` whether the command started
        status = os.pipe()
        command = [sys.executable, "-I", "-S", _KEEPER, str(status[1]), *command]
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,  # one group to kill; no terminal to prompt on
            pass_fds=status[1:] if status is not None else (),
        )
    finally:
        if status is not None:
            os.close(status[1])
    out, err = _Output(max_output), _Output(max_output or MAX_OUTPUT)
    with _Watch(proc, whole_tree=whole_tree) as watch:
        if status is not None and (failed := _not_started(status[0], started + timeout)):
            watch.end(exited=False)
            raise OSError(failed, os.strerror(failed))
        exited = watch.run(started + timeout, out, err, input)
    return ProcessResult(
        proc.returncode if exited else None,
        out.data(),
        err.data(),
        time.monotonic() - started,
        timed_out=not exited,
        dropped=out.dropped,
        parts=out.parts(),
    )


def _not_started(fd: int, deadline: float) -> int | None:
    """The errno the keeper reports on ``fd`` for a command that could not start; None once
    it started (the keeper closes ``fd``) or at ``deadline``."""
    said = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while (remaining := deadline - time.monotonic()) > 0 and selector.select(remaining):
                chunk = os.read(fd, 64)
                if not chunk:
                    break
                said += chunk
    finally:
        os.close(fd)
    return int(said) if said.strip().isdigit() and int(said) else None


class _Watch:
    """Reads one started command's output and feeds its stdin until it exits or the deadline
    passes, then makes sure nothing of its process group (with ``whole_tree``: of its whole
    tree) is left and it is reaped."""

    def __init__(self, proc: subprocess.Popen[bytes], *, whole_tree: bool = False) -> None:
        self.proc = proc
        self.whole_tree = whole_tree
        self.selector = selectors.DefaultSelector()
        self.pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):  # Linux 5.3 and later
            self.pidfd = os.pidfd_open(proc.pid)

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *_: object) -> None:
        self.selector.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self.pidfd is not None:
            os.close(self.pidfd)

    def run(self, deadline: float, out: _Output, err: _Output, feed: bytes | None) -> bool:
        """True when the program exited before ``deadline``; False when it was killed."""
        proc = self.proc
        streams = {
            pipe.fileno(): into
            for pipe, into in ((proc.stdout, out), (proc.stderr, err))
            if pipe is not None
        }
        for fd in streams:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, "out")
        pending = memoryview(feed or b"")
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            if pending:
                self.selector.register(proc.stdin, selectors.EVENT_WRITE, "in")
            else:
                proc.stdin.close()
        if self.pidfd is not None:
            self.selector.register(self.pidfd, selectors.EVENT_READ, "exit")
        exited = False
        while not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.end(exited=False)
                return False
            wait = remaining if self.pidfd is not None else min(remaining, _POLL)
            for key, _ in self.selector.select(wait):
                if key.data == "out" and not self._read(key.fd, streams[key.fd]):
                    self.selector.unregister(key.fd)
                elif key.data == "in":
                    pending = self._write(pending)
                elif key.data == "exit":
                    exited = True
            if self.pidfd is None:
                exited = self._exited()
        # exited: what it wrote is in the pipes (at most a pipe's capacity, read without
        # waiting); a process it left behind may hold them open for ever and keep writing,
        # so read only that much
        for fd, into in streams.items():
            for _ in range(_DRAIN_READS):
                if not self._read(fd, into):
                    break
        self.end(exited=True)  # whatever it left in its group
        return True

    def _read(self, fd: int, output: _Output) -> bool:
        """One read into ``output``; False at the end of the pipe or when nothing is there."""
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            return False
        if not chunk:
            return False
        output.add(chunk)
        return True

    def _write(self, pending: memoryview) -> memoryview:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            pending = pending[os.write(stdin.fileno(), pending) :]
        except BlockingIOError:
            return pending
        except OSError as err:  # it closed its stdin (EPIPE): it has read what it wants
            if err.errno != errno.EPIPE:
                log.debug("writing to %s: %s", self.proc.args, err)
            pending = memoryview(b"")
        if not pending:
            self.selector.unregister(stdin)
            with contextlib.suppress(OSError):
                stdin.close()
        return pending

    def _exited(self) -> bool:
        """Whether the command has exited, leaving it unreaped (its pid, which is its group's
        id, stays taken until it is reaped, so the group can still be killed safely)."""
        try:
            return (
                os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            )
        except ChildProcessError:
            return True

    def end(self, *, exited: bool) -> None:
        """End what is left and reap the command. With ``whole_tree`` and a keeper still
        running: every process of its tree is ended (the keeper's pid stays its own until it
        is reaped here), and the keeper, seeing the command end, reaps them and exits."""
        if self.whole_tree and not exited:
            tree.end_tree(self.proc.pid)
            until = time.monotonic() + _REAP
            while not self._exited() and time.monotonic() < until:
                time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=_REAP)
        except subprocess.TimeoutExpired:  # stuck in the kernel; the interpreter reaps it later
            log.warning("%s did not end after SIGKILL; not waiting for it", self.proc.args)
