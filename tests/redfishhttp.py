"""A small Redfish service on loopback (DMTF DSP0266's resources as a ComputerSystem gives
them: ``/redfish/v1/Systems``, the system with its ``PowerState`` and its
``#ComputerSystem.Reset`` action) that can also answer as a broken or hostile BMC does.

``FakeRedfish.systems`` holds each system's ``PowerState`` and the reset types it allows
(``None``: it lists none); a reset it accepts sets the state at once. ``fault`` makes every
request answer otherwise: ``"status"`` with ``status`` and a Redfish error, ``"hang"`` accepts
and never answers, ``"trickle"`` sends a byte every 0.2 s, ``"garbage"`` answers 200 with what
is not JSON, ``"flood"`` answers without end, ``"redirect"`` answers 301. ``resets`` lists the
resets asked (path, ResetType); ``requests`` every request's method, path and Authorization.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ALL_RESETS = ["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart"]


@dataclass
class System:
    power: str = "On"
    allowed: list[str] | None = field(default_factory=lambda: list(ALL_RESETS))


class FakeRedfish(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.systems: dict[str, System] = {"1": System()}
        self.fault: str | None = None
        self.status = 500
        self.error_text = "Internal error"
        self.lasting = 30.0
        """No answer lasts longer than this (so a failing test ends)."""
        self.sent = 0
        self.resets: list[tuple[str, str]] = []
        self.requests: list[tuple[str, str, str]] = []
        self.stopped = threading.Event()
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.shutdown()
        self.server_close()


def _system(identity: str, system: System) -> dict[str, Any]:
    path = f"/redfish/v1/Systems/{identity}"
    action: dict[str, Any] = {"target": f"{path}/Actions/ComputerSystem.Reset"}
    if system.allowed is not None:
        action["ResetType@Redfish.AllowableValues"] = system.allowed
    return {
        "@odata.id": path,
        "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
        "Id": identity,
        "Name": f"system {identity}",
        "PowerState": system.power,
        "Actions": {"#ComputerSystem.Reset": action},
    }


def _error(message: str) -> dict[str, Any]:
    return {
        "error": {
            "code": "Base.1.8.GeneralError",
            "message": "A general error has occurred. See ExtendedInfo for more information.",
            "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.GeneralError", "Message": message}],
        }
    }


class _Handler(BaseHTTPRequestHandler):
    server: FakeRedfish
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def _answer(self, method: str) -> None:
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        server.requests.append((method, self.path, self.headers.get("Authorization", "")))
        fault = server.fault
        if fault == "hang":
            server.stopped.wait(server.lasting)
            self.close_connection = True
            return
        if fault == "trickle":
            self._trickle(b'{"@odata.id": "/redfish/v1/Systems", "Members": []}' * 100)
            return
        if fault == "flood":
            self._flood()
            return
        if fault == "garbage":
            self._send(200, b"<html><body>Welcome to the BMC</body></html>", "text/html")
            return
        if fault == "redirect":
            self._send(301, b"", extra={"Location": "https://elsewhere.invalid/redfish/v1"})
            return
        if fault == "status":
            self._json(server.status, _error(server.error_text))
            return
        self._resource(method, body)

    def _resource(self, method: str, body: bytes) -> None:
        systems = self.server.systems
        path = self.path.rstrip("/")
        if method == "GET" and path == "/redfish/v1/Systems":
            members = [{"@odata.id": f"/redfish/v1/Systems/{i}"} for i in systems]
            self._json(200, {
                "@odata.id": "/redfish/v1/Systems",
                "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
                "Members": members,
                "Members@odata.count": len(members),
            })  # fmt: skip
            return
        parts = path.split("/")
        identity = parts[4] if len(parts) > 4 and path.startswith("/redfish/v1/Systems/") else ""
        system = systems.get(identity)
        if system is None:
            self._json(404, _error(f"The resource at {path} was not found."))
            return
        if method == "GET" and len(parts) == 5:
            self._json(200, _system(identity, system))
            return
        if method == "POST" and parts[5:] == ["Actions", "ComputerSystem.Reset"]:
            kind = json.loads(body or b"{}").get("ResetType")
            if system.allowed is not None and kind not in system.allowed:
                self._json(400, _error(f"The value {kind} for ResetType is not allowed."))
                return
            self.server.resets.append((path, str(kind)))
            system.power = "On" if kind in ("On", "ForceOn") else "Off"
            self._send(204, b"")
            return
        self._json(405, _error(f"{method} is not allowed on {path}."))

    def _json(self, status: int, value: dict[str, Any]) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _send(
        self,
        status: int,
        data: bytes,
        kind: str = "application/json",
        extra: dict[str, str] | None = None,
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.server.sent += len(data)
        except OSError:
            self.close_connection = True

    def _trickle(self, data: bytes) -> None:
        ends = time.monotonic() + self.server.lasting
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for i in range(len(data)):
                if self.server.stopped.is_set() or time.monotonic() > ends:
                    break
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                self.server.sent += 1
                time.sleep(0.2)
        except OSError:
            pass
        self.close_connection = True

    def _flood(self) -> None:
        chunk = b'{"Members": [' + b'{"@odata.id": "/redfish/v1/Systems/x"},' * 1000
        ends = time.monotonic() + self.server.lasting
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            while not self.server.stopped.is_set() and time.monotonic() < ends:
                self.wfile.write(chunk)
                self.server.sent += len(chunk)
                if self.server.sent > 512 * 1024 * 1024:
                    break
        except OSError:
            pass
        self.close_connection = True


@contextmanager
def fake_redfish() -> Iterator[FakeRedfish]:
    server = FakeRedfish()
    server.start()
    try:
        yield server
    finally:
        server.stop()
