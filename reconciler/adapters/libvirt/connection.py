"""Connections to hypervisors for the acting adapters: bounded opening, keepalive, error mapping.

``libvirt.open`` has no timeout of its own: a daemon that accepts the socket but never answers
(a hung host) blocks it forever. ``open_connection`` therefore opens in a short-lived thread
and stops waiting at a deadline; a thread left behind that way closes its connection itself
when libvirt finally returns. Once open, libvirt's keepalive (which needs the default event
loop, run here by one daemon thread for the whole process) fails every later call on a host
that stops answering, so no call on an open connection hangs for longer than the keepalive.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Final

import libvirt

from reconciler.errors import HostTimeout, HostUnreachable, ReconcilerError, TerminalError
from reconciler.model.snapshot import LibvirtAnswer

_loop_lock = threading.Lock()
_loop_started: list[bool] = []  # one entry once the loop runs

_TIMEOUT_CODES: Final = frozenset(
    {libvirt.VIR_ERR_OPERATION_TIMEOUT, libvirt.VIR_ERR_AGENT_UNRESPONSIVE}
)
_CONNECTION_CODES: Final = frozenset(
    {
        libvirt.VIR_ERR_SYSTEM_ERROR,
        libvirt.VIR_ERR_RPC,
        libvirt.VIR_ERR_NO_CONNECT,
        libvirt.VIR_ERR_INVALID_CONN,
        libvirt.VIR_ERR_AUTH_FAILED,
        libvirt.VIR_ERR_AUTH_UNAVAILABLE,
    }
)


def ensure_event_loop() -> None:
    """libvirt's default event loop, run by one daemon thread: keepalive needs it."""
    with _loop_lock:
        if _loop_started:
            return
        libvirt.registerErrorHandler(lambda *_: None, None)  # errors are raised, not printed
        libvirt.virEventRegisterDefaultImpl()
        threading.Thread(target=_run_event_loop, name="libvirt-events", daemon=True).start()
        _loop_started.append(True)


def _run_event_loop() -> None:
    while True:
        libvirt.virEventRunDefaultImpl()


@dataclass(frozen=True)
class ConnectionSettings:
    """How long to wait for a host to accept a connection, and how fast to notice it hang."""

    connect_timeout: float = 10.0
    keepalive_interval: int = 5
    """Seconds between keepalive probes on an idle connection (libvirt's unit, at least 1)."""
    keepalive_count: int = 3
    """Unanswered probes after which libvirt closes the connection."""


class _Opening:
    """One ``libvirt.open`` in its own thread, which the caller may stop waiting for."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.conn: Any = None
        self.error: libvirt.libvirtError | None = None
        self.abandoned = False

    def run(self) -> None:
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError as err:
            self.error = err
            self.done.set()
            return
        with self.lock:
            if self.abandoned:  # the caller gave up on this host: nobody else will close it
                with contextlib.suppress(libvirt.libvirtError):
                    conn.close()
                return
            self.conn = conn
        self.done.set()


def open_connection(uri: str, settings: ConnectionSettings) -> Any:
    """An open connection to ``uri`` with keepalive; HostUnreachable/HostTimeout otherwise."""
    ensure_event_loop()
    opening = _Opening(uri)
    threading.Thread(target=opening.run, name=f"libvirt-open {uri}", daemon=True).start()
    finished = opening.done.wait(settings.connect_timeout)
    with opening.lock:
        if not finished and opening.conn is None and opening.error is None:
            opening.abandoned = True
            raise HostTimeout(
                f"{uri} did not answer within {settings.connect_timeout:g}s",
                hint="check that libvirtd on that host is running and not hung",
            )
    if opening.error is not None:
        raise HostUnreachable(
            f"cannot connect to {uri}: {opening.error}",
            hint="check the host is up and its uri in cluster.yaml",
        ) from opening.error
    conn = opening.conn
    with contextlib.suppress(libvirt.libvirtError):  # drivers without keepalive (test:///)
        conn.setKeepAlive(max(1, settings.keepalive_interval), max(1, settings.keepalive_count))
    return conn


def close_connection(conn: Any) -> None:
    """Close ``conn``, ignoring a connection that is already broken."""
    if conn is not None:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()


def is_broken(err: libvirt.libvirtError) -> bool:
    """Whether ``err`` says the connection itself failed (not the call on a live one)."""
    return err.get_error_code() in (
        libvirt.VIR_ERR_INVALID_CONN,
        libvirt.VIR_ERR_RPC,
        libvirt.VIR_ERR_NO_CONNECT,
    )


def is_no_domain(err: libvirt.libvirtError) -> bool:
    return bool(err.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN)


def map_error(action: str, where: str, err: libvirt.libvirtError) -> ReconcilerError:
    """The project's error for a libvirt error of ``action`` on ``where`` (raise it ``from``)."""
    code = err.get_error_code()
    if code in _TIMEOUT_CODES:
        return HostTimeout(f"{action} timed out on {where}: {err}")
    if code in _CONNECTION_CODES:
        return HostUnreachable(
            f"{action} failed on {where}, the host stopped answering: {err}",
            hint="check that libvirtd on that host is running",
        )
    if code == libvirt.VIR_ERR_NO_DOMAIN:
        return TerminalError(
            f"{action} failed on {where}: the domain is not there ({err})",
            hint="observe the cluster again; the VM was moved or removed meanwhile",
        )
    return TerminalError(f"{action} failed on {where}: {err}")


def answer(uri: str, host: str, settings: ConnectionSettings) -> LibvirtAnswer:
    """What libvirt at ``uri`` (host ``host``) answers now, the ``Answers`` port of both the
    restarter and a rollout's host control: a connection opened within the connect timeout,
    its version asked, then its domains listed (a daemon restarted lists them once it has
    found them again); a call on the open connection ends when keepalive gives it up. Never
    raises: what was not answered is the answer's ``why``."""
    try:
        conn = open_connection(uri, settings)
    except ReconcilerError as err:
        return LibvirtAnswer(why=err.message)
    try:
        try:
            number = int(conn.getLibVersion())
        except libvirt.libvirtError as err:
            return LibvirtAnswer(why=map_error("look", host, err).message)
        version = f"libvirt {number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"
        try:
            conn.listAllDomains(0)
        except libvirt.libvirtError as err:
            return LibvirtAnswer(version=version, why=map_error("look", host, err).message)
        return LibvirtAnswer(version=version)
    finally:
        close_connection(conn)
