"""Workload guests without the lab: the workload file, the guest's /init, its initrd and kernel."""

from __future__ import annotations

import gzip
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.adapters.lab import guest_image, start_lab, workload
from reconciler.adapters.lab.layout import lab_layout
from reconciler.adapters.lab.workload import Ramp, Spike, Workload, read_workloads
from reconciler.cli import main
from reconciler.errors import ConfigError, LabError

VMS = [replace(vm, memory_mib=workload.guest_memory(vm)) for vm in lab_layout(3, 8)]


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(text)
    return path


def test_defaults_patterns_and_durations(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "defaults: {cpu: 5, wss: 24}\n"
        "vms:\n"
        "  web-1: {cpu: 60, dirty: 20}\n"
        "  app-1: {spike: {cpu: 100, for: 5s, every: 1m}}\n"
        "  erp: {cpu: 10, ramp: {to: 80, over: 2m}}\n",
    )
    loads = read_workloads(path, VMS)
    assert set(loads) == {vm.name for vm in VMS}
    assert loads["web-1"] == Workload(cpu=60, dirty=20, wss=24)
    assert loads["web-2"] == Workload(cpu=5, wss=24)
    assert loads["app-1"] == Workload(cpu=5, wss=24, spike=Spike(cpu=100, seconds=5, every=60))
    assert loads["erp"] == Workload(cpu=10, wss=24, ramp=Ramp(to=80, seconds=120))
    assert loads["app-1"].describe() == "cpu 5%, spike to 100% for 5s every 60s"


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("vms: {web-1: {cpu: 120}}", "vms.web-1.cpu", "0-100"),
        ("vms: {web-1: {cpu: 50%}}", "vms.web-1.cpu", "0-100"),
        ("vms: {web-1: {cpus: 50}}", "vms.web-1", "unknown key 'cpus'"),
        ("vms: {web-9: {cpu: 50}}", "vms.web-9", "no VM 'web-9'"),
        ("vms: {web-1: {dirty: -1}}", "vms.web-1.dirty", "MiB/s"),
        ("vms: {web-1: {wss: 200}}", "vms.web-1.wss", "does not fit in web-1's 128 MiB"),
        ("defaults: {wss: 100}", "defaults.wss", "at most 56"),
        ("vms: {web-1: {spike: {cpu: 100, every: 60}}}", "vms.web-1.spike", "needs for"),
        ("vms: {web-1: {spike: {cpu: 100, for: 9s, every: 5s}}}", "spike", "longer than every"),
        ("vms: {web-1: {ramp: {to: 80, over: soon}}}", "vms.web-1.ramp.over", "duration"),
        (
            "vms: {web-1: {spike: {cpu: 9, for: 1, every: 2}, ramp: {to: 8, over: 9}}}",
            "vms.web-1",
            "both spike and ramp",
        ),
        ("hosts: {}", "workload.yaml", "unknown key 'hosts'"),
        ("vms: [web-1]", "vms", "must map VM names"),
    ],
)
def test_a_wrong_file_says_where_and_how(tmp_path: Path, text: str, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_workloads(_file(tmp_path, text), VMS)
    assert where in info.value.message
    assert what in info.value.message
    assert info.value.hint


def test_the_labs_own_workload_makes_the_first_host_hot() -> None:
    vms = VMS
    loads = read_workloads(None, vms)
    cores = {h: 0.0 for h in ("kvm-01", "kvm-02", "kvm-03")}
    for vm in vms:
        cores[vm.host] += loads[vm.name].cpu / 100 * vm.vcpus
    assert cores["kvm-01"] > 4 * max(cores["kvm-02"], cores["kvm-03"])
    assert any(w.dirty for w in loads.values())
    assert {w.pattern for w in loads.values()} == {"steady", "spike", "ramp"}
    # a smaller lab takes the lab's own file too: it names VMs such a lab lacks
    assert set(read_workloads(None, vms[:3])) == {"web-1", "web-2", "web-3"}


_percent = st.integers(0, 100)
_seconds = st.integers(1, 86400)
_workloads = st.builds(
    Workload,
    cpu=_percent,
    dirty=st.integers(0, 100000),
    wss=st.integers(1, 4096),
    spike=st.none()
    | st.builds(Spike, cpu=_percent, seconds=st.integers(0, 5), every=st.integers(5, 86400)),
    ramp=st.none(),
) | st.builds(
    Workload,
    cpu=_percent,
    dirty=st.integers(0, 100000),
    wss=st.integers(1, 4096),
    ramp=st.builds(Ramp, to=_percent, seconds=_seconds),
)


@given(_workloads)
def test_settings_and_json_give_the_same_workload_back(load: Workload) -> None:
    said = {k: str(v) for k, v in load.settings().items()}
    assert workload.from_settings(said) == load
    assert workload.from_json(load.to_json()) == load


@given(_workloads)
def test_the_kernel_leaves_the_guests_settings_alone(load: Workload) -> None:
    words = workload.cmdline(load).split()
    assert "console=ttyS0" in words
    ours = [w for w in words if w.startswith("workload.")]
    assert len(ours) == len(load.settings())
    # a parameter with a dot and no module of that name is neither the kernel's nor init's
    assert all("." in w.split("=")[0] for w in ours)


# --- the guest's /init, run here as an ordinary process ---------------------------------------


@pytest.fixture(scope="module")
def init_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (make setup installs it)")
    folder = tmp_path_factory.mktemp("init")
    source = folder / "init.c"
    source.write_bytes(guest_image.init_source())
    binary = folder / "init"
    build = subprocess.run(
        ["gcc", "-static", "-O2", "-pthread", "-Wall", "-Wextra", "-Werror", "-o", binary, source],
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0 and "cannot find -lc" in build.stderr:
        pytest.skip("no static C library (libc6-dev; make setup installs it)")
    assert build.returncode == 0, build.stderr
    return binary


class _Init:
    """The guest's /init on one CPU of this machine, talked to through pipes as its console."""

    def __init__(self, binary: Path) -> None:
        cpu = str(min(os.sched_getaffinity(0)))
        self.process = subprocess.Popen(
            ["taskset", "--cpu-list", cpu, binary],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the workers it forks end with it
        )
        self.buffer = b""
        assert self.line(b"workload ready").startswith("workload ready: 1 vCPUs")

    def line(self, mark: bytes, timeout: float = 10.0) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\n", 1)
                if mark in raw:
                    return raw.decode()
            left = deadline - time.monotonic()
            assert left > 0, f"no line with {mark!r}"
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 4096)
                assert chunk, "the program ended"
                self.buffer += chunk

    def say(self, text: str) -> str:
        assert self.process.stdin is not None
        request = text.split()[1]
        self.process.stdin.write(text.encode() + b"\n")
        self.process.stdin.flush()
        return self.line(f" {request}".encode()).split(f" {request}", 1)[1].strip(" :")

    def close(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)  # it and the worker it forked per CPU
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def init(init_binary: Path) -> Iterator[_Init]:
    program = _Init(init_binary)
    yield program
    program.close()


def test_init_answers_set_and_get(init: _Init) -> None:
    assert init.say("get id=1") == "cpu=0 dirty=0 wss=16 pattern=steady busy=0 written=0"
    assert init.say("set id=2 cpu=30 dirty=4").startswith(
        "cpu=30 dirty=4 wss=16 pattern=steady busy=30 written="
    )
    assert init.say("set id=3 wss=8").startswith("cpu=30 dirty=4 wss=8 pattern=steady busy=30 ")
    assert init.say("get id=4").startswith("cpu=30 dirty=4 wss=8 ")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("set id=5 cpu=101", "cpu must be 0-100, not 101"),
        ("set id=5 cpu=ten", "cpu must be 0-100, not ten"),
        ("set id=5 nice=3", "unknown setting nice"),
        ("set id=5 pattern=wave", "pattern must be steady, spike or ramp, not wave"),
        ("set id=5 on=90", "on (90 s) must not exceed every (60 s)"),
        ("set id=5 wss=900000", "wss 900000 MiB does not fit"),
        ("go id=5", "say set or get, not go"),
    ],
)
def test_init_refuses_what_it_cannot_do_and_keeps_its_settings(
    init: _Init, line: str, why: str
) -> None:
    assert init.say(line).startswith(why)
    assert init.say("get id=6") == "cpu=0 dirty=0 wss=16 pattern=steady busy=0 written=0"


def test_init_follows_its_patterns(init: _Init) -> None:
    # a spike of one second every two: the share asked for changes with the time
    assert " busy=90 " in init.say("set id=1 cpu=10 pattern=spike peak=90 on=1 every=2")
    time.sleep(1.2)
    assert " busy=10 " in init.say("get id=2")
    time.sleep(1.0)
    assert " busy=90 " in init.say("get id=3")
    # a ramp from 0 to 100 over 2 s is about half way after one, and held at the end
    init.say("set id=4 cpu=0 pattern=ramp to=100 over=2")
    time.sleep(1.0)
    halfway = int(init.say("get id=5").split("busy=")[1].split()[0])
    assert 30 <= halfway <= 80
    time.sleep(1.3)
    assert " busy=100 " in init.say("get id=6")


def test_init_writes_at_its_rate(init: _Init) -> None:
    assert init.say("get id=1").endswith(" written=0")
    began = time.monotonic()
    init.say("set id=2 dirty=40 wss=8")
    time.sleep(1.0)
    answer = init.say("get id=3")
    written = int(answer.split("written=")[1])
    assert 20 <= written <= 40 * (time.monotonic() - began) + 1, answer


# --- the initrd and the kernel ------------------------------------------------------------------


def test_initrd_is_a_newc_archive_cpio_reads(tmp_path: Path) -> None:
    if shutil.which("cpio") is None:
        pytest.skip("cpio is not installed (make setup installs it)")
    image = guest_image._initrd(b"#!/bin/true\n" * 3)
    assert image == guest_image._initrd(b"#!/bin/true\n" * 3), "the same archive every time"
    listing = subprocess.run(
        ["cpio", "-itv", "--quiet"],
        input=gzip.decompress(image),
        capture_output=True,
        check=True,
    ).stdout.decode()
    entries = {line.split()[-1]: line.split()[0] for line in listing.splitlines()}
    assert entries == {
        "dev": "drwxr-xr-x",
        "dev/console": "crw-------",
        "proc": "drwxr-xr-x",
        "init": "-rwxr-xr-x",
    }
    assert "5,   1" in next(line for line in listing.splitlines() if "console" in line)
    subprocess.run(
        ["cpio", "-id", "--quiet", "init"],
        input=gzip.decompress(image),
        cwd=tmp_path,
        check=True,
    )
    assert (tmp_path / "init").read_bytes() == b"#!/bin/true\n" * 3


def test_kernel_package_is_read_from_apt_cache() -> None:
    out = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-56-cloud-amd64\n"
    assert guest_image.kernel_package_name(out) == "linux-image-6.1.0-56-cloud-amd64"
    with pytest.raises(LabError, match="apt-get update"):
        guest_image.kernel_package_name("linux-image-cloud-amd64\n")


def test_a_missing_compiler_says_which_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "vmlinuz-x").write_bytes(b"kernel")
    (tmp_path / "guest.json").write_text('{"kernel": "vmlinuz-x", "kernel_package": "k 1"}')
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "gcc" else real(name))
    with pytest.raises(LabError, match="needs gcc") as info:
        guest_image.ensure_guest(tmp_path)
    assert "libc6-dev" in (info.value.hint or "")
    assert guest_image.cached_guest(tmp_path) is None


def test_a_cached_guest_is_not_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, init_binary: Path
) -> None:
    monkeypatch.setattr(guest_image, "_compile_init", lambda _: init_binary.read_bytes())
    (tmp_path / "vmlinuz-x").write_bytes(b"kernel")
    (tmp_path / "guest.json").write_text('{"kernel": "vmlinuz-x", "kernel_package": "k 1"}')
    made = guest_image.ensure_guest(tmp_path)
    assert made.built == ("initrd",)
    assert made.kernel == tmp_path / "vmlinuz-x"
    again = guest_image.ensure_guest(tmp_path)
    assert again.built == ()
    assert again.initrd == made.initrd
    assert guest_image.cached_guest(tmp_path) == again


def test_lab_workload_needs_the_qemu_driver(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="test driver"):
        start_lab(tmp_path / "lab", driver="test", workload=True)
    assert not (tmp_path / "lab").exists()


def test_lab_load_on_firmware_vms_says_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(directory)]) == 0
    try:
        assert main(["lab", "load", "web-1", "--cpu", "80", "--dir", str(directory)]) == 1
        err = capsys.readouterr().err
        assert "firmware VMs" in err
        assert "--workload" in err
    finally:
        main(["lab", "down", "--dir", str(directory)])


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--cpu", "101"], "not a whole percentage"),
        (["--dirty", "-3"], "not a whole number of MiB"),
        (["--spike", "100,5s"], "CPU,FOR,EVERY"),
        (["--spike", "100,9s,5s"], "FOR is longer than EVERY"),
        (["--ramp", "80,soon"], "duration"),
        (["--ramp", "80,1m", "--steady"], "not allowed with"),
    ],
)
def test_lab_load_refuses_bad_options(
    argv: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lab", "load", "web-1", *argv]) == 2  # argparse's usage error
    assert why in capsys.readouterr().err
