"""Credentials in a domain's XML never reach the state repository: a domain on libvirt's test
driver carries them wherever libvirt keeps them (a network disk's ``<host name='user:pw@...'>``,
an HTTPS disk's query string, ``<auth>``, a console password, a systemd credential in SMBIOS),
its definition is read from libvirt as recovery keeps it and recorded on the observed branch of
a real bare repository, and no object reachable in that repository holds any of them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from reconciler.adapters.files.recovery import FileRecoveryStore
from reconciler.adapters.git.observations import DEFINITIONS, observed_branch
from reconciler.adapters.git.repo import GitStateRepo
from reconciler.adapters.lab.testdriver import node_xml
from reconciler.adapters.libvirt.restarter import LibvirtRestarter
from reconciler.cli.observations import Recorder
from reconciler.model.base import API_VERSION
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host
from reconciler.model.recovery import RecoveryState, SavedVm
from tests.gitrepos import git, state_remote
from tests.impact.test_observations import POLICY
from tests.impact.world import T0, snapshot

UUID = "6f1c1e9a-2f44-4b7e-9a57-0c1d2e3f4a5b"
SECRETS = {
    "the password in a disk's host name": "Hunter2pw",
    "the query string's signature": "QuerySig99",
    "the systemd credential": "Sd-CredPW1",
    "the fw_cfg systemd credential": "Fw-CredPW2",
    "the console password": "Vnc-Pw-777",
    "the secret's usage": "Rbd-KeyUsage",
    "the password in a chardev's host": "Chr-Pw-55",
    "the password in a URL in text": "Txt-Pw-66",
}

DOMAIN = f"""<domain type='test'>
  <name>creds-1</name><uuid>{UUID}</uuid>
  <description>installed from https://builder:Txt-Pw-66@ks.example/ks.cfg</description>
  <memory unit='MiB'>256</memory><vcpu>1</vcpu>
  <sysinfo type='smbios'>
    <oemStrings>
      <entry>io.systemd.credential:root-pw=Sd-CredPW1</entry>
      <entry>keep me</entry>
    </oemStrings>
  </sysinfo>
  <sysinfo type='fwcfg'>
    <entry name='opt/io.systemd.credentials/api-token'>Fw-CredPW2</entry>
  </sysinfo>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
    <disk type='network' device='cdrom'>
      <source protocol='https' name='/isos/install.iso' query='X-Amz-Signature=QuerySig99'>
        <host name='isoadmin:Hunter2pw@mirror.example' port='443'/>
      </source>
      <target dev='hdc' bus='ide'/><readonly/>
    </disk>
    <disk type='network' device='disk'>
      <source protocol='rbd' name='pool/creds-1@snap1'>
        <host name='ceph-mon'/>
        <auth username='libvirt'><secret type='ceph' usage='Rbd-KeyUsage'/></auth>
      </source>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='tcp'>
      <source mode='connect' host='console:Chr-Pw-55@logs.example' service='2445'/>
    </serial>
    <graphics type='vnc' port='-1' passwd='Vnc-Pw-777'/>
  </devices>
</domain>"""


def _libvirt_definition(tmp_path: Path) -> str:
    """The domain's definition as recovery reads it from the host (inactive, with secrets)."""
    node = tmp_path / "kvm-01.xml"
    node.write_text(node_xml(DOMAIN))
    cluster = Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=ClusterMetadata(name="lab"),
        spec=ClusterSpec(hosts=[Host(name="kvm-01", uri=f"test://{node}")]),
    )
    return LibvirtRestarter(cluster).definitions("kvm-01")[UUID]


def _everything_in(bare: Path) -> str:
    """The text of every object reachable from any ref of ``bare``."""
    listing = git(bare, "rev-list", "--objects", "--all")
    shas = "\n".join(line.split()[0] for line in listing.splitlines()) + "\n"
    done = subprocess.run(
        ["git", "cat-file", "--batch"],
        cwd=bare,
        input=shas.encode(),
        capture_output=True,
        check=True,
    )
    return done.stdout.decode("utf-8", "replace") + git(bare, "for-each-ref")


def test_no_credential_of_a_domain_reaches_the_state_repository(tmp_path: Path) -> None:
    xml = _libvirt_definition(tmp_path)
    assert [what for what, s in SECRETS.items() if s not in xml] == []  # libvirt keeps them all
    url, _ = state_remote(tmp_path)
    state = tmp_path / "state"
    FileRecoveryStore("lab", state).save(
        RecoveryState(
            cluster="lab",
            vms={
                UUID: SavedVm(
                    name="creds-1",
                    uuid=UUID,
                    host="kvm-01",
                    running=True,
                    vcpus=1,
                    memory=256 * 1024**2,
                    xml=xml,
                    seen_at=T0,
                )
            },
        )
    )
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    Recorder(state, "lab", repo).after_round(snapshot(T0), POLICY, T0)

    bare = tmp_path / "remote.git"
    everything = _everything_in(bare)
    assert [what for what, s in SECRETS.items() if s in everything] == []
    # what was recorded is there, saying what was taken out of it
    recorded = json.loads(git(bare, "show", f"{observed_branch('lab')}:{DEFINITIONS}"))
    header = recorded["creds-1"].splitlines()[0]
    for what in (
        "credentials in host names",
        "URL query strings",
        "systemd credentials",
        "credentials in URLs",
        "console passwords",
        "disk authentication",
    ):
        assert what in header
    assert '<host name="mirror.example" port="443"' in recorded["creds-1"]
    assert "pool/creds-1@snap1" in recorded["creds-1"]  # an RBD snapshot is not user info
    assert "<entry>keep me</entry>" in recorded["creds-1"]
