"""A command's whole process tree, ended: what ``run_command`` runs every command under.

Run as a script (``python -I -S tree.py STATUS_FD ARGV...``), this is the **keeper** of one
command: a small process between the reconciler and the command that

- makes itself the *child subreaper* of what it starts (``prctl(PR_SET_CHILD_SUBREAPER)``,
  Linux 3.4 and later): a process of the command's tree whose parent ends is given to the
  keeper, not to init. A process that leaves the command's session (``setsid``) or
  double-forks stays in the tree, so every descendant of the command can be found from the
  keeper's pid in ``/proc`` for as long as the keeper lives;
- starts the command (``posix_spawnp``, its signals back to their defaults) and reports on
  ``STATUS_FD`` the ``errno`` of a command that cannot start, or closes it once it started;
- waits for the command's exit, then ends whatever of the tree is left (``end_tree``), reaps
  it, and exits as the command did (the same status, or killed by the same signal);
- on SIGTERM (which it is also sent when the reconciler that started it ends:
  ``PR_SET_PDEATHSIG``) ends the tree the same way and exits.

The reconciler itself is never a subreaper and reaps only the keeper, its own child: the
exit statuses of its other children (git, ssh, whatever a library starts) are never taken.
At a timeout it ends the keeper's tree itself (``end_tree``) and lets the keeper reap it.

``end_tree`` stops (SIGSTOP) every descendant it finds and looks again until nothing new
turns up, so a process cannot fork away while it is being ended, then kills them all
(SIGKILL). Each is signalled through a pidfd opened on it and checked against the start time
it was found with, so a pid reused meanwhile is never signalled.

Where it does not hold: without ``/proc``, or where ``prctl`` is refused (not Linux), only
the command's process group is ended; a process that changed its user (sudo, a setuid
program) cannot be signalled by the reconciler's user and survives; a process stuck in the
kernel (state D) ends when the kernel lets it; a process another daemon starts on the
command's behalf (systemd-run, at, ssh to another host) is not part of the tree.

Standard library only, and importable without the rest of the package, because it runs in
an interpreter started with ``-I -S`` (no site-packages, nothing of the environment).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Final, NoReturn

PR_SET_PDEATHSIG: Final = 1
PR_SET_DUMPABLE: Final = 4
PR_SET_CHILD_SUBREAPER: Final = 36
ROUNDS: Final = 100
"""Looks for new descendants while stopping them; a tree that still grows after this many is
killed as it stands and looked at again."""
REAP: Final = 2.0
"""Seconds the keeper waits for what it killed to be gone before exiting without it."""
_DEFAULT_SIGNALS: Final = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT)
"""Signals this interpreter ignores or handles, back to their defaults for the command."""


def _prctl(option: int, value: int) -> bool:
    import ctypes  # only in the keeper: the reconciler never calls prctl

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _table() -> dict[int, tuple[int, int]]:
    """Every live process: its pid, its parent's and its start time (clock ticks since boot)."""
    table: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() and (fields := _stat(int(name))) is not None:
                table[int(name)] = fields
    return table


def _stat(pid: int) -> tuple[int, int] | None:
    """The parent and the start time of a live process; None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # the name may hold spaces and ")"
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):  # gone as it was read, or a zombie
        return None
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """The live descendants of ``root`` (not ``root``) and their start times."""
    children: dict[int, list[int]] = {}
    table = _table()
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, int] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found and pid != root:
            found[pid] = table[pid][1]
            todo.extend(children.get(pid, ()))
    return found


def _signal(pid: int, started: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` if it is still the process that started at ``started``."""
    pidfd: int | None = None
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(pid)
    try:
        now = _stat(pid)
        if now is None or now[1] != started:
            return
        if pidfd is not None:  # the pidfd is the process checked: no pid reused between
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except OSError:  # gone, or not ours to signal
        pass
    finally:
        if pidfd is not None:
            os.close(pidfd)


def end_tree(root: int) -> int:
    """Stop every descendant of ``root`` until no new one turns up, then kill them all;
    how many there were. ``root`` itself is left alone."""
    seen: dict[int, int] = {}
    for _ in range(ROUNDS):
        new = {pid: t for pid, t in descendants(root).items() if seen.get(pid) != t}
        if not new:
            break
        for pid, started in new.items():
            _signal(pid, started, signal.SIGSTOP)
            seen[pid] = started
    for pid, started in seen.items():
        _signal(pid, started, signal.SIGKILL)
    return len(seen)


class _Stop(Exception):
    """SIGTERM: the reconciler ended, or wants the command ended."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def _reap(until: float) -> None:
    """Reap every child of the keeper (all of them are the command's tree) until none is
    left or ``until`` passes."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= until:
                return
            end_tree(os.getpid())  # none new, unless one was not ours to stop
            time.sleep(0.005)


def _exit_as(status: int) -> NoReturn:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        _prctl(PR_SET_DUMPABLE, 0)  # no core of the keeper
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def keep(status_fd: int, argv: list[str]) -> NoReturn:
    """Be the keeper of ``argv`` (see the module's text)."""
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _stop)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    os.set_inheritable(status_fd, False)
    status = 0
    try:
        if os.getppid() != parent:  # the reconciler ended before the keeper asked
            raise _Stop
        try:
            child = os.posix_spawnp(
                argv[0], argv, os.environ, setsigdef=_DEFAULT_SIGNALS, setsigmask=()
            )
        except OSError as err:
            os.write(status_fd, b"%d" % (err.errno or 0))
            os._exit(127)
        os.close(status_fd)
        null = os.open(os.devnull, os.O_RDWR)  # the pipes are the command's alone
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _, status = os.waitpid(child, 0)
    except _Stop:
        status = signal.SIGTERM  # a wait status: killed by SIGTERM
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    end_tree(os.getpid())
    _reap(time.monotonic() + REAP)
    _exit_as(status)


if __name__ == "__main__":
    keep(int(sys.argv[1]), sys.argv[2:])
