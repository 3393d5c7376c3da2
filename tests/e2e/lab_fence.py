"""A fence agent for lab hosts, as a BMC would do it: ``lab_fence.py LAB_DIR FAILING HOST``
switches HOST off (its libvirtd and QEMUs killed) and exits 0, or exits 1 without touching it
while HOST is listed (one name per line) in the file FAILING (a BMC that does not answer)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from reconciler.adapters.lab.faults import kill_host, kill_qemus
from reconciler.errors import LabError


def main(lab: Path, failing: Path, host: str) -> int:
    listed = failing.read_text().split() if failing.exists() else []
    if host in listed:
        print(f"the BMC of {host} does not answer", file=sys.stderr)
        return 1
    with contextlib.suppress(LabError):  # dead already
        kill_host(lab, host)
    kill_qemus(lab, host)
    print(f"{host} is off")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
