"""The audit commit of a recovery on a real state repository: a subject that says it is one,
a line per restart that ``history`` reads, and the definitions it started with their secrets
removed. What reached git is judged from every object of the remote, not from the records."""

from __future__ import annotations

import re
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.cli import main
from reconciler.engine.recovery import DEFINITIONS_FOLDER, Recovery, RecoveryPorts
from reconciler.engine.sources import RepoSource
from reconciler.model.status import ReconcileStatus
from tests.engine.test_recovery import World, cluster
from tests.gitrepos import git, state_remote

SECRETS = ("vnc-S3cret", "spice-Pa55", "client.rbd-key", "AQBcookieTOKEN", "s3kr1t-arg", "pw@ss")


def secret_xml(name: str, uuid: str) -> str:
    return f"""<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name><uuid>{uuid}</uuid>
  <devices>
    <graphics type='vnc' port='-1' passwd='vnc-S3cret'/>
    <graphics type='spice' passwd='spice-Pa55' passwdValidTo='2030-01-01T00:00:00'/>
    <disk type='network' device='disk'>
      <source protocol='rbd' name='pool/{name}'>
        <host name='ceph-mon'/>
        <auth username='libvirt'><secret type='ceph' usage='client.rbd-key'/></auth>
      </source>
    </disk>
    <disk type='network' device='cdrom'>
      <source protocol='https' name='/iso'>
        <host name='mirror'/><cookies><cookie name='t'>AQBcookieTOKEN</cookie></cookies>
      </source>
    </disk>
    <disk type='volume'><source pool='p' volume='v'/>
      <encryption format='luks'><secret type='passphrase' uuid='0f0e'/></encryption>
    </disk>
    <interface type='network'><source network='default'/></interface>
    <filesystem><source dir='https://u:pw@ss@files.example/share'/></filesystem>
  </devices>
  <qemu:commandline><qemu:arg value='-object'/><qemu:arg value='secret,data=s3kr1t-arg'/>
  </qemu:commandline>
</domain>"""


class SecretWorld(World):
    """Domains whose definitions carry every kind of secret libvirt XML may hold."""

    def definitions(self, host: str) -> dict[str, str]:
        return {u: secret_xml(d.name, u) for (h, u), d in self.domains.items() if h == host}

    def start(self, host: str, uuid: str, xml: str) -> None:
        name = re.search(r"<name>([^<]+)</name>", xml)
        assert name is not None
        super().start(host, uuid, f"<domain>{name.group(1)}</domain>")


def remote_objects_text(url: str) -> str:
    bare = url.removeprefix("file://")
    out = subprocess.run(
        ["git", "--git-dir", bare, "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout
    return out.decode(errors="replace")


def test_a_recovery_commit_names_itself_and_carries_its_definitions_without_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, person = state_remote(tmp_path)
    plain, d, _ = cluster()
    world = SecretWorld(up=plain.up, domains=plain.domains, clock=plain.clock)
    source = RepoSource(
        GitStateRepo(url, cache_dir=tmp_path / "cache"),
        branch="main",
        folder="cluster-state",
        read=lambda _: d,
        actor="reconciler@test",
    )
    source.load()
    ports = RecoveryPorts(
        fencer=world, restarter=world, store=world, clock=world.clock, source=source
    )
    rec = Recovery("test", ports)
    rec.step(d, world.snapshot(), act=True, status=ReconcileStatus(cluster="test"))
    world.kill("a")
    for _ in range(5):
        world.clock.advance(timedelta(seconds=20))
        report = rec.step(d, world.snapshot(), act=True, status=ReconcileStatus(cluster="test"))
        if report.restarted:
            break
    assert sorted(report.restarted) == ["db", "web"]
    assert report.recorded is not None

    git(person, "pull", "-q", "origin", "main")
    subject = git(person, "log", "-1", "--format=%s").strip()
    assert subject == "Recovered fenced host a of cluster test: 2 VM(s) restarted elsewhere"
    trailers = git(person, "log", "-1", "--format=%(trailers:only)")
    assert "Reconciler-Trigger: recovery" in trailers
    for name in ("db", "web"):
        text = (person / "cluster-state" / DEFINITIONS_FOLDER / f"{name}.xml").read_text()
        assert f"<name>{name}</name>" in text
        assert "pool/" + name in text  # the rest of the definition is kept
        assert "passwdValidTo" in text
        assert "<auth" not in text
        assert "<secret" not in text
    everything = remote_objects_text(url)
    leaked = [s for s in SECRETS if s in everything]
    assert leaked == []

    code = main(["history", "--repo", url, "--cache-dir", str(tmp_path / "h")])
    out = capsys.readouterr().out
    assert code == 0
    assert "executed (recovery) by reconciler@test" in out
    assert "Recovered fenced host a of cluster test" in out
    for name in ("db", "web"):
        assert re.search(
            rf"^    {name}: a -> [bc] \(Recovery\) restarted after a was fenced", out, re.M
        )
