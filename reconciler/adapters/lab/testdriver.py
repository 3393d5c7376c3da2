"""The test-driver lab and generated clusters: libvirt ``test:///`` node files, no processes."""

from __future__ import annotations

import uuid
from pathlib import Path

from reconciler.adapters.lab.layout import host_names, indent, rack, template
from reconciler.adapters.lab.state import UUID_NS, Lab, LabHost, LabVm
from reconciler.adapters.libvirt.domain_metadata import render_metadata
from reconciler.model.base import API_VERSION
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host


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


def start_test_lab(directory: Path, hosts: int, layout: list[LabVm]) -> Lab:
    hosts_dir = directory / "hosts"
    hosts_dir.mkdir(parents=True, exist_ok=True)
    domain = template("test-domain.xml.in")
    lab_hosts: list[LabHost] = []
    for index, name in enumerate(host_names(hosts)):
        path = hosts_dir / f"{name}.xml"
        domains = "\n".join(
            domain.substitute(
                name=vm.name,
                uuid=vm.uuid,
                metadata=indent(render_metadata(vm.labels), 6),
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
                host_uuid=str(uuid.uuid5(UUID_NS, f"host/{directory}/{name}")),
                path=str(path),
                rack=rack(index),
            )
        )
    return Lab(dir=str(directory), driver="test", hosts=lab_hosts, vms=layout, virt_type="test")


def write_node_files(
    directory: Path, hosts: int, vms_per_host: int, *, name: str = "generated"
) -> Cluster:
    """A cluster of ``hosts`` libvirt test-driver hosts with ``vms_per_host`` VMs each.

    Writes one node file per host into ``directory`` and returns the Cluster that points at
    them. Host ``i`` is ``node-<i>``; its VMs are ``node-<i>-vm-<j>`` with label ``app``
    (``app-<j mod 5>``) and 64-256 MiB of memory (``64 * (1 + j mod 4)`` MiB).
    """
    directory.mkdir(parents=True, exist_ok=True)
    domain = template("test-domain.xml.in")
    host_models = []
    for i in range(hosts):
        host = f"node-{i:03d}"
        domains = "\n".join(
            domain.substitute(
                name=f"{host}-vm-{j:02d}",
                uuid=str(uuid.uuid5(UUID_NS, f"generated/{host}/{j}")),
                metadata=indent(render_metadata({"app": f"app-{j % 5}"}), 6),
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
        metadata=ClusterMetadata(name=name),
        spec=ClusterSpec(hosts=host_models),
    )
