"""``reconciler lab``: a local multi-host libvirt lab with real VMs."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.cli.common import EXIT_ERROR, EXIT_OK, LAB_DIR, Subparsers
from reconciler.errors import ConfigError
from reconciler.model.quantity import format_duration

if TYPE_CHECKING:
    from reconciler.adapters.lab import Lab
    from reconciler.adapters.lab.workload import Schedule


def _percent(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole percentage 0-100")
    return int(text)


def _mib(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of MiB")
    return int(text)


def _seconds(text: str, what: str, *, low: int = 1) -> int:
    from reconciler.adapters.lab.workload import duration

    try:
        return duration(text.strip(), what, low=low)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(err.message) from None


def _spike(text: str) -> dict[str, int | str]:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not CPU,FOR,EVERY (e.g. 100,5s,60s)")
    on, every = _seconds(parts[1], "FOR", low=0), _seconds(parts[2], "EVERY")
    if on > every:
        raise argparse.ArgumentTypeError(f"{text!r}: FOR is longer than EVERY")
    return {"pattern": "spike", "peak": _percent(parts[0].strip()), "on": on, "every": every}


def _cycles(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of cycles, 1 or more")
    return int(text)


def _schedule(text: str) -> Schedule:
    from reconciler.adapters.lab.workload import parse_schedule

    try:
        return parse_schedule(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(f"{err.message}; {err.hint}") from None


def _ramp(text: str) -> dict[str, int | str]:
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not TO,OVER (e.g. 80,2m)")
    return {"pattern": "ramp", "to": _percent(parts[0].strip()), "over": _seconds(parts[1], "OVER")}


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
    up.add_argument(
        "--workload",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="boot every VM as a Linux guest that burns CPU and writes memory as FILE (YAML) "
        "declares, the lab's own workload without FILE; emulated (TCG), qemu driver only",
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help="also run a prometheus-libvirt-exporter per host and a Prometheus scraping them "
        "every 5s, on loopback ports (`lab status` shows its URL)",
    )
    up.add_argument(
        "--bmc",
        action="store_true",
        help="also give every host a Redfish BMC on a loopback port (sushy-tools' emulator): "
        "powering a host off ends its VMs and libvirt daemon, powering it on starts it again; "
        "the cluster folder names them, their user and password are in <dir>/bmc.env",
    )
    up.add_argument(
        "--boot-delay",
        type=lambda text: _seconds(text, "--boot-delay", low=0),
        default=5,
        metavar="SECONDS",
        help="with --bmc: how long a host takes from power-on to its daemon answering "
        "(default 5s)",
    )
    status = actions.add_parser("status", help="list the lab's hosts and VMs")
    status.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="table (default) or json: hosts with their URIs, VMs, the Prometheus URL",
    )
    load = actions.add_parser(
        "load",
        help="change what a workload guest does while it runs",
        description="Tell a running workload guest (lab up --workload) its new load through "
        "its serial console; what is not given stays as it is. Without options it says what "
        "the guest does now.",
    )
    load.add_argument("vm", metavar="VM", help="the VM's name, e.g. web-1")
    load.add_argument("--cpu", type=_percent, help="percent of each of its vCPUs kept busy")
    load.add_argument("--dirty", type=_mib, help="MiB of memory written per second")
    load.add_argument("--wss", type=_mib, help="MiB of memory written over (its working set)")
    pattern = load.add_mutually_exclusive_group()
    pattern.add_argument(
        "--spike",
        type=_spike,
        metavar="CPU,FOR,EVERY",
        help="raise the CPU to CPU%% for FOR every EVERY, e.g. 100,5s,60s",
    )
    pattern.add_argument(
        "--ramp",
        type=_ramp,
        metavar="TO,OVER",
        help="move the CPU from --cpu (or its current) to TO%% over OVER, then hold, e.g. 80,2m",
    )
    pattern.add_argument(
        "--steady", action="store_true", help="no spike or ramp: --cpu (or its current) always"
    )
    pattern.add_argument(
        "--schedule",
        type=_schedule,
        metavar="OFFSET:CPU,...",
        help="follow a cycle that repeats, a day compressed into minutes: the CPU%% at each "
        'offset, a straight line between them, e.g. "0m:10,5m:80,10m:10"; stays in the '
        "foreground telling the guest each part as it begins, until Ctrl-C or --cycles",
    )
    load.add_argument(
        "--cycles",
        type=_cycles,
        metavar="N",
        help="with --schedule: stop after N cycles (default: until interrupted)",
    )
    guest = actions.add_parser(
        "guest",
        help="build the workload guests' kernel and initrd into the cache (once)",
        description="Fetch Debian's cloud kernel (apt-get download linux-image-cloud-amd64's "
        "kernel package) and compile the guests' /init (gcc -static) into the cache, "
        "$RECONCILER_LAB_GUEST_CACHE or ~/.cache/reconciler/lab-guest; `lab up --workload` "
        "does the same where they are missing.",
    )
    guest.add_argument("--rebuild", action="store_true", help="fetch and build them again")
    bmc = actions.add_parser(
        "bmc",
        help="show or change what a host's BMC does (lab up --bmc)",
        description="Set a lab host's BMC's boot delay, shutdown delay or fault from its next "
        "request on: refuse (resets answer an error), hang (requests never answer), lie "
        "(resets do nothing, the power state read is the one asked for), none. Without "
        "options it says how the BMC is set.",
    )
    bmc.add_argument("host", metavar="HOST", help="the lab host, e.g. kvm-02")
    bmc.add_argument("--fault", choices=("none", "refuse", "hang", "lie"), help="a fault to play")
    bmc.add_argument(
        "--boot-delay",
        type=lambda text: _seconds(text, "--boot-delay", low=0),
        metavar="SECONDS",
        help="from power-on to the host's daemon answering",
    )
    bmc.add_argument(
        "--shutdown-delay",
        type=lambda text: _seconds(text, "--shutdown-delay", low=0),
        metavar="SECONDS",
        help="from a graceful shutdown to the host being off",
    )
    down = actions.add_parser("down", help="stop what `lab up` started and remove its folder")
    for action in (up, status, load, bmc, down):
        action.add_argument(
            "--dir", type=Path, default=LAB_DIR, help="the lab's folder (default .lab)"
        )
    p.set_defaults(handler=_run_lab)


def _run_lab(args: argparse.Namespace) -> int:
    # imported here so that commands without libvirt work where it is not installed
    from reconciler.adapters import lab as libvirt_lab

    if args.lab_action == "up":
        workload = args.workload is not None
        lab = libvirt_lab.start_lab(
            args.dir,
            hosts=args.hosts,
            vms=args.vms,
            driver=args.driver,
            recreate=args.recreate,
            workload=workload,
            workload_file=Path(args.workload) if args.workload else None,
            metrics=args.metrics,
            bmc=args.bmc,
            boot_seconds=args.boot_delay,
            say=lambda text: print(f"{text} ...", flush=True),
        )
        _print_up(lab)
        return EXIT_OK
    if args.lab_action == "status":
        return _status(args.dir, args.format)
    if args.lab_action == "load":
        pattern = args.spike or args.ramp or ({"pattern": "steady"} if args.steady else {})
        sizes = {"cpu": args.cpu, "dirty": args.dirty, "wss": args.wss}
        changes = {key: value for key, value in sizes.items() if value is not None}
        if args.schedule is not None:
            return _follow(args.dir, args.vm, args.schedule, changes, args.cycles)
        return _load(args.dir, args.vm, changes | pattern)
    if args.lab_action == "bmc":
        from reconciler.adapters.lab.bmc import set_bmc

        now = set_bmc(
            args.dir,
            args.host,
            fault=args.fault,
            boot_seconds=args.boot_delay,
            shutdown_seconds=args.shutdown_delay,
        )
        print(f"BMC of {args.host}: " + ", ".join(f"{k} {v}" for k, v in now.items()))
        return EXIT_OK
    if args.lab_action == "guest":
        image = libvirt_lab.ensure_guest(
            rebuild=args.rebuild, say=lambda text: print(f"{text} ...", flush=True)
        )
        state = "built" if image.built else "cached"
        print(f"workload guest {state}: kernel of {image.kernel_package}")
        print(f"  {image.kernel}\n  {image.initrd}")
        return EXIT_OK
    lab = libvirt_lab.stop_lab(args.dir)
    print(f"lab in {lab.dir} stopped and removed")
    return EXIT_OK


def _print_up(lab: Lab) -> None:
    from reconciler.adapters import lab as libvirt_lab

    if lab.already_up:
        print(f"a lab is already up in {lab.dir} (use --recreate to start it afresh)")
    else:
        if lab.driver == "test":
            kind = "libvirt test-driver files"
        elif lab.workload:
            kind = "workload guests (emulated)"
        else:
            kind = f"{lab.virt_type} VMs"
        print(
            f"lab up in {lab.dir}: {len(lab.hosts)} hosts, {len(lab.vms)} {kind} "
            f"in {lab.seconds:.1f}s"
        )
        if lab.workload:
            print(
                f"guests booted in {lab.boot_seconds:.1f}s (the slowest), "
                f"kernel of {lab.kernel_package}"
            )
    for host in lab.hosts:
        bmc_note = f"  BMC http://127.0.0.1:{host.bmc_port}" if host.bmc_port else ""
        print(f"  {host.name}  {host.uri}{bmc_note}")
        for vm in lab.vms:
            if vm.host != host.name:
                continue
            load = lab.workloads.get(vm.name)
            what = f"  {libvirt_lab.workload_from_json(load).describe()}" if load else ""
            print(f"      {vm.name:<10}{what}")
    url = libvirt_lab.prometheus_url(lab)
    if url:
        print(f"Prometheus: {url}  (every host's exporter, scraped every 5s, label host)")
    if any(h.bmc_port for h in lab.hosts):
        print(f"BMC user and password: set -a; . {Path(lab.dir) / 'bmc.env'}; set +a")
    print(f"cluster folder: {lab.cluster_dir}")
    print(f"next: reconciler observe {lab.cluster_dir}")
    if lab.workload:
        print(f"      reconciler lab load web-1 --cpu 80 --dir {lab.dir}")


def _status(directory: Path, form: str) -> int:
    from reconciler.adapters import lab as libvirt_lab

    status = libvirt_lab.lab_status(directory)
    code = EXIT_OK if all(h.up for h in status.hosts) else EXIT_ERROR
    if form == "json":
        print(json.dumps(asdict(status), indent=2))
        return code
    print(f"lab in {status.dir} ({status.driver} driver)")
    for h in status.hosts:
        state = "up" if h.up else "down"
        extra = f"  pid {h.pid}" if h.pid else ""
        extra += f"  ({h.error})" if h.error else ""
        extra += f"  BMC {h.bmc}" if h.bmc else ""
        print(f"  {h.name}  {state:<4}  {h.uri}{extra}")
    for vm in status.vms:
        what = f"  {vm.workload}" if vm.workload else ""
        print(f"    {vm.name:<12} {vm.host:<8} {vm.state}{what}")
    if status.prometheus:
        print(f"Prometheus: {status.prometheus}")
    return code


def _follow(
    directory: Path,
    vm: str,
    schedule: Schedule,
    changes: dict[str, int | str],
    cycles: int | None,
) -> int:
    """Tell ``vm`` each part of ``schedule`` as it begins, printing what it answered."""
    import time

    from reconciler.adapters import lab as libvirt_lab
    from reconciler.adapters.lab.workload import follow

    began = time.monotonic()

    def tell(settings: dict[str, int | str]) -> None:
        answer = libvirt_lab.set_load(directory, vm, changes | settings)
        at = time.monotonic() - began
        print(f"{at:7.0f}s {answer.vm} on {answer.host}: {answer.workload.describe()}", flush=True)

    period = format_duration(timedelta(seconds=schedule.period))
    until = f"{cycles} cycle(s)" if cycles else "Ctrl-C"
    print(f"{vm} follows a {period} cycle of {len(schedule.points)} points until {until}")
    follow(schedule, tell, clock=time.monotonic, sleep=time.sleep, cycles=cycles)
    return EXIT_OK


def _load(directory: Path, vm: str, changes: dict[str, int | str]) -> int:
    """Tell ``vm`` its new settings (none: ask what it does) and print its answer."""
    from reconciler.adapters import lab as libvirt_lab

    answer = libvirt_lab.set_load(directory, vm, changes)
    print(f"{answer.vm} on {answer.host}: {answer.workload.describe()}")
    return EXIT_OK
