"""The per-host command of the rollout lab tests, run by the rollout as any command is.

``rollout_lab_command.py MARKS LAB_DIR HOST`` appends ``HOST start <unix time>`` to the file
MARKS, restarts that lab host's libvirtd (its "reboot": with no VM left running there it comes
back as a rebooted machine does, its domains defined and shut off), waits until it answers,
then appends ``HOST end <unix time>``. The marks are the commands' own word on when each host
was worked on, for the tests to judge the rollout by.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from reconciler.adapters.lab import faults


def mark(marks: Path, host: str, what: str) -> None:
    with marks.open("a") as out:
        out.write(f"{host} {what} {time.time():.3f}\n")
        out.flush()
        os.fsync(out.fileno())


def main() -> int:
    marks, lab_dir, host = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    mark(marks, host, "start")
    faults.kill_host(lab_dir, host)
    faults.start_host(lab_dir, host)
    mark(marks, host, "end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
