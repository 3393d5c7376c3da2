"""``reconciler lab``: a local multi-host libvirt lab with real VMs."""

from __future__ import annotations

import argparse
from pathlib import Path

from reconciler.cli.common import EXIT_ERROR, EXIT_OK, LAB_DIR, Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "lab",
        help="a local multi-host libvirt lab with real VMs",
        description="Run several libvirt daemons on this machine as hosts kvm-01, kvm-02, ... "
        "with tiny VMs, unevenly placed, and a matching cluster folder <dir>/cluster-state/. "
        "Needs root, libvirtd and QEMU; --driver test writes libvirt test-driver files instead.",
    )
    actions = p.add_subparsers(dest="lab_action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the lab (or say that it is up)")
    up.add_argument("--hosts", type=int, default=3, help="number of hosts (default 3)")
    up.add_argument("--vms", type=int, default=8, help="number of VMs (default 8)")
    up.add_argument(
        "--driver",
        choices=("qemu", "test"),
        default="qemu",
        help="qemu: real daemons and VMs (default); test: libvirt test-driver files only",
    )
    up.add_argument("--recreate", action="store_true", help="stop a running lab first")
    status = actions.add_parser("status", help="list the lab's hosts and VMs")
    down = actions.add_parser("down", help="stop what `lab up` started and remove its folder")
    for action in (up, status, down):
        action.add_argument(
            "--dir", type=Path, default=LAB_DIR, help="the lab's folder (default .lab)"
        )
    p.set_defaults(handler=_run_lab)


def _run_lab(args: argparse.Namespace) -> int:
    # imported here so that commands without libvirt work where it is not installed
    from reconciler.adapters import lab as libvirt_lab

    if args.lab_action == "up":
        lab = libvirt_lab.start_lab(
            args.dir, hosts=args.hosts, vms=args.vms, driver=args.driver, recreate=args.recreate
        )
        if lab.already_up:
            print(f"a lab is already up in {lab.dir} (use --recreate to start it afresh)")
        else:
            kind = "libvirt test-driver files" if lab.driver == "test" else f"{lab.virt_type} VMs"
            print(
                f"lab up in {lab.dir}: {len(lab.hosts)} hosts, {len(lab.vms)} {kind} "
                f"in {lab.seconds:.1f}s"
            )
        for host in lab.hosts:
            names = ", ".join(vm.name for vm in lab.vms if vm.host == host.name) or "-"
            print(f"  {host.name}  {host.uri}\n      {names}")
        print(f"cluster folder: {lab.cluster_dir}")
        print(f"next: reconciler observe {lab.cluster_dir}")
        return EXIT_OK
    if args.lab_action == "status":
        status = libvirt_lab.lab_status(args.dir)
        print(f"lab in {status.dir} ({status.driver} driver)")
        for h in status.hosts:
            state = "up" if h.up else "down"
            extra = f"  pid {h.pid}" if h.pid else ""
            extra += f"  ({h.error})" if h.error else ""
            print(f"  {h.name}  {state:<4}  {h.uri}{extra}")
        for vm in status.vms:
            print(f"    {vm.name:<12} {vm.host:<8} {vm.state}")
        return EXIT_OK if all(h.up for h in status.hosts) else EXIT_ERROR
    lab = libvirt_lab.stop_lab(args.dir)
    print(f"lab in {lab.dir} stopped and removed")
    return EXIT_OK
