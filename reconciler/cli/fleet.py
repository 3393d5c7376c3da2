"""``reconciler run`` over a folder of clusters: a fleet instance (``engine/fleet.py``).

``run PATH`` whose PATH holds cluster folders (folders with a ``cluster.yaml``) below it, or
``run --clusters GLOB``, serves every cluster folder found (or those the glob names) in one
process: each cluster has the ``Instance`` a single-cluster ``run`` has (its own loop, lease,
connection pool, metrics), run in a thread; at most ``--concurrency`` rounds run at once.
With ``--coordination``, several instances share the clusters: each joins the fleet's group
in etcd and tries only the clusters the hash ring gives it.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import threading
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from reconciler.cli import acting, requests
from reconciler.cli.common import EXIT_OK, cluster_folder, positive_float
from reconciler.cli.instance import Instance, RunRequest
from reconciler.cli.signals import Signals

if TYPE_CHECKING:
    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.engine.fleet import Fleet

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 4


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def add_fleet_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--clusters",
        metavar="GLOB",
        help="serve the cluster folders under PATH this glob names (e.g. 'prod-*' or "
        "'sites/*/*'), each reconciled on its own; default: every folder below PATH holding a "
        "cluster.yaml, when PATH is not itself a cluster folder. See docs/run.md#fleet",
    )
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help=f"serving several clusters: at most N rounds at once (default: {DEFAULT_CONCURRENCY})",
    )
    p.add_argument(
        "--lease-duration",
        type=positive_float,
        metavar="SECONDS",
        help="the etcd or git lease's duration (default: 15); renewed every 2/15 of it, given "
        "up 10/15 of it after the last renewal",
    )


def is_fleet(asked: RunRequest) -> bool:
    """Whether PATH is a folder of clusters rather than a cluster folder (a single ``run``)."""
    from reconciler.config.folders import fleet_folders, is_cluster_folder

    if asked.clusters is not None:
        return True
    source = asked.acting.source
    if isinstance(source, requests.RepoRequest):
        root = _checkout(_repo(source)[0], source)
    else:
        root = cluster_folder(source.path)
    if not root.is_dir() or is_cluster_folder(root):
        return False  # a cluster folder, or an error the single-cluster run reports as today
    return bool(fleet_folders(root))


def _repo(source: requests.RepoRequest) -> tuple[GitStateRepo, str]:
    """The state repository of a fleet; ConfigError for a PATH outside it, before it is read
    (a discovery that fails is tried again, for ever)."""
    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.engine.transaction import repo_folder

    repo_folder(source.path)
    repo = GitStateRepo(source.url, cache_dir=source.cache_dir)
    return repo, source.branch


def _checkout(repo: GitStateRepo, source: requests.RepoRequest) -> Path:
    """PATH in the head of the branch, fetched; it may be missing (a single-cluster run says
    so), never outside the repository."""
    from reconciler.engine.transaction import checkout_head

    done = checkout_head(repo, source.branch, source.path, display=repo.display_url, present=False)
    return done.folder


class ClusterWorker:
    """One cluster of the fleet: a single-cluster ``Instance`` without its own HTTP server,
    watcher or signals (the fleet's serve them all)."""

    def __init__(self, instance: Instance, rounds: threading.Semaphore) -> None:
        self.instance = instance
        self.cluster = instance.cluster
        instance.loop.turn = lambda: rounds  # at most --concurrency rounds at once

    def run(self) -> None:
        inst = self.instance
        inst.sampling.start()
        try:
            inst.keeper.start()
            inst.loop.run()
        finally:
            inst.sampling.close()

    def stop(self) -> None:
        self.instance.loop.stop()

    def wake(self, reason: str) -> None:
        self.instance.wakeup.trigger(reason)

    def report(self) -> dict[str, object]:
        inst = self.instance
        healthy, health = inst.health()
        return {
            "cluster": self.cluster,
            "held": inst.keeper.valid(),
            "rounds": inst.loop.rounds,
            "healthy": healthy,
            "health": health,
        }


class FleetInstance:
    """One ``run`` instance serving a folder of clusters (shared with other instances)."""

    def __init__(self, asked: RunRequest) -> None:
        from reconciler.engine.fleet import Fleet
        from reconciler.engine.fleet_metrics import FleetMetrics

        self.asked = asked
        hold = asked.acting.hold
        self.me = hold.identity or acting.holder_identity("run")
        self.rounds = threading.Semaphore(asked.concurrency)
        self.abort = threading.Event()
        source = asked.acting.source
        self.repo: tuple[GitStateRepo, str] | None = None
        if isinstance(source, requests.RepoRequest):
            self.repo = _repo(source)
        membership = None
        if hold.kind is requests.HoldKind.ETCD and hold.url is not None:
            from reconciler.adapters.etcd.membership import ToozMembership

            membership = ToozMembership(hold.url, self.me, ttl=hold.lease_duration or 15.0)
        self.fleet: Fleet = Fleet(
            me=self.me,
            discover=self.discover,
            make=self.make,
            membership=membership,
            every=(hold.lease_duration or 15.0) / 3,
        )
        self.metrics = FleetMetrics(
            self.fleet, lambda: [w.instance.metrics.registry for w in self._workers()]
        )

    def _workers(self) -> list[ClusterWorker]:
        return [w for w in self.fleet.workers().values() if isinstance(w, ClusterWorker)]

    def discover(self) -> dict[str, str | None]:
        """The cluster folders now (a repository fetched first), each with the cluster name
        its cluster.yaml declares (folders that share one are refused by the fleet)."""
        from reconciler.config.fleet_checks import cluster_name
        from reconciler.config.folders import fleet_folders

        source = self.asked.acting.source
        if isinstance(source, requests.RepoRequest):
            assert self.repo is not None
            root = _checkout(self.repo[0], source)
        else:
            root = cluster_folder(source.path)
        return {f: cluster_name(root / f) for f in fleet_folders(root, self.asked.clusters)}

    def make(self, folder: str) -> ClusterWorker:
        """The worker of one cluster folder: the single-cluster ``Instance`` on it."""
        run = self.asked
        source = run.acting.source
        one: requests.SourceRequest
        if isinstance(source, requests.RepoRequest):
            one = dataclasses.replace(source, path=str(PurePosixPath(source.path) / folder))
        else:
            one = requests.FolderRequest(cluster_folder(source.path) / folder)
        hold = dataclasses.replace(run.acting.hold, identity=self.me)
        act = dataclasses.replace(run.acting, source=one, hold=hold)
        instance = Instance(dataclasses.replace(run, acting=act))
        instance.abort = self.abort  # a second signal aborts the moves of every cluster
        return ClusterWorker(instance, self.rounds)

    def health(self) -> tuple[bool, dict[str, object]]:
        """/healthz of the instance: 503 when the folders or the members cannot be read."""
        fleet = self.fleet
        report: dict[str, object] = {
            "state": "ok" if fleet.problem is None else "degraded",
            "instance": self.me,
            "assigned": len(fleet.assigned),
            "invalid": len(fleet.invalid),
        }
        if fleet.problem is not None:
            report["message"] = fleet.problem
        return fleet.problem is None, report

    def serve(self) -> int:
        from reconciler.adapters.http.server import HttpServer, parse_listen
        from reconciler.engine import triggers

        run = self.asked
        server = None
        if run.listen != "off":
            server = HttpServer(
                parse_listen(run.listen),
                registry=self.metrics.registry,
                health=self.health,
                on_push=self.fleet.wakeup.trigger,
                secret=os.environ.get("RECONCILER_WEBHOOK_SECRET") or None,
                branch=self.repo[1] if self.repo is not None else None,
                status=self.fleet.report,
            )
        watcher: triggers.RevisionPoller | triggers.FolderWatcher
        if self.repo is not None:
            repo, branch = self.repo
            watcher = triggers.RevisionPoller(
                lambda: repo.remote_head(branch), self.fleet.wakeup, every=run.poll
            )
        else:
            source = run.acting.source
            assert isinstance(source, requests.FolderRequest)
            watcher = triggers.FolderWatcher(cluster_folder(source.path), self.fleet.wakeup)
        signals = Signals(abort=self.abort, on_stop=self.fleet.stop)
        try:
            with signals.installed():
                if server is not None:
                    server.start()
                watcher.start()
                self.fleet.run()
        finally:
            watcher.stop()
            if server is not None:
                server.stop()
        return EXIT_OK
