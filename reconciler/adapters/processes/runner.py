"""The one way the reconciler runs an external command (a fence agent, a hook).

``run_command`` runs an argv list without a shell and returns what happened; it never raises
for the command's own failure. What it guarantees:

- **The timeout bounds the whole call.** The command runs in a session of its own. When the
  time is up its process group is killed (SIGKILL) and the call returns at once: the output
  pipe is not read past the deadline and nothing waits for a process that left the group
  (``setsid``) and still holds the pipe. When the command exits in time, what it wrote is
  read and the call returns without waiting for the end of the pipe, which a process it
  left behind may hold; what is left of its process group is killed.
- **Bounded output.** stdout and stderr are read together, as one stream; at most
  ``max_output`` bytes are kept (the first and the last half), the rest is counted and
  dropped, so a command that writes without end neither blocks nor fills memory.
- **No secret on argv or in the output.** The argv is visible to every user (``ps``), so a
  command whose argv holds a known secret (``reconciler.redact``: the reconciler's secret
  environment variables, what was registered, ``secrets`` given here) is not run. Secrets
  reach a command through its environment (``env``) or stdin (``input``); the output is
  scrubbed of them. The reconciler's own secrets (``redact.SECRET_ENV``) are not passed on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from reconciler.redact import MASK, SECRET_ENV, holds_secret, register, scrub

log = logging.getLogger(__name__)

MAX_OUTPUT: Final = 64 * 1024
"""Bytes of a command's output kept by default."""
_CHUNK: Final = 64 * 1024
_DRAIN_READS: Final = 64
"""Reads of what is already in the pipe once the command has exited: a process it left
behind that keeps writing must not hold the call."""
_POLL: Final = 0.05
"""Seconds between checks for the command's exit where pidfd_open is not available."""
_URL_PASSWORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")
_REAP: Final = 2.0
"""Seconds to wait for a killed command to be reaped before leaving it to the interpreter."""


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


class _Output:
    """The first and last ``limit // 2`` bytes of a stream, and how many were dropped."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
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

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes left out ...]\n{tail}"
        return head + tail


def _environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env.update(extra or {})
    return env


def _secret_on_argv(argv: Sequence[str], secrets: Sequence[str]) -> int | None:
    """The index of the first argument that holds a secret (a known one, or the password of
    a URL), or None."""
    for i, arg in enumerate(argv):
        if holds_secret(arg) or _URL_PASSWORD.search(arg) or any(s and s in arg for s in secrets):
            return i
    return None


def _scrubbed(text: str, secrets: Sequence[str]) -> str:
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return scrub(text)


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    cwd: Path | None = None,
    max_output: int = MAX_OUTPUT,
    secrets: Sequence[str] = (),
) -> CommandResult:
    """Run ``argv`` for at most ``timeout`` seconds, output included; never raises for what
    the command does. ``env`` is added to the reconciler's environment (without its own
    secrets); ``input`` is written to its stdin (else stdin is empty); ``secrets`` are values
    (e.g. a password in ``env``) that must appear neither on argv nor in the output."""
    args = tuple(argv)
    started = time.monotonic()
    if not args:
        return CommandResult(args, None, "", 0.0, error="no command given")
    register(*secrets)
    where = _secret_on_argv(args, secrets)
    if where is not None:
        shown = tuple(_scrubbed(a, secrets) for a in args)
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
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_environment(env),
            cwd=cwd,
            start_new_session=True,  # one group to kill; no terminal to prompt on
        )
    except OSError as err:
        return CommandResult(
            args,
            None,
            "",
            time.monotonic() - started,
            error=f"cannot run {args[0]}: {err.strerror or err}",
        )
    output = _Output(max_output)
    with _Watch(proc) as watch:
        timed_out = not watch.run(started + timeout, output, input)
    seconds = time.monotonic() - started
    return CommandResult(
        args,
        None if timed_out else proc.returncode,
        _scrubbed(output.text(), secrets),
        seconds,
        timed_out=timed_out,
        dropped=output.dropped,
    )


class _Watch:
    """Reads one started command's output and feeds its stdin until it exits or the deadline
    passes, then makes sure nothing of its process group is left and it is reaped."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.selector = selectors.DefaultSelector()
        self.pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):  # Linux 5.3 and later
            self.pidfd = os.pidfd_open(proc.pid)

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *_: object) -> None:
        self.selector.close()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self.pidfd is not None:
            os.close(self.pidfd)

    def run(self, deadline: float, output: _Output, feed: bytes | None) -> bool:
        """True when the command exited before ``deadline``; False when it was killed."""
        proc = self.proc
        assert proc.stdout is not None
        out = proc.stdout.fileno()
        os.set_blocking(out, False)
        self.selector.register(out, selectors.EVENT_READ, "out")
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
                self._kill()
                return False
            wait = remaining if self.pidfd is not None else min(remaining, _POLL)
            for key, _ in self.selector.select(wait):
                if key.data == "out" and not self._read(out, output):
                    self.selector.unregister(out)
                elif key.data == "in":
                    pending = self._write(pending)
                elif key.data == "exit":
                    exited = True
            if self.pidfd is None:
                exited = self._exited()
        # exited: what it wrote is in the pipe; a process it left behind may hold the pipe
        # open for ever, so read only what is there already
        for _ in range(_DRAIN_READS):
            if time.monotonic() >= deadline or not self._read(out, output):
                break
        self._kill()  # whatever it left in its group
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

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=_REAP)
        except subprocess.TimeoutExpired:  # stuck in the kernel; the interpreter reaps it later
            log.warning("%s did not end after SIGKILL; not waiting for it", self.proc.args)
