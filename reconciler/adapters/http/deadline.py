"""The end of one HTTP call (a BMC's, a Prometheus query), whatever the server does.

httpx's timeouts bound each connect, write and read, not a call: a server that sends a byte
every few seconds keeps a request alive for ever. ``Deadline`` sees every connection a call
opens (httpcore's ``trace`` extension) and, at ``seconds`` after it starts, shuts them down,
which ends any read, write or TLS handshake on them at once. Each is held as a duplicate of
its socket until :meth:`Deadline.stop`, so a shutdown never reaches a descriptor the system
gave to something else meanwhile. The one step it cannot cut is a name lookup before the
connection (the resolver of the C library): an address given as an IP address has none.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from typing import Any


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.passed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def start(self) -> None:
        """Start counting: at ``seconds`` from now the call's connections are shut."""
        self._timer.start()

    def __enter__(self) -> Deadline:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def extensions(self) -> dict[str, Any]:
        """What a request passes to httpx for its connections to be seen."""
        return {"trace": self.trace}

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            held = sock.dup()
            self._sockets.append(held)
            if self.passed:
                _shut(held)

    def _cut(self) -> None:
        with self._lock:
            self.passed = True
            for held in self._sockets:
                _shut(held)

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            for held in self._sockets:
                held.close()
            self._sockets.clear()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other end
        sock.shutdown(socket.SHUT_RDWR)
