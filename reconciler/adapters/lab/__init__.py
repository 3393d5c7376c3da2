"""The local lab: several independent libvirt daemons on this machine, each one a "host".

``start_lab`` runs one root ``libvirtd`` per host (``kvm-01``, ``kvm-02``, ...) inside its own
mount namespace (``unshare``), each with its own socket, host UUID and migration ports, and
starts tiny diskless VMs on them that really run (KVM when ``/dev/kvm`` works, else TCG). The
VMs are spread unevenly, most on ``kvm-01``, and carry labels in the reconciler's metadata. It
writes a matching cluster folder ``<dir>/cluster-state/`` whose ``cluster.yaml`` points at the
lab's sockets. ``stop_lab`` stops only what ``start_lab`` started (by pid files), removes its
domains and its folder. ``lab_status`` reports hosts and VMs. ``kill_host``, ``freeze_host``,
``thaw_host`` and ``start_host`` make one host fail and come back, for fault tests.

``start_lab(workload=True)`` boots every VM as a workload guest instead of a firmware VM: a
Linux kernel (Debian's cloud kernel) whose only program burns CPU at a duty cycle and writes
memory at a rate, each VM as the lab's workload file declares (``workload``); ``set_load``
changes it while the guest runs, through its serial console (``guest_console``). The kernel and
initrd are built once into a cache (``guest_image``). ``start_lab(metrics=True)`` also runs a
``prometheus-libvirt-exporter`` per host and a Prometheus scraping them (``metrics``).

Where daemons cannot run (not root, packages missing), ``driver="test"`` writes libvirt
test-driver node files instead (``test:///abs/path/kvm-01.xml``): the same hosts and VMs,
without processes, so ``observe`` and ``plan`` still work.

Every file the lab reads is package data under ``assets/`` (templates, and the example cluster
documents it copies), so an installed package runs it as the source tree does.

Modules: ``state`` (what a lab is, ``lab.json``), ``layout`` (where VMs start, package data),
``processes`` (pid files, signals), ``qemu`` (the daemons), ``testdriver`` (node files),
``cluster_folder`` (``cluster-state/``), ``control`` (up, down, status), ``faults``,
``lab_host`` (the supervisor script of one daemon), ``workload`` (what guests do),
``guest_image`` (their kernel and initrd), ``guest_boot`` (their domains and start),
``guest_console`` (``set_load``) and ``metrics`` (exporters and Prometheus).

Layout of ``<dir>``::

    lab.json                    what was started (read by stop and status)
    cluster-state/              cluster.yaml, policy.yaml, rules.yaml, placement.yaml
    qemu-caps-cache/            QEMU capabilities, probed once and shared by every host
    hosts/kvm-01/               one host: etc/ run/ lib/ log/ cache/ (bind-mounted over
                                libvirt's paths in its namespace), sock/libvirt-sock,
                                libvirtd.pid, reaper.pid (reaper-<pid>.pid: a supervisor
                                from before start_host, still reaping its QEMUs)
    hosts/kvm-01.xml            (test driver) the node file of one host
    guest/                      (workload) the guests' kernel and initrd, as they booted
    guests/web-1.log            (workload) the console output of guest web-1
    metrics/                    (metrics) prometheus.yml, data/, a log and pid file for
                                Prometheus and for each host's exporter
"""

from reconciler.adapters.lab.cluster_folder import (
    LAB_POLICY_OVERRIDES,
    cluster_yaml,
    lab_policy_text,
)
from reconciler.adapters.lab.control import lab_status, start_lab, stop_lab
from reconciler.adapters.lab.faults import freeze_host, kill_host, start_host, thaw_host
from reconciler.adapters.lab.guest_console import LoadAnswer, running_host, set_load
from reconciler.adapters.lab.guest_image import GuestImage, cached_guest, ensure_guest
from reconciler.adapters.lab.layout import host_names, lab_layout
from reconciler.adapters.lab.metrics import prometheus_url
from reconciler.adapters.lab.processes import lab_processes
from reconciler.adapters.lab.qemu import check_requirements, domain_xml
from reconciler.adapters.lab.state import (
    DEFAULT_DIR,
    MAX_QEMU_HOSTS,
    MAX_VMS,
    STATE_FILE,
    Driver,
    HostStatus,
    Lab,
    LabHost,
    LabStatus,
    LabVm,
    VmStatus,
    read_lab,
)
from reconciler.adapters.lab.testdriver import node_xml, write_node_files
from reconciler.adapters.lab.workload import Ramp, Spike, Workload, read_workloads
from reconciler.adapters.lab.workload import from_json as workload_from_json

__all__ = [
    "DEFAULT_DIR",
    "LAB_POLICY_OVERRIDES",
    "MAX_QEMU_HOSTS",
    "MAX_VMS",
    "STATE_FILE",
    "Driver",
    "GuestImage",
    "HostStatus",
    "Lab",
    "LabHost",
    "LabStatus",
    "LabVm",
    "LoadAnswer",
    "Ramp",
    "Spike",
    "VmStatus",
    "Workload",
    "cached_guest",
    "check_requirements",
    "cluster_yaml",
    "domain_xml",
    "ensure_guest",
    "freeze_host",
    "host_names",
    "kill_host",
    "lab_layout",
    "lab_policy_text",
    "lab_processes",
    "lab_status",
    "node_xml",
    "prometheus_url",
    "read_lab",
    "read_workloads",
    "running_host",
    "set_load",
    "start_host",
    "start_lab",
    "stop_lab",
    "thaw_host",
    "workload_from_json",
    "write_node_files",
]
