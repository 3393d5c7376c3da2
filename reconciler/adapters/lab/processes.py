"""The lab's processes, found through its pid files and checked by command line before a signal."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _proc_state(pid: int, task: int | None = None) -> str | None:
    """The one-letter state of ``pid`` (or of its thread ``task``) from ``/proc``, or None."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    try:
        stat = Path(path).read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def alive(pid: int | None) -> bool:
    """True when ``pid`` runs and is not a zombie."""
    if pid is None or pid <= 0:
        return False
    state = _proc_state(pid)
    return state is not None and state != "Z"


def stopped(pid: int) -> bool:
    """True when every thread of ``pid`` is stopped by a signal (SIGSTOP), as a frozen daemon is.

    A signal stops a process's threads one by one: until the last one stops, a thread may
    still answer a request, so the process's own state alone does not prove it is frozen.
    """
    if _proc_state(pid) != "T":
        return False
    try:
        tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except (OSError, ValueError):
        return False
    # a thread that has exited (Z, X) or gone meanwhile (None) answers nothing either
    return all(_proc_state(pid, task) in ("T", "Z", "X", None) for task in tasks)


def freeze(pid: int, timeout: float = 5.0) -> bool:
    """SIGSTOP ``pid`` and wait until all its threads have stopped; False past ``timeout``."""
    send(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not stopped(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def ours(pid: int | None, marker: str) -> bool:
    """``pid`` is alive and its command line contains ``marker`` (guards against pid reuse)."""
    return pid is not None and alive(pid) and marker in _cmdline(pid)


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def send(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def terminate(pid: int, marker: str, timeout: float = 5.0) -> None:
    """SIGTERM ``pid`` if it is ours, SIGKILL it when it outlives ``timeout``.

    A stopped process gets SIGCONT first: it would not act on SIGTERM while frozen.
    """
    if not ours(pid, marker):
        return
    send(pid, signal.SIGTERM)
    send(pid, signal.SIGCONT)
    if not wait_gone(pid, timeout):
        send(pid, signal.SIGKILL)
        wait_gone(pid, 2.0)


def tail(path: Path, lines: int = 8) -> str:
    """The last ``lines`` of the log at ``path``, indented on lines of their own ("" if none)."""
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n  " + "\n  ".join(text) if text else ""


_WRITE_PID_AND_EXEC = 'echo $$ > "$0" && exec "$@"'


def spawn(setsid: str, argv: list[str], *, pidfile: Path, log: Path, timeout: float = 5.0) -> int:
    """Start ``argv`` detached from this process (``setsid -f``), its output to ``log``; its pid.

    A shell writes its own pid to ``pidfile`` and then becomes ``argv`` (exec keeps the pid),
    so the pid file names the program itself. The program is not this process's child: it
    outlives the command that started it, and nothing here has to wait for it.
    """
    pidfile.unlink(missing_ok=True)
    with open(log, "ab") as out:
        subprocess.run(
            [setsid, "-f", "/bin/sh", "-c", _WRITE_PID_AND_EXEC, str(pidfile), *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=timeout,
        )
    deadline = time.monotonic() + timeout
    while (pid := read_pid(pidfile)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{argv[0]} wrote no pid file {pidfile}")
        time.sleep(0.01)
    return pid


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lab_processes(directory: Path) -> list[int]:
    """Pids of the lab's processes still alive (daemons, reapers, QEMUs, the metrics' servers),
    from its pid files."""
    found = set()
    directory = directory.resolve()
    for pidfile in [*directory.glob("hosts/*/**/*.pid"), *directory.glob("metrics/*.pid")]:
        pid = read_pid(pidfile)
        if pid is not None and alive(pid):
            found.add(pid)
    return sorted(found)


def parallel(items: list[T], work: Callable[[T], None]) -> None:
    """Run ``work`` on every item in its own thread; re-raise the first failure."""
    errors: list[BaseException] = []

    def run(item: T) -> None:
        try:
            work(item)
        except BaseException as err:  # re-raised in the caller's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(item,), daemon=True) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
