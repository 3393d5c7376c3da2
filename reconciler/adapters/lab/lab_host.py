"""One lab host: runs ``libvirtd`` in the private mount namespace ``unshare`` made for it.

Started by the lab's qemu driver (``qemu.launch``) as ``python -I lab_host.py HOST_DIR
LIBVIRTD`` under ``setsid -f unshare --mount --propagation private``; standard library only,
since it runs as a plain script. It bind-mounts the host's own folders over libvirt's state
paths (and a passwd with a ``libvirt-qemu`` user over ``/etc/passwd``), becomes a child
subreaper so the QEMUs libvirtd double-forks are reaped at once (a slow PID 1 otherwise delays
every destroy and migration), then runs libvirtd in the foreground and forwards SIGTERM/SIGINT
to it. When libvirtd dies it keeps reaping the QEMUs until none is left, so a daemon started
again by ``start_host`` finds them running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path

_MS_BIND = 4096
_PR_SET_CHILD_SUBREAPER = 36

# host folder -> path it hides, inside this namespace only
BIND_MOUNTS = (
    ("passwd", "/etc/passwd"),
    ("group", "/etc/group"),
    ("etc", "/etc/libvirt"),
    ("run", "/run/libvirt"),
    ("lib", "/var/lib/libvirt"),
    ("log", "/var/log/libvirt"),
    ("cache", "/var/cache/libvirt"),
)


def _bind(libc: ctypes.CDLL, source: Path, target: str) -> None:
    if libc.mount(str(source).encode(), target.encode(), None, _MS_BIND, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount --bind {source} {target}: {os.strerror(err)}")


def main(argv: list[str]) -> int:
    host_dir = Path(argv[1])
    libvirtd = argv[2]
    (host_dir / "reaper.pid").write_text(f"{os.getpid()}\n")  # first: the lab watches it
    libc = ctypes.CDLL(None, use_errno=True)
    for source, target in BIND_MOUNTS:
        _bind(libc, host_dir / source, target)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:  # pragma: no cover - replaced by libvirtd
        os.execv(
            libvirtd,
            [
                libvirtd,
                "-f",
                str(host_dir / "etc" / "libvirtd.conf"),
                "-p",
                str(host_dir / "libvirtd.pid"),
            ],
        )

    alive = [True]

    def forward(signum: int, _frame: object) -> None:
        if alive[0]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    while True:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            status = os.waitstatus_to_exitcode(wait_status)
            alive[0] = False
        # keep reaping adopted QEMUs until none is left
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
