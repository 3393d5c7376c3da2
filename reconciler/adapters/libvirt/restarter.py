"""Starting a VM from its saved definition on a host, and removing stale definitions.

One connection per call, closed afterwards. ``answers`` asks a host whether its libvirt
answers at all (a fenced host must not), as a rollout's host control asks it too
(``connection.answer``). ``start`` is idempotent on libvirt's truth: a domain with the VM's
UUID already on the host is started (or left running), never defined twice.
"""

from __future__ import annotations

from typing import Any

import libvirt

from reconciler.adapters.libvirt.connection import (
    ConnectionSettings,
    answer,
    close_connection,
    is_no_domain,
    map_error,
    open_connection,
)
from reconciler.errors import ConfigError, TerminalError
from reconciler.model.cluster import Cluster
from reconciler.model.snapshot import LibvirtAnswer


class LibvirtRestarter:
    def __init__(self, cluster: Cluster, *, connection: ConnectionSettings | None = None) -> None:
        self.connection = connection or ConnectionSettings()
        self._uris = {h.name: h.uri for h in cluster.spec.hosts}

    def _uri(self, host: str) -> str:
        uri = self._uris.get(host)
        if uri is None:
            raise ConfigError(f"host {host} is not in the cluster")
        return uri

    def _open(self, host: str) -> Any:
        return open_connection(self._uri(host), self.connection)

    def definitions(self, host: str) -> dict[str, str]:
        conn = self._open(host)
        try:
            out = {}
            for dom in conn.listAllDomains(0):
                try:
                    flags = libvirt.VIR_DOMAIN_XML_SECURE
                    if dom.isPersistent():
                        flags |= libvirt.VIR_DOMAIN_XML_INACTIVE
                    out[dom.UUIDString()] = dom.XMLDesc(flags)
                except libvirt.libvirtError as err:
                    if not is_no_domain(err):
                        raise
            return out
        except libvirt.libvirtError as err:
            raise map_error("read definitions", host, err) from err
        finally:
            close_connection(conn)

    def start(self, host: str, uuid: str, xml: str) -> None:
        conn = self._open(host)
        try:
            try:
                dom = conn.lookupByUUIDString(uuid)
            except libvirt.libvirtError as err:
                if not is_no_domain(err):
                    raise
                dom = conn.defineXML(xml)
            if not dom.isActive():
                dom.create()
            if not dom.isActive():
                raise TerminalError(f"{dom.name()} did not start on {host}")
        except libvirt.libvirtError as err:
            raise map_error("start", host, err) from err
        finally:
            close_connection(conn)

    def undefine(self, host: str, uuid: str) -> None:
        conn = self._open(host)
        try:
            try:
                dom = conn.lookupByUUIDString(uuid)
            except libvirt.libvirtError as err:
                if is_no_domain(err):
                    return
                raise
            if dom.isActive():
                raise TerminalError(f"{dom.name()} runs on {host}: not undefined")
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
        except libvirt.libvirtError as err:
            raise map_error("undefine", host, err) from err
        finally:
            close_connection(conn)

    def answers(self, host: str) -> LibvirtAnswer:
        """What libvirt on ``host`` answers now (``connection.answer``): a fence is confirmed
        only when it says nothing, not even its version."""
        return answer(self._uri(host), host, self.connection)
