"""What every command shares: exit codes, argument types, the cluster folder, live observation,
the status store, error printing. Nothing here reads an ``argparse.Namespace``: commands parse
theirs into a request first (``cli/requests.py``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from reconciler.cli.requests import ForgeRequest, ObserveOverrides, RepoRequest
from reconciler.errors import ConfigError, ReconcilerError, TerminalError
from reconciler.model.quantity import parse_size

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_CHANGES = 2
"""``plan``: moves, deferred moves or a changed Placement (like terraform -detailed-exitcode)."""
EXIT_NO_FIT = 2
"""``place``: the answer is that no host fits the new VM."""
EXIT_PARTIAL = 3
"""``apply``: some moves failed or were skipped as stale, a person's placement change was kept
over the round's, or the record could not be written (interrupted: 130/143)."""
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

LAB_DIR = Path(".lab")

if TYPE_CHECKING:
    # the models and files of snapshots, histories and status are imported where they are
    # read: every command imports this module, and `validate` needs none of them
    from reconciler.adapters.files.status import FileStatusStore
    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.model.cluster import Cluster
    from reconciler.model.desired import DesiredState
    from reconciler.model.history import History
    from reconciler.model.snapshot import Snapshot
    from reconciler.model.status import ReconcileStatus

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    Subparsers = argparse._SubParsersAction
Handler = Callable[[argparse.Namespace], int]


def print_error(err: ReconcilerError) -> None:
    print(f"error: {err.message}", file=sys.stderr)
    if err.hint:
        print(f"  hint: {err.hint}", file=sys.stderr)


def usage_errors_exit_1(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` exit 1 on usage errors, unrecognized arguments included.

    argparse exits 2, which ``plan`` uses for "changes" and ``place`` for "no host fits": a
    typo in a script must not read as either.
    """
    parse_known_args = parser.parse_known_args

    def error(message: str) -> NoReturn:
        parser.print_usage(sys.stderr)
        parser.exit(EXIT_ERROR, f"{parser.prog}: error: {message}\n")

    def strict_parse_known_args(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = parse_known_args(args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = strict_parse_known_args  # type: ignore[method-assign,assignment]


def aware_datetime(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time; write e.g. 2025-03-01T12:00:00Z"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no time zone; add one, e.g. 2025-03-01T12:00:00Z"
        )
    return value


def size(text: str) -> int:
    if text.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} has no unit; write e.g. 512MiB or 4GiB (units: B, KiB, MiB, GiB, TiB, "
            "KB, MB, GB, TB)"
        )
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not a label; write key=value")
    return key, value


def cluster_folder(path: Path | None) -> Path:
    """The folder given, else ``.lab/cluster-state`` when a lab is up here, else cluster-state/."""
    if path is not None:
        return path.parent if path.is_file() else path
    lab_folder = LAB_DIR / "cluster-state"
    if (LAB_DIR / "lab.json").is_file() and lab_folder.is_dir():
        print(f"using the lab's cluster folder {lab_folder}", file=sys.stderr)
        return lab_folder
    return Path("cluster-state")


def add_path_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        nargs="?",
        type=Path,
        metavar="PATH",
        help="cluster folder (default: cluster-state/, or .lab/cluster-state when a lab is up)",
    )


def add_observe_overrides(p: argparse.ArgumentParser) -> None:
    """Flags that override the Cluster's spec.observe and spec.sharedStorage for one run."""
    p.add_argument(
        "--connect-timeout",
        type=positive_float,
        metavar="SECONDS",
        help="override spec.observe.connectTimeout",
    )
    p.add_argument(
        "--call-timeout",
        type=positive_float,
        metavar="SECONDS",
        help="override spec.observe.callTimeout",
    )
    p.add_argument(
        "--shared-path",
        action="append",
        default=None,
        metavar="PREFIX",
        help="add to spec.sharedStorage: storage every host mounts; disks under it do not "
        "block live migration (repeatable)",
    )


def observe_live(cluster: Cluster, **overrides: Any) -> Snapshot:
    """Observe ``cluster`` live; libvirt is imported here: validate and offline plans need none."""
    try:
        from reconciler.adapters.libvirt import observer as libvirt_observer
    except ImportError as err:
        raise TerminalError(
            f"observing the hosts needs the libvirt Python bindings: {err}",
            hint="pip install libvirt-python (needs libvirt-dev and pkg-config), "
            "or plan offline with --snapshot FILE",
        ) from err
    snapshot: Snapshot = libvirt_observer.observe_cluster(cluster, **overrides)
    return snapshot


def add_snapshot_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--snapshot",
        type=Path,
        metavar="FILE",
        help="work offline from a saved snapshot (observe --format json) instead of observing "
        "the hosts (impact: instead of the latest on reconciler/observed/<cluster>)",
    )


def add_state_dir_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="where the status of each cluster (and run's load samples) is kept between "
        "rounds (default: $XDG_STATE_HOME/reconciler)",
    )


def status_store(state_dir: Path | None, cluster: str) -> FileStatusStore:
    """``<state dir>/<cluster>/status.json`` (state dir None: $XDG_STATE_HOME/reconciler)."""
    from reconciler.adapters.files.status import FileStatusStore

    return FileStatusStore(cluster, state_dir)


def check_snapshot_matches(desired: DesiredState, snapshot: Snapshot, source: str) -> None:
    """The snapshot must be of the folder's cluster and know only its hosts."""
    name = desired.cluster.metadata.name
    if snapshot.cluster != name:
        raise ConfigError(
            f"{source} is a snapshot of cluster {snapshot.cluster!r}, but the folder describes "
            f"cluster {name!r}",
            hint="pass the snapshot of this cluster, or the folder of the snapshot's cluster",
        )
    hosts = {h.name for h in desired.cluster.spec.hosts}
    unknown = sorted(
        {h.name for h in snapshot.hosts if h.name not in hosts}
        | {v.host for v in snapshot.vms if v.host not in hosts}
    )
    if unknown:
        raise ConfigError(
            f"{source} has hosts that are not in cluster {name!r}: {', '.join(unknown)}",
            hint="add them to the Cluster document, or take a new snapshot of this cluster",
        )


FORGES = ("github", "gitea", "gitlab")


FORGE_ENV = "RECONCILER_FORGE"
FORGE_TOKEN_ENV = "RECONCILER_FORGE_TOKEN"


def add_forge_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--forge, --forge-url and --forge-project: the same spelling, default and help in every
    command. The token is read from $RECONCILER_FORGE_TOKEN, never from a flag."""
    p.add_argument(
        "--forge",
        choices=(*FORGES, "none"),
        default=None,
        help="where pull requests and commit statuses live; none: only push branches, post "
        f"nothing (default: ${FORGE_ENV}, else github when ${FORGE_TOKEN_ENV} is set, else "
        f"none); the token is read from ${FORGE_TOKEN_ENV}",
    )
    p.add_argument(
        "--forge-url",
        metavar="API",
        help="API root: https://api.github.com (default for github), https://HOST/api/v3 "
        "(GitHub Enterprise), https://HOST/api/v1 (Gitea, Forgejo), https://HOST/api/v4 "
        "(GitLab; default https://gitlab.com/api/v4)",
    )
    p.add_argument(
        "--forge-project",
        metavar="OWNER/NAME",
        help="the repository on the forge (default: the last two parts of --repo)",
    )


def forge_of(given: str | None) -> str:
    """The forge to use: --forge, else $RECONCILER_FORGE, else github with a token, else none."""
    import os

    chosen = given or os.environ.get(FORGE_ENV)
    if chosen:
        if chosen not in (*FORGES, "none"):
            raise ConfigError(
                f"${FORGE_ENV}={chosen!r} is not a forge",
                hint=f"one of: {', '.join((*FORGES, 'none'))}",
            )
        return chosen
    return "github" if os.environ.get(FORGE_TOKEN_ENV) else "none"


def add_now_argument(p: argparse.ArgumentParser, what: str, *, decides: str = "") -> None:
    p.add_argument(
        "--now",
        type=aware_datetime,
        metavar="ISO8601",
        help=f"the time to {what} at, with a time zone (default: now, UTC)"
        + (f"; decides {decides}" if decides else ""),
    )


REPO_HELP = (
    "read the desired state from this git repository (a path, file://, ssh:// or https:// URL); "
    "PATH is then the cluster folder inside it (default: cluster-state)"
)
CACHE_DIR_HELP = "where the clone is kept (default: $XDG_CACHE_HOME/reconciler/<hash of URL>)"


def add_repo_arguments(p: argparse.ArgumentParser, *, branch: bool = True) -> None:
    """--repo, --branch, --cache-dir: read the desired state from a git repository."""
    p.add_argument("--repo", metavar="URL", help=REPO_HELP)
    if branch:
        p.add_argument("--branch", default="main", metavar="NAME", help="branch (default: main)")
    p.add_argument("--cache-dir", type=Path, metavar="DIR", help=CACHE_DIR_HELP)


@dataclass(frozen=True)
class StateCheckout:
    """The state repository fetched and checked out at the head of ``branch``."""

    repo: GitStateRepo
    branch: str
    commit: str
    folder: Path
    """The cluster folder in the files of ``commit`` (read it, never write it)."""
    path: str
    """The cluster folder relative to the repository root."""
    root: Path
    """The files of ``commit`` (read them, never write them)."""


def checkout_state(request: RepoRequest) -> StateCheckout:
    """Fetch the repository and check out the head of its branch; the commit is recorded."""
    # imported here: only commands with --repo need the git adapter
    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.engine.transaction import checkout_head, repo_folder

    repo = GitStateRepo(request.url, cache_dir=request.cache_dir)
    rel = repo_folder(request.path)
    done = checkout_head(repo, request.branch, rel, display=repo.display_url)
    return StateCheckout(repo, request.branch, done.commit, done.folder, rel, done.root)


def snapshot_for(
    desired: DesiredState, *, snapshot: Path | None, observe: ObserveOverrides
) -> Snapshot:
    """The saved snapshot given with --snapshot, else a live observation of every host."""
    from reconciler.adapters.files import snapshot as snapshot_file
    from reconciler.engine.observed import require_observed

    if snapshot is not None:
        taken = snapshot_file.load_snapshot(snapshot)
        source = f"snapshot {snapshot}"
    else:
        taken = observe_live(desired.cluster, **observe.overrides())
        source = "the observed snapshot"
    check_snapshot_matches(desired, taken, source)
    require_observed(taken)
    return taken


def history_for(
    cluster: str, *, history: Path | None, state_dir: Path | None
) -> tuple[History, ReconcileStatus | None]:
    """The planner's History: from --history FILE, else from the status store, else empty."""
    from reconciler.adapters.files import history as history_file
    from reconciler.model.history import History

    if history is not None:
        return history_file.load_history(history), None
    status = status_store(state_dir, cluster).load()
    return (status.history() if status is not None else History()), status


def open_forge_of(forge: ForgeRequest, repo_url: str | None) -> Any:
    """The forge named by --forge (None for --forge none); the token from the environment, the
    project from --forge-project, else the last two parts of the repository's URL."""
    import os

    name = forge_of(forge.name)
    if name == "none":
        return None
    from reconciler.adapters.forges.clients import open_forge

    token = os.environ.get(FORGE_TOKEN_ENV)
    if not token:
        raise ConfigError(
            f"--forge {name} needs a token in ${FORGE_TOKEN_ENV}",
            hint=f"export {FORGE_TOKEN_ENV}=... (a token that may write pull requests), "
            "or use --forge none to only push the branch",
        )
    project = forge.project or (project_of(repo_url) if repo_url else None)
    if project is None:
        raise ConfigError("cannot tell the forge project", hint="pass --forge-project")
    return open_forge(name, project=project, token=token, api_url=forge.url)


def project_of(url: str) -> str | None:
    """``https://h/infra/state.git`` -> ``infra/state``."""
    import re

    parts = [x for x in re.split(r"[/:]", url.removesuffix(".git")) if x]
    return "/".join(parts[-2:]) if len(parts) >= 2 else None
