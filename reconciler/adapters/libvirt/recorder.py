"""Write the reconciler's record into a domain's metadata, keeping everything else in it.

A read-modify-write of the one ``<placement:vm>`` element (``virDomainGetMetadata`` then
``virDomainSetMetadata`` with ``METADATA_KEY``/``METADATA_NS``): the labels in it are kept,
other tools' metadata is never touched. A running persistent domain has two definitions, the
live one and the one it boots from next; each is read and written on its own, so labels edited
in only one of them survive in that one.
"""

from __future__ import annotations

from typing import Any

import libvirt

from reconciler.adapters.libvirt.connection import (
    ConnectionSettings,
    close_connection,
    map_error,
    open_connection,
)
from reconciler.adapters.libvirt.domain_metadata import (
    METADATA_KEY,
    METADATA_NS,
    parse_metadata,
    render_metadata,
)
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.errors import ConfigError
from reconciler.model.cluster import Cluster
from reconciler.model.snapshot import ReconcilerState


class LibvirtRecorder:
    """``DomainRecorder`` for libvirt, over the command's open connections (``pool``); built
    without a pool, it opens a connection per record and closes it afterwards."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        connection: ConnectionSettings | None = None,
        pool: ConnectionPool | None = None,
    ) -> None:
        self.cluster = cluster
        self.connection = connection or ConnectionSettings()
        self.pool = pool
        self._uris = {h.name: h.uri for h in cluster.spec.hosts}

    def record(
        self, host: str, vm: str, state: ReconcilerState, *, uuid: str | None = None
    ) -> None:
        """Set ``state`` on domain ``vm`` (found by ``uuid`` when given) of ``host``;
        HostUnreachable/TerminalError if not."""
        if host not in self._uris:
            raise ConfigError(
                f"host {host} is not in cluster {self.cluster.metadata.name}",
                hint="observe and plan again against the current cluster.yaml",
            )

        def write(conn: Any) -> None:
            dom = conn.lookupByUUIDString(uuid) if uuid else conn.lookupByName(vm)
            scopes = []
            if dom.isActive():
                scopes.append(libvirt.VIR_DOMAIN_AFFECT_LIVE)
            if dom.isPersistent():
                scopes.append(libvirt.VIR_DOMAIN_AFFECT_CONFIG)
            for scope in scopes:
                _rewrite(dom, scope, state)

        if self.pool is not None:
            pool = self.pool
            try:
                pool.call(host, write)  # a connection that broke is reopened once
            except libvirt.libvirtError as err:
                raise map_error("recording the move", f"{vm} on {host}", err) from err
            return
        conn = open_connection(self._uris[host], self.connection)
        try:
            write(conn)
        except libvirt.libvirtError as err:
            raise map_error("recording the move", f"{vm} on {host}", err) from err
        finally:
            close_connection(conn)


def _rewrite(dom: Any, scope: int, state: ReconcilerState) -> None:
    """Replace the state in one definition (live or persistent) of ``dom``, keeping labels."""
    try:
        current = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NS, scope)
    except libvirt.libvirtError as err:
        if err.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            raise
        current = ""
    labels = parse_metadata(current).labels if current else {}
    dom.setMetadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT,
        render_metadata(labels, state, for_set_metadata=True),
        METADATA_KEY,
        METADATA_NS,
        scope,
    )
