"""Load over a window: how ``basis: used`` reads what the VMs really do (``spec.load``), and
what one observation's load figures were made of (``Snapshot.load``).

A VM's load is the CPU it used (in cores) over ``window``, summed up by ``statistic``, from the
samples ``reconciler run`` keeps (``source: samples``) or from Prometheus (``source:
prometheus``). A VM whose window is mostly missing has an unknown load, never zero: balance
moves that depend on it are not made. Per-host pressure (PSI) from Prometheus adds to a
host's CPU utilisation.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Final

from pydantic import AfterValidator, AwareDatetime, Field

from reconciler.model.base import Frozen
from reconciler.model.quantity import Duration, Size, duration_within, format_size

MIN_COVERED: Final = 0.5
"""A VM's window is known when samples cover at least this share of it: a window mostly
missing (a new VM, a gap in sampling, Prometheus not answering) is unknown, never zero."""
MAX_SAMPLES: Final = 720
"""Samples of one VM a window may hold (``window / sampleEvery``): 6h at 30s. Bounds what
``run`` keeps per VM and the points a Prometheus range query returns per series."""
DEFAULT_VM_CPU: Final = "rate(libvirt_domain_info_cpu_time_seconds_total[1m])"
"""CPU cores each VM used, from Debian's prometheus-libvirt-exporter: one series per domain
and exporter, labelled ``domain`` (the libvirt domain name) and ``uuid``. Not summed: the
reconciler joins a VM's series itself (``reconciler.core.load_series``), following the VM by
its UUID and counting it once where several jobs scrape it."""
DEFAULT_PROMETHEUS_URL: Final = "http://127.0.0.1:9090"

Window = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=10),
        timedelta(days=7),
        too_short="window {value} is too short to tell steady load from a spike; use at "
        "least 10s, e.g. 10m",
    ),
]
"""The span every balance decision reads: 10s to 7d."""
SampleEvery = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(hours=1),
        too_short="sampleEvery {value}: sample at most once a second; use at least 1s, e.g. 30s",
    ),
]
"""Between two samples (and the step of a Prometheus range query): 1s to 1h."""
QueryTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(0),
        timedelta(minutes=5),
        above=True,
        too_short="timeout {value} would give up before Prometheus can answer; use e.g. 10s",
    ),
]
"""The longest a Prometheus query may take, whole: more than 0, at most 5m."""
MIN_ANSWER: Final = 64 * 1024
MAX_ANSWER: Final = 1024**3
DEFAULT_MAX_ANSWER: Final = 32 * 1024**2
"""32MiB: a 6h window at 30s for about 1,300 VMs, a 10m one for tens of thousands; read into
memory, an answer takes about ten times its size."""


def _answer_within(size: int) -> int:
    if not MIN_ANSWER <= size <= MAX_ANSWER:
        raise ValueError(
            f"maxAnswer {format_size(size)} is out of bounds; use {format_size(MIN_ANSWER)} to "
            f"{format_size(MAX_ANSWER)}, e.g. {format_size(DEFAULT_MAX_ANSWER)}"
        )
    return size


AnswerSize = Annotated[Size, AfterValidator(_answer_within)]
"""The largest answer one Prometheus query may give: 64KiB to 1GiB."""


class LoadSource(StrEnum):
    SAMPLES = "samples"
    """Kept by ``reconciler run`` itself: one ``getAllDomainStats`` per host every
    ``sampleEvery``, in its state directory."""
    PROMETHEUS = "prometheus"
    """Read from a Prometheus server, one range query per round for all VMs."""


class Statistic(StrEnum):
    MEAN = "mean"
    P95 = "p95"
    MAX = "max"
    FORECAST = "forecast"
    """The window's mean blended with each VM's forecast over the next ``forecast.horizon``
    (``reconciler.core.forecast``)."""


class ForecastModel(StrEnum):
    SEASONAL = "seasonal"
    """The mean of the same time of day (of the week, with two weeks of history) over the
    past, moved to the level of the last hour; or of the same phase of a shorter ``period``."""
    TREND = "trend"
    """A straight line through the last ``max(window, 2 x horizon)``."""


Horizon = Annotated[
    Duration,
    duration_within(
        timedelta(minutes=1),
        timedelta(days=1),
        too_short="horizon {value} is shorter than the history's 5m step; use at least 1m, "
        "e.g. 30m",
    ),
]
"""How far ahead a forecast looks: 1m to 1d."""
HistorySpan = Annotated[
    Duration,
    duration_within(
        timedelta(hours=1),
        timedelta(days=28),
        too_short="history {value} is too short to learn from; use at least 1h (2d for "
        "model: seasonal), e.g. 7d",
        too_long="history {value} is longer than a Prometheus range query answers at a 5m "
        "step (11,000 points per series); use at most 28d",
    ),
]
"""What a forecast learns from: 1h to 28d."""
Period = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=2),
        timedelta(days=14),
        too_short="period {value} is too short to hold a cycle; use at least two sampleEvery, "
        "e.g. 10m",
        too_long="period {value} is longer than half the longest history (28d); use at most "
        "14d, e.g. 1d",
    ),
]
"""The cycle a seasonal forecast learns: 2s to 14d (within the policy: two ``sampleEvery`` to
half the ``history``)."""
DEFAULT_PERIOD: Final = timedelta(days=1)
"""A day: the cycle of most demand, and the only period with a weekly profile besides."""


class ForecastSpec(Frozen):
    """With ``statistic: forecast``: what each VM's demand is expected to be next."""

    horizon: Horizon = Field(
        default=timedelta(minutes=30),
        description="The demand expected over this span ahead; 1m to 1d.",
    )
    history: HistorySpan = Field(
        default=timedelta(days=7),
        description="What the model learns from, read from Prometheus at a 5m step; 1h to "
        "28d, at least 2d for seasonal.",
    )
    weight: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="The forecast's share of each VM's figure, 0-1; the window's mean has the "
        "rest.",
    )
    model: ForecastModel = Field(
        default=ForecastModel.SEASONAL, description="seasonal (daily and weekly) | trend."
    )
    period: Period = Field(
        default=DEFAULT_PERIOD,
        description="With model: seasonal, the cycle it learns; at least two sampleEvery, at "
        "most half the history. A day by default (with a weekly profile once the history spans "
        "two weeks); a shorter one is read at a finer step, period/48.",
    )


class PrometheusSpec(Frozen):
    """Where the load comes from with ``source: prometheus``; every query can be replaced."""

    url: str = Field(
        default=DEFAULT_PROMETHEUS_URL,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Base URL of the Prometheus server (its HTTP API is under /api/v1).",
    )
    vm_cpu: str = Field(
        default=DEFAULT_VM_CPU,
        min_length=1,
        alias="vmCpu",
        description="PromQL giving the CPU cores each VM uses at an instant, its series "
        "labelled domain=<VM name> (and uuid=<domain UUID> where the exporter gives it); "
        "evaluated over the window at a step of sampleEvery. Series of one VM at the same "
        "instant count once (the largest), not summed.",
    )
    host_pressure: str | None = Field(
        default=None,
        min_length=1,
        alias="hostPressure",
        description="Optional PromQL giving each host's CPU pressure as the share of time "
        "(0-1) some task waited for a CPU, labelled host=<host name>; added to the host's CPU "
        "utilisation (0.1 = 10 points).",
    )
    timeout: QueryTimeout = Field(
        default=timedelta(seconds=10),
        description="The longest one query may take, whole: connecting, Prometheus's "
        "evaluation and reading its answer, however slowly it comes; more than 0, at most 5m.",
    )
    max_answer: AnswerSize = Field(
        default=DEFAULT_MAX_ANSWER,
        alias="maxAnswer",
        description="The largest answer one query may give, decompressed; a larger one is "
        "read no further and the load is unknown. 64KiB to 1GiB.",
    )


class LoadSpec(Frozen):
    """How ``basis: used`` reads the load: over a window, never on one spike."""

    source: LoadSource = Field(
        default=LoadSource.SAMPLES, description="samples (kept by run) | prometheus."
    )
    window: Window = Field(
        default=timedelta(minutes=10),
        description="Every balance decision uses the load over this span; 10s to 7d.",
    )
    statistic: Statistic = Field(
        default=Statistic.MEAN,
        description="mean | p95 | max of the load over the window, or forecast: the window's "
        "mean blended with a forecast of the next horizon.",
    )
    sample_every: SampleEvery = Field(
        default=timedelta(seconds=30),
        alias="sampleEvery",
        description="How often run samples between rounds (samples), or the step of the range "
        "query (prometheus); 1s to 1h.",
    )
    prometheus: PrometheusSpec = Field(
        default_factory=PrometheusSpec, description="With source: prometheus: where and what."
    )
    forecast: ForecastSpec = Field(
        default_factory=ForecastSpec,
        description="With statistic: forecast: how far ahead, " "learning from what.",
    )


class LoadBasis(StrEnum):
    WINDOW = "window"
    """Each VM's load over the window (known or not)."""
    SAMPLE = "sample"
    """The observation's own short CPU sample: no window was at hand."""


class VmLoad(Frozen):
    """One VM's CPU, in host cores (1.0 = one core busy)."""

    now: float | None = Field(
        default=None, ge=0, description="The observation's own short sample, if any."
    )
    window: float | None = Field(
        default=None,
        ge=0,
        description="The statistic over the window; None when the window is mostly missing.",
    )
    covered: float = Field(
        default=0.0, ge=0, le=1, description="Share of the window samples cover."
    )
    forecast: float | None = Field(
        default=None,
        ge=0,
        description="With statistic: forecast, the model's figure for the next horizon (None: "
        "too little history); ``window`` is then the blend that was used.",
    )
    forecast_error: float | None = Field(
        default=None,
        ge=0,
        description="The forecast's mean absolute error over the last day, cores.",
    )
    mean: float | None = Field(
        default=None,
        ge=0,
        description="With statistic: forecast, the window's mean before the forecast was "
        "blended in (None where it is ``window`` itself).",
    )


class ForecastView(Frozen):
    """What a forecast made of one observation's load (``statistic: forecast``)."""

    horizon: Duration
    weight: float
    model: ForecastModel
    used: list[str] = Field(
        default_factory=list, description="VMs whose figure blends their forecast in."
    )
    no_history: list[str] = Field(
        default_factory=list,
        description="VMs with too little history for a forecast: the window's mean stands.",
    )
    ignored: dict[str, str] = Field(
        default_factory=dict,
        description="VM -> why its forecast was not used (its error over the last day was "
        "larger than the window's): the window's mean stands.",
    )
    errors: dict[str, float] = Field(
        default_factory=dict,
        description="VM -> its forecast's mean absolute error over the last day, cores (VMs "
        "whose error could be measured).",
    )
    error: float | None = Field(
        default=None,
        ge=0,
        description="The mean of ``errors`` over the VMs measured, cores.",
    )
    window_error: float | None = Field(
        default=None,
        ge=0,
        description="The same VMs' window's mean held over the horizon, measured the same way: "
        "the figure the forecast is set against.",
    )


class LoadView(Frozen):
    """What one snapshot's CPU figures were made of, attached by the load source.

    With ``basis: window`` each VM's ``cpu_used`` in the snapshot is its load over the window
    where known (``vms[name].window``); where unknown it keeps the short sample, which
    mandatory moves (hostLimit) may read but balance never decides on.
    """

    source: LoadSource
    basis: LoadBasis
    window: Duration
    statistic: Statistic
    until: AwareDatetime = Field(description="The end of the window.")
    vms: dict[str, VmLoad] = Field(default_factory=dict, description="By VM name.")
    pressure: dict[str, float] = Field(
        default_factory=dict,
        description="Host -> CPU utilisation points its pressure adds (hostPressure).",
    )
    unknown_hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Host -> why its own load (pressure) is unknown.",
    )
    problem: str | None = Field(
        default=None, description="Why the window could not be read at all (every VM unknown)."
    )
    out_of_range: dict[str, str] = Field(
        default_factory=dict,
        description="VM -> its CPU figures out of range (not a number, below zero, above what "
        "its vCPUs can use), which are not used.",
    )
    duplicates: dict[str, str] = Field(
        default_factory=dict,
        description="VM -> the series it was seen in at once for most of the window (the "
        "same exporter scraped twice): counted once, the largest at each instant.",
    )
    note: str | None = Field(
        default=None, description="Said in the plan, e.g. that the load is a short sample."
    )
    hold: str | None = Field(
        default=None, description="Why no balance move is made on this load (none when empty)."
    )
    forecast: ForecastView | None = Field(
        default=None, description="With statistic: forecast: which VMs were forecast."
    )


class VmSamples(Frozen):
    """The CPU readings ``run`` keeps of one VM, oldest first."""

    uuid: str = Field(description="The domain's UUID: another domain of the name starts anew.")
    readings: list[tuple[float, int, str, int]] = Field(
        default_factory=list,
        description="(seconds since the epoch, cumulative CPU time in ns, host, libvirt's "
        "domain ID) per reading.",
    )


class LoadSamples(Frozen):
    """What ``run`` keeps of the VMs' CPU between rounds, in its state directory."""

    cluster: str
    every: float = Field(gt=0, description="sampleEvery when they were taken, seconds.")
    last: float | None = Field(
        default=None, description="When the last sample was taken, seconds since the epoch."
    )
    vms: dict[str, VmSamples] = Field(default_factory=dict, description="By VM name.")
