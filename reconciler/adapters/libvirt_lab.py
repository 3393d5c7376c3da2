"""The local lab: several independent libvirt daemons on this machine, each one a "host".

``start_lab`` runs one root ``libvirtd`` per host (``kvm-01``, ``kvm-02``, ...) inside its own
mount namespace (``unshare``), each with its own socket, host UUID and migration ports, and
starts tiny diskless VMs on them that really run (KVM when ``/dev/kvm`` works, else TCG). The
VMs are spread unevenly, most on ``kvm-01``, and carry labels in the reconciler's metadata. It
writes a matching cluster folder ``<dir>/cluster-state/`` whose ``cluster.yaml`` points at the
lab's sockets. ``stop_lab`` stops only what ``start_lab`` started (by pid files), removes its
domains and its folder. ``lab_status`` reports hosts and VMs.

Where daemons cannot run (not root, packages missing), ``driver="test"`` writes libvirt
test-driver node files instead (``test:///abs/path/kvm-01.xml``): the same hosts and VMs,
without processes, so ``observe`` and ``plan`` still work.

Layout of ``<dir>``::

    lab.json                    what was started (read by stop and status)
    cluster-state/              cluster.yaml, policy.yaml, rules.yaml, placement.yaml
    qemu-caps-cache/            QEMU capabilities, probed once and shared by every host
    hosts/kvm-01/               one host: etc/ run/ lib/ log/ cache/ (bind-mounted over
                                libvirt's paths in its namespace), sock/libvirt-sock,
                                libvirtd.pid, reaper.pid
    hosts/kvm-01.xml            (test driver) the node file of one host
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Final, Literal

import yaml

from reconciler.adapters.domain_metadata import render_metadata
from reconciler.errors import LabError
from reconciler.model.base import API_VERSION, Metadata
from reconciler.model.cluster import Cluster, ClusterSpec, Host

try:  # the test driver mode writes files only and works without libvirt-python
    import libvirt
except ImportError:  # pragma: no cover - depends on the machine
    libvirt = None

Driver = Literal["qemu", "test"]

DEFAULT_DIR: Final = Path(".lab")
STATE_FILE: Final = "lab.json"
MAX_QEMU_HOSTS: Final = 16
MAX_VMS: Final = 200
_PORTS_PER_HOST = 16
_SOCKET_PATH_MAX = 107
_UUID_NS = uuid.UUID("6f1d6c1e-2b8a-4f55-9c57-6c61622d7663")
_START_TIMEOUT = 15.0

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CLUSTER_STATE: Final = _PROJECT_ROOT / "cluster-state"
"""The project's example cluster folder (absent in an installed package)."""
_SCHEMAS = _PROJECT_ROOT / "schemas"

LAB_POLICY_OVERRIDES: Final[dict[str, object]] = {
    "basis": "allocated",
    "holdRounds": 1,
    "minUptime": "0s",
}
"""Policy settings the lab changes so its imbalance shows up in the first plan."""


@dataclass(frozen=True)
class LabVm:
    """One VM of the lab and the host it starts on."""

    name: str
    host: str
    memory_mib: int
    vcpus: int
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> str:
        return str(uuid.uuid5(_UUID_NS, f"vm/{self.name}"))


@dataclass(frozen=True)
class LabHost:
    """One lab host: a libvirt daemon (``qemu``) or a test-driver node file (``test``)."""

    name: str
    uri: str
    host_uuid: str
    path: str
    """The host's folder (qemu) or node file (test)."""
    migration_port_min: int = 0
    rack: str = "r1"


@dataclass(frozen=True)
class Lab:
    """What ``start_lab`` set up, as kept in ``lab.json``."""

    dir: str
    driver: Driver
    hosts: list[LabHost]
    vms: list[LabVm]
    virt_type: str = ""
    """``kvm`` or ``qemu`` (TCG) for the qemu driver; ``test`` for the test driver."""
    already_up: bool = False
    """True when ``start_lab`` found this lab running and left it as it was."""
    seconds: float = 0.0
    """How long ``start_lab`` took."""

    @property
    def cluster_dir(self) -> Path:
        return Path(self.dir) / "cluster-state"


@dataclass(frozen=True)
class HostStatus:
    name: str
    uri: str
    up: bool
    pid: int | None
    error: str | None = None


@dataclass(frozen=True)
class VmStatus:
    name: str
    host: str
    state: str


@dataclass(frozen=True)
class LabStatus:
    dir: str
    driver: Driver
    hosts: list[HostStatus]
    vms: list[VmStatus]


# --- layout ---------------------------------------------------------------------------------

_CATALOGUE: Final = (
    ("web-1", 128, 1, {"app": "web"}),
    ("web-2", 128, 1, {"app": "web"}),
    ("web-3", 96, 1, {"app": "web"}),
    ("db-1", 256, 2, {"role": "db"}),
    ("db-2", 256, 2, {"role": "db"}),
    ("app-1", 192, 2, {"tier": "app"}),
    ("cache-1", 64, 1, {"tier": "cache"}),
    ("erp", 160, 1, {"tier": "erp"}),
)


def host_names(count: int) -> list[str]:
    """``kvm-01``, ``kvm-02``, ... for ``count`` hosts."""
    return [f"kvm-{i:02d}" for i in range(1, count + 1)]


def lab_layout(hosts: int, vms: int) -> list[LabVm]:
    """The lab's VMs and where each starts: unevenly, most of them on the first host.

    The first eight are web-1..3 (``app=web``), db-1 and db-2 (``role=db``, on different
    hosts), app-1, cache-1 (together) and erp (on the last host); then vm-09, vm-10, ...
    with every third one on another host. Memory 64-256 MiB, 1-2 vCPUs.
    """
    if hosts < 1 or vms < 0:
        raise ValueError("a lab needs at least one host and zero or more VMs")
    names = host_names(hosts)
    first, last = names[0], names[-1]
    out: list[LabVm] = []
    for index in range(vms):
        if index < len(_CATALOGUE):
            name, memory, vcpus, labels = _CATALOGUE[index]
            host = first
            if name == "db-2" and hosts > 1:
                host = names[1]
            elif name == "erp":
                host = last
            out.append(LabVm(name, host, memory, vcpus, dict(labels)))
            continue
        number = index + 1
        host = first
        if number % 3 == 0 and hosts > 1:
            host = names[1 + (number // 3) % (hosts - 1)]
        memory = 64 + (number * 32) % 224
        out.append(LabVm(f"vm-{number:02d}", host, memory, 1 + number % 2, {"app": "batch"}))
    return out


def _rack(index: int) -> str:
    return f"r{index % 3 + 1}"


def _socket_uri(socket: Path) -> str:
    return f"qemu+unix:///system?socket={socket}"


# --- requirements ---------------------------------------------------------------------------


def _which(name: str, *extra: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in extra:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def check_requirements() -> dict[str, str]:
    """The binaries the qemu lab runs, by name; ``LabError`` says what is missing and the fix."""
    if libvirt is None:
        raise LabError(
            "the lab needs the libvirt Python bindings, which are not installed",
            hint="pip install libvirt-python (needs libvirt-dev and pkg-config), or "
            "run `reconciler lab up --driver test`",
        )
    if os.geteuid() != 0:
        raise LabError(
            "the lab runs its own root libvirt daemons and must be started as root",
            hint="run it with sudo, or use `reconciler lab up --driver test` (no daemons)",
        )
    found: dict[str, str] = {}
    needs = (
        ("libvirtd", "libvirt-daemon libvirt-daemon-driver-qemu"),
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("unshare", "util-linux"),
        ("setsid", "util-linux"),
    )
    for binary, package in needs:
        path = _which(binary, "/usr/sbin", "/sbin", "/usr/bin")
        if path is None:
            raise LabError(
                f"the lab needs {binary}, which is not installed",
                hint=f"apt-get install --no-install-recommends {package} "
                "(or use `reconciler lab up --driver test`)",
            )
        found[binary] = path
    drivers = list(Path("/usr/lib").glob("*/libvirt/connection-driver/libvirt_driver_qemu.so"))
    drivers += list(Path("/usr/lib64/libvirt/connection-driver").glob("libvirt_driver_qemu.so"))
    if not drivers:
        raise LabError(
            "libvirtd is installed without its QEMU driver",
            hint="apt-get install --no-install-recommends libvirt-daemon-driver-qemu",
        )
    return found


# --- state file -----------------------------------------------------------------------------


def _state_path(directory: Path) -> Path:
    return directory / STATE_FILE


def _write_state(lab: Lab) -> None:
    data = asdict(lab)
    data.pop("already_up")
    path = _state_path(Path(lab.dir))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def read_lab(directory: Path) -> Lab | None:
    """The lab recorded in ``directory``, or None when there is none."""
    path = _state_path(directory.resolve())
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return Lab(
            dir=data["dir"],
            driver=data["driver"],
            hosts=[LabHost(**h) for h in data["hosts"]],
            vms=[LabVm(**v) for v in data["vms"]],
            virt_type=data.get("virt_type", ""),
            seconds=data.get("seconds", 0.0),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LabError(
            f"{path} is not a lab state file: {err}",
            hint=f"remove {directory} by hand if nothing of the lab is running",
        ) from err


# --- processes ------------------------------------------------------------------------------


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    """True when ``pid`` runs and is not a zombie."""
    if pid is None or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _ours(pid: int | None, marker: str) -> bool:
    """``pid`` is alive and its command line contains ``marker`` (guards against pid reuse)."""
    return pid is not None and _alive(pid) and marker in _cmdline(pid)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _terminate(pid: int, marker: str, timeout: float = 5.0) -> None:
    if not _ours(pid, marker):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 2.0)


def _host_running(host: LabHost) -> bool:
    hdir = Path(host.path)
    return _ours(_pid(hdir / "libvirtd.pid"), str(hdir))


# --- libvirt helpers ------------------------------------------------------------------------


def _open(uri: str) -> Any:
    assert libvirt is not None
    libvirt.registerErrorHandler(lambda *_: None, None)
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as err:
        raise LabError(f"cannot connect to lab host {uri}: {err}") from err


def _virt_type(conn: Any) -> str:
    """``kvm`` when this machine can run KVM guests, else ``qemu`` (TCG)."""
    forced = os.environ.get("RECONCILER_LAB_VIRT_TYPE")
    if forced in ("kvm", "qemu"):
        return forced
    assert libvirt is not None
    try:
        conn.getDomainCapabilities(None, "x86_64", None, "kvm", 0)
    except libvirt.libvirtError:
        return "qemu"
    return "kvm"


def _asset(name: str) -> Template:
    text = resources.files("reconciler.adapters").joinpath("lab_assets", name).read_text()
    return Template(text)


def _indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def domain_xml(vm: LabVm, virt_type: str) -> str:
    """The libvirt domain XML of a lab VM (tiny, diskless, with its labels in metadata)."""
    return _asset("domain.xml.in").substitute(
        virt_type=virt_type,
        name=vm.name,
        uuid=vm.uuid,
        metadata=_indent(render_metadata(vm.labels), 4),
        memory_mib=vm.memory_mib,
        vcpus=vm.vcpus,
    )


def _parallel(items: list[Any], work: Callable[[Any], None]) -> None:
    """Run ``work`` on every item in its own thread; re-raise the first failure."""
    errors: list[BaseException] = []

    def run(item: Any) -> None:
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


# --- start ----------------------------------------------------------------------------------


def start_lab(
    directory: Path = DEFAULT_DIR,
    *,
    hosts: int = 3,
    vms: int = 8,
    driver: Driver = "qemu",
    recreate: bool = False,
) -> Lab:
    """Start a lab of ``hosts`` hosts and ``vms`` VMs in ``directory`` and write its folder.

    When a lab already runs there it is left alone (``Lab.already_up``), unless ``recreate``
    stops it first. ``LabError`` says what is missing on this machine and how to fix it.
    """
    began = time.monotonic()
    directory = directory.resolve()
    if hosts < 1 or (driver == "qemu" and hosts > MAX_QEMU_HOSTS):
        limit = MAX_QEMU_HOSTS if driver == "qemu" else "any"
        raise LabError(f"a lab has 1 to {limit} hosts, not {hosts}", hint="change --hosts")
    if not 0 <= vms <= MAX_VMS:
        raise LabError(f"a lab has 0 to {MAX_VMS} VMs, not {vms}", hint="change --vms")
    existing = read_lab(directory)
    if existing is not None:
        if not recreate and _lab_running(existing):
            return replace(existing, already_up=True)
        stop_lab(directory)
    elif directory.exists() and any(directory.iterdir()):
        raise LabError(
            f"{directory} exists and is not a lab folder",
            hint="choose another --dir or remove that folder",
        )
    layout = lab_layout(hosts, vms)
    if driver == "test":
        lab = _start_test_lab(directory, hosts, layout)
    else:
        lab = _start_qemu_lab(directory, hosts, layout)
    _write_cluster_state(lab)
    lab = replace(lab, seconds=round(time.monotonic() - began, 3))
    _write_state(lab)
    return lab


def _lab_running(lab: Lab) -> bool:
    if lab.driver == "test":
        return all(Path(h.path).is_file() for h in lab.hosts)
    return any(_host_running(h) for h in lab.hosts)


def _start_test_lab(directory: Path, hosts: int, layout: list[LabVm]) -> Lab:
    hosts_dir = directory / "hosts"
    hosts_dir.mkdir(parents=True, exist_ok=True)
    lab_hosts: list[LabHost] = []
    for index, name in enumerate(host_names(hosts)):
        path = hosts_dir / f"{name}.xml"
        domains = "\n".join(
            _asset("test-domain.xml.in").substitute(
                name=vm.name,
                uuid=vm.uuid,
                metadata=_indent(render_metadata(vm.labels), 6),
                memory_mib=vm.memory_mib,
                vcpus=vm.vcpus,
            )
            for vm in layout
            if vm.host == name
        )
        path.write_text(node_xml(domains))
        lab_hosts.append(
            LabHost(
                name=name,
                uri=f"test://{path}",
                host_uuid=str(uuid.uuid5(_UUID_NS, f"host/{directory}/{name}")),
                path=str(path),
                rack=_rack(index),
            )
        )
    return Lab(dir=str(directory), driver="test", hosts=lab_hosts, vms=layout, virt_type="test")


def node_xml(domains: str = "", *, cpus: int = 4, memory_mib: int = 4096) -> str:
    """A libvirt test-driver node file holding ``domains`` (``<domain type='test'>`` XML)."""
    return (
        "<node>\n"
        f"  <cpu><mhz>2400</mhz><model>x86_64</model><active>{cpus}</active>\n"
        f"       <nodes>1</nodes><sockets>1</sockets><cores>{cpus}</cores>"
        "<threads>1</threads></cpu>\n"
        f"  <memory>{memory_mib * 1024}</memory>\n"
        f"{domains}\n"
        "</node>\n"
    )


def _start_qemu_lab(directory: Path, hosts: int, layout: list[LabVm]) -> Lab:
    binaries = check_requirements()
    names = host_names(hosts)
    longest = directory / "hosts" / names[-1] / "sock" / "libvirt-sock-admin"
    if len(str(longest)) > _SOCKET_PATH_MAX:
        raise LabError(
            f"the lab folder {directory} is too deep for a unix socket path "
            f"({len(str(longest))} > {_SOCKET_PATH_MAX} characters)",
            hint="use a shorter --dir",
        )
    port_base = 49152 + (zlib.crc32(str(directory).encode()) % 63) * 256
    lab_hosts = []
    for index, name in enumerate(names):
        hdir = directory / "hosts" / name
        lab_hosts.append(
            LabHost(
                name=name,
                uri=_socket_uri(hdir / "sock" / "libvirt-sock"),
                host_uuid=str(uuid.uuid5(_UUID_NS, f"host/{directory}/{name}")),
                path=str(hdir),
                migration_port_min=port_base + index * _PORTS_PER_HOST,
                rack=_rack(index),
            )
        )
    lab = Lab(dir=str(directory), driver="qemu", hosts=lab_hosts, vms=layout)
    directory.mkdir(parents=True, exist_ok=True)
    _write_state(lab)  # first, so that `lab down` can clean up a lab that failed half-way
    try:
        (directory / "qemu-caps-cache").mkdir(exist_ok=True)
        for host in lab_hosts:
            _prepare_host(directory, host)
        # The first daemon probes QEMU's capabilities into the shared cache; the others
        # then start from it (about 1 s each instead of a full probe).
        _launch(lab_hosts[0], binaries)
        _wait_up(lab_hosts[0])
        for host in lab_hosts[1:]:
            _launch(host, binaries)
        for host in lab_hosts[1:]:
            _wait_up(host)
        conns = {h.name: _open(h.uri) for h in lab_hosts}
        try:
            virt_type = _virt_type(conns[lab_hosts[0].name])
            lab = replace(lab, virt_type=virt_type)
            _write_state(lab)

            by_name = {h.name: h for h in lab_hosts}

            def start_vm(vm: LabVm) -> None:
                _define_and_start(conns[vm.host], vm, virt_type, by_name[vm.host])

            _parallel(layout, start_vm)  # QEMU start-up dominates: start them all at once
        finally:
            for conn in conns.values():
                conn.close()
    except BaseException:
        with contextlib.suppress(Exception):
            stop_lab(directory)
        raise
    return lab


def _define_and_start(conn: Any, vm: LabVm, virt_type: str, host: LabHost) -> None:
    assert libvirt is not None
    try:
        dom = conn.defineXML(domain_xml(vm, virt_type))
        dom.create()
    except libvirt.libvirtError as err:
        log = Path(host.path) / "log" / "qemu" / f"{vm.name}.log"
        raise LabError(
            f"{host.name}: cannot start VM {vm.name}: {err}{_tail(log)}",
            hint=f"see {Path(host.path) / 'log'}",
        ) from err


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n  " + "\n  ".join(text) if text else ""


def _prepare_host(directory: Path, host: LabHost) -> None:
    hdir = Path(host.path)
    if hdir.exists():
        shutil.rmtree(hdir)
    for sub in ("etc", "run", "lib", "log", "cache/qemu", "sock"):
        (hdir / sub).mkdir(parents=True)
    values = {
        "name": host.name,
        "host_dir": str(hdir),
        "host_uuid": host.host_uuid,
        "port_min": host.migration_port_min,
        "port_max": host.migration_port_min + _PORTS_PER_HOST - 1,
    }
    (hdir / "etc" / "libvirtd.conf").write_text(_asset("libvirtd.conf.in").substitute(values))
    (hdir / "etc" / "qemu.conf").write_text(_asset("qemu.conf.in").substitute(values))
    (hdir / "cache" / "qemu" / "capabilities").symlink_to(directory / "qemu-caps-cache")
    # libvirtd resolves its build-time user 'libvirt-qemu' before it reads qemu.conf: give
    # the namespace a passwd/group that has it, leaving the machine's own files untouched.
    passwd = Path("/etc/passwd").read_text()
    group = Path("/etc/group").read_text()
    if not re.search(r"^libvirt-qemu:", passwd, re.M):
        passwd += "libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin\n"
    if not re.search(r"^libvirt-qemu:", group, re.M):
        group += "libvirt-qemu:x:64055:\n"
    (hdir / "passwd").write_text(passwd)
    (hdir / "group").write_text(group)


def _launch(host: LabHost, binaries: dict[str, str]) -> None:
    hdir = Path(host.path)
    for target in ("/run/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/var/cache/libvirt"):
        Path(target).mkdir(parents=True, exist_ok=True)  # mount points only
    script = Path(__file__).with_name("lab_host.py")
    with open(hdir / "log" / "stdout.log", "ab") as out:
        # setsid -f forks and returns at once: the daemon is detached from this process.
        subprocess.run(
            [
                binaries["setsid"],
                "-f",
                binaries["unshare"],
                "--mount",
                "--propagation",
                "private",
                sys.executable,
                "-I",
                str(script),
                str(hdir),
                binaries["libvirtd"],
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
        )


def _wait_up(host: LabHost) -> None:
    hdir = Path(host.path)
    sock = hdir / "sock" / "libvirt-sock"
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if sock.is_socket() and _alive(_pid(hdir / "libvirtd.pid")):
            return
        reaper = _pid(hdir / "reaper.pid")
        if reaper is not None and not _alive(reaper):
            break
        time.sleep(0.02)
    raise LabError(
        f"libvirtd of {host.name} did not come up"
        f"{_tail(hdir / 'log' / 'stdout.log')}{_tail(hdir / 'log' / 'libvirtd.log')}",
        hint=f"see {hdir / 'log'}",
    )


# --- cluster folder -------------------------------------------------------------------------

_SCHEMA_RE = re.compile(r"^#\s*yaml-language-server:\s*\$schema=(\S+)\s*$")


def _schema_line(example: Path, kind: str, dest_dir: Path) -> str | None:
    """The ``$schema`` comment for a copy in ``dest_dir``, pointing at the same schema file."""
    target: Path | None = None
    if example.is_file():
        for line in example.read_text().splitlines()[:5]:
            match = _SCHEMA_RE.match(line)
            if match:
                ref = match.group(1)
                if "://" in ref:
                    return line
                target = (example.parent / ref).resolve()
                break
    if target is None and _SCHEMAS.is_dir():
        candidates = sorted(p for p in _SCHEMAS.glob("*.json") if kind.lower() in p.name.lower())
        target = candidates[0] if candidates else None
    if target is None or not target.exists():
        return None
    return f"# yaml-language-server: $schema={os.path.relpath(target, dest_dir)}"


def _header(example: Path, kind: str, dest_dir: Path, note: str) -> str:
    schema = _schema_line(example, kind, dest_dir)
    return (f"{schema}\n" if schema else "") + "".join(f"# {line}\n" for line in note.split("\n"))


def _example_text(name: str, hosts: set[str]) -> str | None:
    """The example document ``name`` without its ``$schema`` line, if it suits these hosts.

    An example that names a host the lab does not have (``kvm-03`` in a 2-host lab) would not
    validate, so it is not used.
    """
    try:
        text = (EXAMPLE_CLUSTER_STATE / name).read_text()
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(data, dict) or not set(re.findall(r"\bkvm-\d+\b", text)) <= hosts:
        return None
    return "".join(line for line in text.splitlines(True) if not _SCHEMA_RE.match(line.rstrip()))


def _example_host_labels() -> dict[str, dict[str, str]]:
    try:
        data = yaml.safe_load((EXAMPLE_CLUSTER_STATE / "cluster.yaml").read_text())
        hosts = data["spec"]["hosts"]
        return {
            str(h["name"]): {str(k): str(v) for k, v in (h.get("labels") or {}).items()}
            for h in hosts
        }
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return {}


def lab_policy_text(text: str) -> str:
    """The policy document ``text`` with ``LAB_POLICY_OVERRIDES`` set in its ``spec``.

    Lines are edited in place so the example's comments stay; a key the text lacks is added
    right under ``spec:``.
    """
    lines = text.splitlines()
    spec_at = next((i for i, line in enumerate(lines) if re.match(r"^spec:\s*(#.*)?$", line)), None)
    if spec_at is None:
        data = yaml.safe_load(text) if text.strip() else {}
        data = data if isinstance(data, dict) else {}
        spec = data.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.update(LAB_POLICY_OVERRIDES)
        return yaml.safe_dump(data, sort_keys=False)
    indent = "  "
    for line in lines[spec_at + 1 :]:
        match = re.match(r"^(\s+)\S", line)
        if match and not line.lstrip().startswith("#"):
            indent = match.group(1)
            break
    for key, value in LAB_POLICY_OVERRIDES.items():
        pattern = re.compile(rf"^{indent}{re.escape(key)}:(\s*)([^#]*?)(\s*#.*)?$")
        for i in range(spec_at + 1, len(lines)):
            if lines[i] and not lines[i].startswith((" ", "#")):
                break  # left spec
            match = pattern.match(lines[i])
            if match:
                comment = (match.group(3) or "").strip()
                new = f"{indent}{key}: {value}"
                column = len(lines[i]) - len(comment)
                lines[i] = f"{new}{' ' * max(1, column - len(new))}{comment}" if comment else new
                break
        else:
            lines.insert(spec_at + 1, f"{indent}{key}: {value}")
    return "\n".join(lines) + "\n"


def cluster_yaml(lab: Lab) -> str:
    """The lab's ``cluster.yaml`` (without its header comments)."""
    example_labels = _example_host_labels()
    lines = [
        "apiVersion: placement/v1alpha1",
        "kind: Cluster",
        "metadata: {name: lab}",
        "spec:",
        "  defaults:",
        "    reserve: {memory: 256MiB, cpus: 0}   # the lab's hosts are small",
        "    migration: {maxOutbound: 2, maxInbound: 2, uri: 'tcp://{address}'}",
        "  hosts:",
    ]
    for host in lab.hosts:
        labels = {"rack": host.rack, **example_labels.get(host.name, {})}
        flow = ", ".join(f"{k}: {json.dumps(v)}" for k, v in labels.items())
        lines += [
            f"    - name: {host.name}",
            f"      uri: '{host.uri}'",
            "      address: 127.0.0.1",
            f"      labels: {{{flow}}}",
        ]
    return "\n".join(lines) + "\n"


_MINIMAL: Final[dict[str, str]] = {
    "policy.yaml": "apiVersion: placement/v1alpha1\nkind: BalancePolicy\n"
    "metadata: {name: lab}\nspec:\n  mode: propose\n",
    "rules.yaml": "apiVersion: placement/v1alpha1\nkind: PlacementRules\n"
    "metadata: {name: lab}\nspec:\n  rules: []\n",
    "placement.yaml": "apiVersion: placement/v1alpha1\nkind: Placement\n"
    "metadata: {name: lab}\nspec:\n  vms: {}\n",
}


def _write_cluster_state(lab: Lab) -> None:
    dest = lab.cluster_dir
    dest.mkdir(parents=True, exist_ok=True)
    note = "Written by `reconciler lab up`"
    (dest / "cluster.yaml").write_text(
        _header(
            EXAMPLE_CLUSTER_STATE / "cluster.yaml",
            "cluster",
            dest,
            f"{note}: the hosts of the local lab in {lab.dir}.",
        )
        + cluster_yaml(lab)
    )
    names = {h.name for h in lab.hosts}
    for name, kind in (
        ("policy.yaml", "policy"),
        ("rules.yaml", "rules"),
        ("placement.yaml", "placement"),
    ):
        text = _example_text(name, names)
        source = f"a copy of the example's {name}" if text else f"a minimal {name}"
        if text is None:
            text = _MINIMAL[name]
        if name == "policy.yaml":
            text = lab_policy_text(text)
            source += (
                ",\nwith basis allocated, holdRounds 1 and minUptime 0s so the lab's imbalance "
                "shows at once"
            )
        (dest / name).write_text(
            _header(EXAMPLE_CLUSTER_STATE / name, kind, dest, f"{note}: {source}.") + text
        )


# --- stop -----------------------------------------------------------------------------------


def stop_lab(directory: Path = DEFAULT_DIR) -> Lab:
    """Stop the lab in ``directory``: its VMs, daemons and QEMUs (by pid file), then its folder.

    Only processes the lab's pid files name, and whose command line confirms it, are stopped.
    """
    directory = directory.resolve()
    lab = read_lab(directory)
    if lab is None:
        raise LabError(f"no lab in {directory}", hint="start one with `reconciler lab up`")
    if lab.driver == "qemu":
        _parallel(lab.hosts, _stop_host)
    shutil.rmtree(directory)
    return lab


def _stop_host(host: LabHost) -> None:
    hdir = Path(host.path)
    daemon = _pid(hdir / "libvirtd.pid")
    if _ours(daemon, str(hdir)):
        assert daemon is not None
        with contextlib.suppress(LabError):
            _remove_domains(host.uri)
        _terminate(daemon, str(hdir))
    for pidfile in (hdir / "run" / "qemu").glob("*.pid"):
        qemu = _pid(pidfile)
        if qemu is not None:
            _terminate(qemu, "qemu", timeout=3.0)
    reaper = _pid(hdir / "reaper.pid")
    if reaper is not None and not _wait_gone(reaper, 2.0):
        _terminate(reaper, "lab_host.py")


def _remove_domains(uri: str) -> None:
    assert libvirt is not None
    conn = _open(uri)
    try:
        for dom in conn.listAllDomains(0):
            with contextlib.suppress(libvirt.libvirtError):
                if dom.isActive():
                    dom.destroy()
            with contextlib.suppress(libvirt.libvirtError):
                dom.undefine()
    finally:
        conn.close()


# --- status ---------------------------------------------------------------------------------


def lab_status(directory: Path = DEFAULT_DIR) -> LabStatus:
    """Each host of the lab in ``directory`` (up or down) and the VMs the running ones have."""
    directory = directory.resolve()
    lab = read_lab(directory)
    if lab is None:
        raise LabError(f"no lab in {directory}", hint="start one with `reconciler lab up`")
    hosts: list[HostStatus] = []
    vms: list[VmStatus] = []
    for host in lab.hosts:
        if lab.driver == "qemu":
            pid = _pid(Path(host.path) / "libvirtd.pid")
            up = _host_running(host)
        else:
            pid, up = None, Path(host.path).is_file()
        error = None
        if up and libvirt is not None:
            try:
                vms += _host_vms(host)
            except LabError as err:
                up, error = False, err.message
        hosts.append(HostStatus(host.name, host.uri, up, pid if up else None, error))
    return LabStatus(dir=str(directory), driver=lab.driver, hosts=hosts, vms=vms)


_STATE_NAMES = ("nostate", "running", "blocked", "paused", "shutdown", "shutoff", "crashed")


def _host_vms(host: LabHost) -> list[VmStatus]:
    assert libvirt is not None
    conn = _open(host.uri)
    try:
        out = []
        for dom in conn.listAllDomains(0):
            try:
                state = dom.state()[0]
            except libvirt.libvirtError:
                continue
            name = _STATE_NAMES[state] if 0 <= state < len(_STATE_NAMES) else "pmsuspended"
            out.append(VmStatus(dom.name(), host.name, name))
        return sorted(out, key=lambda v: v.name)
    finally:
        conn.close()


def lab_processes(directory: Path) -> list[int]:
    """Pids of the lab's processes still alive (daemons, reapers, QEMUs), from its pid files."""
    found = set()
    for pidfile in directory.resolve().glob("hosts/*/**/*.pid"):
        pid = _pid(pidfile)
        if pid is not None and _alive(pid):
            found.add(pid)
    return sorted(found)


# --- generated test-driver clusters ---------------------------------------------------------


def write_node_files(
    directory: Path, hosts: int, vms_per_host: int, *, name: str = "generated"
) -> Cluster:
    """A cluster of ``hosts`` libvirt test-driver hosts with ``vms_per_host`` VMs each.

    Writes one node file per host into ``directory`` and returns the Cluster that points at
    them. Host ``i`` is ``node-<i>``; its VMs are ``node-<i>-vm-<j>`` with label ``app``
    (``app-<j mod 5>``) and 64-256 MiB of memory (``64 * (1 + j mod 4)`` MiB).
    """
    directory.mkdir(parents=True, exist_ok=True)
    template = _asset("test-domain.xml.in")
    host_models = []
    for i in range(hosts):
        host = f"node-{i:03d}"
        domains = "\n".join(
            template.substitute(
                name=f"{host}-vm-{j:02d}",
                uuid=str(uuid.uuid5(_UUID_NS, f"generated/{host}/{j}")),
                metadata=_indent(render_metadata({"app": f"app-{j % 5}"}), 6),
                memory_mib=64 * (1 + j % 4),
                vcpus=1 + j % 2,
            )
            for j in range(vms_per_host)
        )
        path = directory / f"{host}.xml"
        path.write_text(node_xml(domains, cpus=16, memory_mib=65536))
        host_models.append(Host(name=host, uri=f"test://{path.resolve()}"))
    return Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=Metadata(name=name),
        spec=ClusterSpec(hosts=host_models),
    )
