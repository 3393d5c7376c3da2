"""The workload guest's kernel and initrd, made from Debian packages and the project's source.

A workload guest boots Debian's cloud kernel straight from its file (direct kernel boot, no
disk) with an initrd whose only program is ``/init``, compiled from ``assets/workload-init.c``
(see that file for what it does and how it is told). ``ensure_guest`` makes both once and keeps
them in a cache folder:

- the kernel: ``apt-get download`` of the package ``linux-image-cloud-amd64`` depends on (the
  versioned ``linux-image-<version>-cloud-amd64``), whose ``/boot/vmlinuz-*`` is taken out with
  ``dpkg-deb`` without installing anything;
- ``/init``: ``gcc -static`` (Debian's ``gcc`` and ``libc6-dev``);
- the initrd: a gzipped cpio archive in the kernel's ``newc`` format, written here, holding
  ``/init``, ``/proc`` and the ``/dev/console`` node the kernel gives process 1 as its console.

Nothing else is downloaded. The cache is ``$RECONCILER_LAB_GUEST_CACHE``, else
``$XDG_CACHE_HOME/reconciler/lab-guest``, else ``~/.cache/reconciler/lab-guest``. A kernel once
fetched is kept until ``rebuild``; ``/init`` and the initrd are made again when the source
changes. Where a part cannot be made, ``LabError`` says which and how to fix it.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from reconciler.adapters.lab.layout import asset_bytes
from reconciler.errors import LabError

KERNEL_PACKAGE: Final = "linux-image-cloud-amd64"
"""Debian's metapackage of the current cloud kernel; the kernel is the package it depends on."""
INIT_SOURCE: Final = "workload-init.c"
MANIFEST: Final = "guest.json"
_DOWNLOAD_TIMEOUT: Final = 600.0
_TOOL_TIMEOUT: Final = 120.0
_LOCK_TIMEOUT: Final = 900.0


@dataclass(frozen=True)
class GuestImage:
    """The files a workload guest boots from, and where they came from."""

    kernel: Path
    initrd: Path
    kernel_package: str
    """``name version`` of the Debian package the kernel was taken from."""
    built: tuple[str, ...] = ()
    """What ``ensure_guest`` had to make this time (``kernel``, ``initrd``); empty when cached."""


def cache_dir() -> Path:
    """Where the guest's files are kept (see the module's docstring)."""
    forced = os.environ.get("RECONCILER_LAB_GUEST_CACHE")
    if forced:
        return Path(forced)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reconciler" / "lab-guest"


def init_source() -> bytes:
    return asset_bytes(INIT_SOURCE)


def source_digest() -> str:
    """Names the initrd built from the current ``/init`` source."""
    return hashlib.sha256(init_source()).hexdigest()[:16]


def ensure_guest(
    cache: Path | None = None,
    *,
    rebuild: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> GuestImage:
    """The guest's kernel and initrd, made where missing (or all again with ``rebuild``).

    ``say`` hears each step that takes time. Two labs starting at once build once: the cache
    is locked while it is checked and filled.
    """
    folder = (cache or cache_dir()).resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LabError(
            f"cannot create the workload guest cache {folder}: {err.strerror}",
            hint="set RECONCILER_LAB_GUEST_CACHE to a folder you can write",
        ) from err
    with _locked(folder / ".lock"):
        manifest = {} if rebuild else _read_manifest(folder)
        built: list[str] = []
        kernel = folder / str(manifest.get("kernel", "-"))
        package = str(manifest.get("kernel_package", ""))
        if not kernel.is_file() or not package:
            say(f"fetching the guest kernel ({KERNEL_PACKAGE}, a Debian package)")
            kernel, package = _fetch_kernel(folder)
            built.append("kernel")
        digest = source_digest()
        initrd = folder / f"initrd-{digest}.gz"
        if rebuild or not initrd.is_file():
            say("compiling the guest's /init (gcc -static) and packing its initrd")
            _write_atomically(initrd, _initrd(_compile_init(folder)))
            built.append("initrd")
        for old in folder.glob("initrd-*.gz"):
            if old != initrd:
                old.unlink(missing_ok=True)
        _write_atomically(
            folder / MANIFEST,
            json.dumps(
                {"kernel": kernel.name, "kernel_package": package, "initrd": initrd.name},
                indent=2,
            ).encode()
            + b"\n",
        )
    return GuestImage(kernel=kernel, initrd=initrd, kernel_package=package, built=tuple(built))


def cached_guest(cache: Path | None = None) -> GuestImage | None:
    """The guest as cached now, or None when a part of it is missing or out of date."""
    folder = (cache or cache_dir()).resolve()
    manifest = _read_manifest(folder)
    kernel = folder / str(manifest.get("kernel", "-"))
    initrd = folder / f"initrd-{source_digest()}.gz"
    package = str(manifest.get("kernel_package", ""))
    if kernel.is_file() and initrd.is_file() and package:
        return GuestImage(kernel=kernel, initrd=initrd, kernel_package=package)
    return None


def _read_manifest(folder: Path) -> dict[str, object]:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The cache to this process alone; LabError when another holds it too long."""
    deadline = time.monotonic() + _LOCK_TIMEOUT
    with open(path, "a+b") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(
                        f"another process has held the workload guest cache {path.parent} "
                        f"for {_LOCK_TIMEOUT:.0f}s",
                        hint="let it finish, or remove the cache folder",
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _run(argv: list[str], *, cwd: Path | None = None, timeout: float, what: str) -> str:
    """Run ``argv``; its standard output, or LabError saying ``what`` failed and why."""
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as err:
        raise LabError(f"{what}: {argv[0]} is not installed") from err
    except subprocess.TimeoutExpired as err:
        raise LabError(f"{what}: {argv[0]} did not finish within {timeout:.0f}s") from err
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()[-6:]
        raise LabError(f"{what}: {' '.join(argv[:3])} failed: " + "\n  ".join(["", *lines]))
    return done.stdout


def _tool(name: str, package: str, why: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise LabError(
            f"the workload guest needs {name} to {why}, which is not installed",
            hint=f"apt-get install --no-install-recommends {package} (make setup does)",
        )
    return found


def kernel_package_name(depends_output: str) -> str:
    """The versioned kernel package in ``apt-cache depends linux-image-cloud-amd64``'s output."""
    found = re.findall(r"Depends:\s*(linux-image-\S+-cloud-amd64)\b", depends_output)
    if not found:
        raise LabError(
            f"{KERNEL_PACKAGE} depends on no cloud kernel package here",
            hint="the workload guest needs Debian's package lists: run apt-get update",
        )
    return str(found[0])


def _fetch_kernel(folder: Path) -> tuple[Path, str]:
    apt_cache = _tool("apt-cache", "apt", "find the kernel package")
    apt_get = _tool("apt-get", "apt", "download the kernel package")
    dpkg_deb = _tool("dpkg-deb", "dpkg", "unpack the kernel package")
    depends = _run(
        [apt_cache, "depends", "--important", KERNEL_PACKAGE],
        timeout=_TOOL_TIMEOUT,
        what=f"finding the kernel of {KERNEL_PACKAGE}",
    )
    package = kernel_package_name(depends)
    with tempfile.TemporaryDirectory(prefix="guest-kernel-", dir=folder) as work:
        os.chmod(work, 0o755)  # apt's download user reads into it
        try:
            _run(
                [apt_get, "download", "-q", package],
                cwd=Path(work),
                timeout=_DOWNLOAD_TIMEOUT,
                what=f"downloading {package}",
            )
        except LabError as err:
            raise LabError(
                err.message,
                hint="the workload guest's kernel is a Debian package: check that this machine "
                "reaches its Debian mirror (apt-get update) and that the package is there",
            ) from err
        debs = sorted(Path(work).glob("*.deb"))
        if not debs:
            raise LabError(f"apt-get download {package} left no .deb file")
        version = _run(
            [dpkg_deb, "--field", str(debs[0]), "Version"],
            timeout=_TOOL_TIMEOUT,
            what=f"reading {debs[0].name}",
        ).strip()
        kernel = _extract_kernel(dpkg_deb, debs[0], folder)
    return kernel, f"{package} {version}"


def _extract_kernel(dpkg_deb: str, deb: Path, folder: Path) -> Path:
    """Stream the package's file tree through tarfile and keep only ``boot/vmlinuz-*``."""
    with subprocess.Popen(
        [dpkg_deb, "--fsys-tarfile", str(deb)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as unpack:
        assert unpack.stdout is not None
        kernel: Path | None = None
        watchdog = threading.Timer(_TOOL_TIMEOUT, unpack.kill)  # ends a read that would hang
        watchdog.start()
        try:
            with tarfile.open(fileobj=unpack.stdout, mode="r|") as tree:
                for member in tree:
                    name = member.name.removeprefix("./")
                    if member.isfile() and re.fullmatch(r"boot/vmlinuz-[^/]+", name):
                        source = tree.extractfile(member)
                        assert source is not None
                        kernel = folder / Path(name).name
                        _write_atomically(kernel, source.read())
                        break
        except tarfile.TarError as err:
            raise LabError(f"{deb.name} is not a readable Debian package: {err}") from err
        finally:
            watchdog.cancel()
            unpack.kill()
            unpack.wait(timeout=_TOOL_TIMEOUT)
    if kernel is None:
        raise LabError(f"{deb.name} holds no /boot/vmlinuz-*: not a kernel package")
    return kernel


def _compile_init(folder: Path) -> bytes:
    gcc = _tool("gcc", "gcc libc6-dev", "compile the guest's /init")
    with tempfile.TemporaryDirectory(prefix="guest-init-", dir=folder) as work:
        source = Path(work) / INIT_SOURCE
        source.write_bytes(init_source())
        binary = Path(work) / "init"
        try:
            _run(
                [gcc, "-static", "-O2", "-pthread", "-o", str(binary), str(source)],
                timeout=_TOOL_TIMEOUT,
                what="compiling the guest's /init",
            )
        except LabError as err:
            raise LabError(
                err.message,
                hint="a static program needs the C library's static files: apt-get install "
                "--no-install-recommends libc6-dev",
            ) from err
        return binary.read_bytes()


@dataclass(frozen=True)
class _Entry:
    name: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)


def newc_archive(entries: list[_Entry]) -> bytes:
    """A cpio archive in the ``newc`` format the kernel unpacks as its initramfs.

    Each entry is a 110-byte header of 13 hexadecimal fields, its name (NUL-terminated) and its
    data, each padded to 4 bytes; ``TRAILER!!!`` ends it. Owner root, time 0: the same entries
    always give the same bytes.
    """
    out = bytearray()

    def pad() -> None:
        out.extend(b"\0" * (-len(out) % 4))

    for inode, entry in enumerate([*entries, _Entry("TRAILER!!!", 0)], start=1):
        name = entry.name.encode() + b"\0"
        is_trailer = entry.name == "TRAILER!!!"
        fields = (
            0 if is_trailer else inode,
            entry.mode,
            0,  # uid
            0,  # gid
            2 if stat.S_ISDIR(entry.mode) else 1,  # nlink
            0,  # mtime
            len(entry.data),
            0,  # dev major
            0,  # dev minor
            entry.rdev[0],
            entry.rdev[1],
            len(name),
            0,  # check
        )
        out.extend(b"070701" + b"".join(b"%08X" % field for field in fields))
        out.extend(name)
        pad()
        out.extend(entry.data)
        pad()
    return bytes(out)


def _initrd(init: bytes) -> bytes:
    archive = newc_archive(
        [
            _Entry("dev", stat.S_IFDIR | 0o755),
            _Entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)),
            _Entry("proc", stat.S_IFDIR | 0o755),
            _Entry("init", stat.S_IFREG | 0o755, init),
        ]
    )
    return gzip.compress(archive, mtime=0)
