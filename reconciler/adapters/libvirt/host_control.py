"""What a rollout asks of a host's libvirt: does it answer, shut VMs down, start them again.

One connection per call, closed afterwards (a host being rebooted is worked on between
calls). Opening waits at most the connect timeout; a call on an open connection that hangs
ends when keepalive gives the connection up. A shutdown is libvirt's graceful one (ACPI):
a guest that does not go off within the timeout is reported, never forced off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import libvirt

from reconciler.adapters.libvirt.connection import (
    ConnectionSettings,
    answer,
    close_connection,
    map_error,
    open_connection,
)
from reconciler.errors import ReconcilerError
from reconciler.model.cluster import Cluster
from reconciler.model.snapshot import LibvirtAnswer

POLL = 1.0
"""Seconds between looks at guests being shut down."""


class LibvirtHostControl:
    """``HostControl`` over libvirt for the hosts of ``cluster``."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        connection: ConnectionSettings | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = connection or ConnectionSettings()
        self._uris = {h.name: h.uri for h in cluster.spec.hosts}
        self.sleep = sleep
        self.monotonic = monotonic

    def _open(self, host: str) -> Any:
        return open_connection(self._uris[host], self.connection)

    def answers(self, host: str) -> LibvirtAnswer:
        """What libvirt on ``host`` answers now (``connection.answer``): ready again only
        when it answers in full, its version and its domains."""
        return answer(self._uris[host], host, self.connection)

    def shut_down(self, host: str, vms: Sequence[str], timeout: timedelta) -> dict[str, str]:
        try:
            conn = self._open(host)
        except ReconcilerError as err:
            return dict.fromkeys(vms, err.message)
        left: dict[str, str] = {}
        try:
            domains = {}
            for name in vms:
                try:
                    dom = conn.lookupByName(name)
                    if dom.isActive():
                        dom.shutdown()
                        domains[name] = dom
                except libvirt.libvirtError as err:
                    left[name] = map_error("shut down", f"{name} on {host}", err).message
            deadline = self.monotonic() + timeout.total_seconds()
            while domains:
                domains = {n: d for n, d in domains.items() if _active(d)}
                if not domains or self.monotonic() >= deadline:
                    break
                self.sleep(POLL)
            for name in domains:
                left[name] = f"still running after {timeout.total_seconds():g}s (not forced off)"
        except libvirt.libvirtError as err:
            message = map_error("shut down", host, err).message
            left.update((n, message) for n in vms if n not in left)
        finally:
            close_connection(conn)
        return left

    def start(self, host: str, vms: Sequence[str]) -> dict[str, str]:
        try:
            conn = self._open(host)
        except ReconcilerError as err:
            return dict.fromkeys(vms, err.message)
        failed: dict[str, str] = {}
        try:
            for name in vms:
                try:
                    dom = conn.lookupByName(name)
                    if not dom.isActive():
                        dom.create()
                except libvirt.libvirtError as err:
                    failed[name] = map_error("start", f"{name} on {host}", err).message
        finally:
            close_connection(conn)
        return failed


def _active(dom: Any) -> bool:
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError:
        return False


__all__ = ["LibvirtHostControl"]
