"""The load over a window for each command: where it is read from, and ``run``'s sampling.

- ``run`` reads its own samples (a window not yet filled is unknown in part) or Prometheus, and
  samples every host every ``sampleEvery`` on a thread of its own (``source: samples``).
- ``plan``, ``observe``, ``apply``, ``drain`` and ``impact`` read the window ``run`` keeps in
  the state directory while it is fresh, else the observation's own short sample, said in the
  plan; ``apply`` (and ``drain --apply``) then make no balance move unless given
  ``--balance-on-sample``. With ``source: prometheus`` every command asks Prometheus.
- With ``basis: allocated`` no load is read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.model.desired import DesiredState
from reconciler.model.load import LoadSource, LoadSpec
from reconciler.model.policy import Basis
from reconciler.model.snapshot import Snapshot

if TYPE_CHECKING:
    from reconciler.engine.ports import LoadReader, LoadSampler, Observer

BALANCE_ON_SAMPLE_HELP = (
    "make balance moves even when the load is the observation's own short CPU sample (run "
    "keeps no fresh window): by default a short sample moves only what must move"
)


class Reading(Enum):
    RUN = "run"
    """``run``'s own rounds: what its samples cover is the window, the rest unknown."""
    LOOK = "look"
    """A look (plan, observe, impact, a dry run): a window not fresh is a short sample."""
    ACT = "act"
    """apply, drain --apply: a short sample holds balance."""


def reader(desired: DesiredState, state_dir: Path | None, reading: Reading) -> LoadReader | None:
    """Where ``desired``'s load over the window is read from; None on basis allocated."""
    spec = desired.policy.spec
    if spec.basis is not Basis.USED:
        return None
    if spec.load.source is LoadSource.PROMETHEUS:
        from reconciler.adapters.load.sources import PrometheusLoad

        return PrometheusLoad()
    from reconciler.adapters.files.load_history import FileLoadHistory
    from reconciler.adapters.files.load_samples import FileLoadSamples
    from reconciler.adapters.load.sources import SamplesLoad

    name = desired.cluster.metadata.name
    return SamplesLoad(
        FileLoadSamples(name, state_dir),
        short=reading is not Reading.RUN,
        hold=reading is Reading.ACT,
        history=FileLoadHistory(name, state_dir),
    )


def windowed(
    snapshot: Snapshot, desired: DesiredState, state_dir: Path | None, reading: Reading
) -> Snapshot:
    """``snapshot`` read on the window (a saved snapshot keeps what it was read on)."""
    if snapshot.load is not None:
        return snapshot
    found = reader(desired, state_dir, reading)
    if found is None:
        return snapshot
    return found.window(snapshot, desired.policy.spec.load, datetime.now(UTC))


def observer(
    inner: Observer, desired: DesiredState, state_dir: Path | None, reading: Reading
) -> Observer:
    """``inner`` whose observations come read on the window, where the policy reads one."""
    found = reader(desired, state_dir, reading)
    if found is None:
        return inner
    from reconciler.engine.load_window import WindowedObserver

    return WindowedObserver(inner, desired.policy.spec.load, found, lambda: datetime.now(UTC))


def _asleep_reader(cluster: str, state_dir: Path | None) -> Callable[[], tuple[str, ...]] | None:
    """The hosts power saving keeps asleep or is switching, read from its book when asked."""
    if state_dir is None:
        return None
    from reconciler.adapters.files.power import FilePowerStore

    store = FilePowerStore(cluster, state_dir)

    def asleep() -> tuple[str, ...]:
        book = store.load()
        return () if book is None else book.silent()

    return asleep


class Sampling:
    """``run``'s samples: a thread reading every host every ``sampleEvery`` while the policy
    it is given (``desired()``, read again before each round) asks for them."""

    def __init__(
        self,
        cluster: str,
        state_dir: Path | None,
        desired: Callable[[], DesiredState],
        overrides: Callable[[], dict[str, object]],
    ) -> None:
        from reconciler.adapters.clock import SystemClock
        from reconciler.adapters.files.load_history import FileLoadHistory
        from reconciler.adapters.files.load_samples import FileLoadSamples
        from reconciler.engine.sampling import SampleKeeper

        self.desired = desired
        self.overrides = overrides
        self._sampler: LoadSampler | None = None
        self._uris: Sequence[tuple[str, str]] = ()
        self._close: Callable[[], None] | None = None
        self.stop = threading.Event()
        self.keeper = SampleKeeper(
            cluster,
            self.current,
            FileLoadSamples(cluster, state_dir),
            SystemClock(),
            history=FileLoadHistory(cluster, state_dir),
            asleep=_asleep_reader(cluster, state_dir),
        )
        self.thread = threading.Thread(
            target=self.keeper.run, args=(self.stop,), name="load-samples", daemon=True
        )

    def current(self) -> tuple[LoadSpec, LoadSampler] | None:
        """The load settings and a sampler of the cluster's hosts now; None when the policy
        reads no samples."""
        desired = self.desired()
        spec = desired.policy.spec
        if spec.basis is not Basis.USED or spec.load.source is not LoadSource.SAMPLES:
            return None
        uris = tuple(sorted((h.name, h.uri) for h in desired.cluster.spec.hosts))
        if self._sampler is None or uris != self._uris:
            self._replace(desired, uris)
        assert self._sampler is not None
        return spec.load, self._sampler

    def _replace(self, desired: DesiredState, uris: Sequence[tuple[str, str]]) -> None:
        from reconciler.adapters.libvirt.observer import observe_settings
        from reconciler.adapters.libvirt.sampler import LibvirtSampler

        if self._close is not None:
            self._close()
        timeouts = {
            k: v for k, v in self.overrides().items() if k in ("connect_timeout", "call_timeout")
        }
        observe = observe_settings(desired.cluster, **timeouts)  # type: ignore[arg-type]
        sampler = LibvirtSampler(
            dict(uris),
            connect_timeout=observe.connect_timeout,
            call_timeout=observe.call_timeout,
            concurrency=min(16, observe.concurrency or 16),
        )
        self._sampler, self._uris, self._close = sampler, uris, sampler.close

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        if self._close is not None:
            self._close()
