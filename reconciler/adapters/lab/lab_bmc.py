"""One lab host's BMC: OpenStack's Redfish emulator (sushy-tools) with a systems driver of ours.

Started by ``bmc.start_bmcs`` as ``python -I lab_bmc.py SETTINGS`` (a JSON file: the lab's
folder, the host's name and UUID, the emulator's config file). The emulator serves the
Redfish API (service root, ``Systems``, ``ComputerSystem.Reset``, basic authentication from
an htpasswd file); its one system is the lab host, whose power is its libvirt daemon:

- ``PowerState`` is ``On`` while the daemon runs or the host boots, ``Off`` otherwise;
- ``On`` boots the host: after the boot delay (``boot-seconds`` in the host's ``bmc/``
  folder, read at each reset) its daemon starts again, as a rebooted machine's would: the
  domains defined, none running;
- ``GracefulShutdown`` and ``ForceOff`` power the host off (after ``shutdown-seconds``, for
  the first): every QEMU of the host ends (a VM still there is lost, as on a real machine),
  then the daemon; the definitions stay.

A fault can be set for tests and demonstrations in ``bmc/fault`` (``bmc.set_bmc_fault``),
read at every request: ``refuse`` (resets answer an error), ``hang`` (every request of the
system waits ``HANG_SECONDS`` before it answers), ``lie`` (resets do nothing, and the power
state read is the last one asked for).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sushy_tools import error
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems import fakedriver

from reconciler.adapters.lab import faults, qemu
from reconciler.adapters.lab.state import require_lab

HANG_SECONDS = 600.0
"""How long a hung BMC keeps a request (the caller's timeout ends it first)."""

_Base: Any = fakedriver.FakeDriver


class LabSystem(_Base):  # type: ignore[misc]
    """The lab host as a Redfish ComputerSystem (sushy-tools' fake driver, our power)."""

    settings: dict[str, str] = {}
    _lock = threading.Lock()
    _asked: dict[str, str] = {}
    _working: dict[str, threading.Thread] = {}

    @classmethod
    def folder(cls) -> Path:
        return Path(cls.settings["bmc_dir"])

    @classmethod
    def _setting(cls, name: str, default: str) -> str:
        try:
            return (cls.folder() / name).read_text().strip() or default
        except FileNotFoundError:
            return default

    @classmethod
    def _fault(cls) -> str:
        fault = cls._setting("fault", "none")
        if fault == "hang":
            time.sleep(HANG_SECONDS)
        return fault

    @classmethod
    def _host(cls) -> Any:
        return require_lab(Path(cls.settings["lab_dir"])).host(cls.settings["host"])

    def get_power_state(self, identity: str) -> str:
        self._get(identity)  # NotFound for a system this BMC does not have
        fault = self._fault()
        with self._lock:
            if fault == "lie" and identity in self._asked:
                return self._asked[identity]
            booting = (self.folder() / "booting").exists()
            return "On" if booting or qemu.host_running(self._host()) else "Off"

    def set_power_state(self, identity: str, state: str) -> None:
        self._get(identity)
        fault = self._fault()
        if fault == "refuse":
            raise error.FishyError(f"the BMC refuses {state} (lab fault: refuse)")
        if "On" in state:
            wanted = "On"
        elif state in ("ForceOff", "GracefulShutdown"):
            wanted = "Off"
        else:
            raise error.NotSupportedError(f"Power state {state} is not supported")
        with self._lock:
            self._asked[identity] = wanted
            if fault == "lie":
                return
            busy = self._working.get(identity)
            if busy is not None and busy.is_alive():
                return  # a switch under way: as hardware, the second press does nothing
            running = qemu.host_running(self._host())
            if (wanted == "On") == running:
                return
            if wanted == "On":
                (self.folder() / "booting").write_text(f"{time.time()}\n")
                work = threading.Thread(target=self._boot, daemon=True)
            else:
                force = state == "ForceOff"
                work = threading.Thread(target=self._power_off, args=(force,), daemon=True)
            self._working[identity] = work
            work.start()

    @classmethod
    def _boot(cls) -> None:
        try:
            time.sleep(float(cls._setting("boot-seconds", "5")))
            faults.start_host(Path(cls.settings["lab_dir"]), cls.settings["host"])
        except Exception as err:  # a boot that fails leaves the host off, as hardware would
            print(f"boot of {cls.settings['host']} failed: {err}", file=sys.stderr, flush=True)
        finally:
            (cls.folder() / "booting").unlink(missing_ok=True)

    @classmethod
    def _power_off(cls, force: bool) -> None:
        try:
            if not force:
                time.sleep(float(cls._setting("shutdown-seconds", "1")))
            faults.power_off_host(Path(cls.settings["lab_dir"]), cls.settings["host"])
        except Exception as err:
            print(f"power-off of {cls.settings['host']} failed: {err}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    settings = json.loads(Path(argv[1]).read_text())
    LabSystem.settings = settings
    fakedriver.FakeDriver = LabSystem  # the emulator's fake driver is this lab host
    print(f"BMC of {settings['host']} on port {settings['port']}", flush=True)
    sys.argv = [argv[0], "--config", settings["config"]]
    return int(emulator.main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
