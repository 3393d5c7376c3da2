"""``statistic: forecast`` with a 10-minute ``period`` from Prometheus (a server on loopback
answering as Prometheus's HTTP API does): the history is asked at a 48th of the period (12.5 s),
not 5 minutes, over the history alone, and the peak of the cycle is forecast before it comes;
the daily period still asks at 5 minutes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler.adapters.load.sources import PrometheusLoad
from reconciler.model.load import LoadSpec
from tests.core.builders import host_state, snapshot, vm
from tests.promhttp import FakePrometheus, fake_prometheus, matrix

PERIOD = 600
END = 1_800_000_000 - 1_800_000_000 % PERIOD + 150  # 90 s before a peak


def schedule(t: float) -> float:
    """0.1 cores, 0.95 from the 4th to the 7th minute of each 10."""
    return 0.95 if 240 <= t % PERIOD < 420 else 0.1


def spec_for(url: str, **forecast: object) -> LoadSpec:
    return LoadSpec.model_validate(
        {
            "source": "prometheus",
            "window": "1m",
            "sampleEvery": "5s",
            "statistic": "forecast",
            "forecast": {"history": "1h", "horizon": "3m", "weight": 1, **forecast},
            "prometheus": {"url": url},
        }
    )


def answering(box: list[FakePrometheus]) -> Any:
    def answer(query: str) -> dict[str, Any]:
        asked = box[0].queries[-1]
        start, end = float(asked["start"][0]), float(asked["end"][0])
        step = float(asked["step"][0])
        times = [start + k * step for k in range(round((end - start) / step) + 1)]
        # a rate point stands for the step before it
        return matrix(({"domain": "x"}, [(t, schedule(t - step)) for t in times]))

    return answer


def test_a_10_minute_period_reads_its_history_at_a_48th_of_it() -> None:
    box: list[FakePrometheus] = []
    with fake_prometheus(answering(box)) as server:
        box.append(server)
        now = datetime.fromtimestamp(END, UTC)
        observed = snapshot([host_state("a")], [vm("x", "a", vcpus=1)])
        out = PrometheusLoad().window(observed, spec_for(server.url, period="10m"), now)
        window, history = server.queries
    assert window["step"] == ["5"]
    assert history["step"] == ["12.5"]
    assert float(history["end"][0]) - float(history["start"][0]) == 3600 - 12.5
    view = out.load
    assert view is not None
    assert view.forecast is not None
    assert view.forecast.used == ["x"]
    x = view.vms["x"]
    # the next 3m on the history's grid: 14 steps of 12.5 s, each standing for the one before
    coming = sum(schedule(END + 12.5 * k) for k in range(14)) / 14
    assert x.forecast is not None
    assert abs(x.forecast - coming) <= 0.05 * coming
    assert x.mean is not None
    assert x.mean < 0.15


def test_the_daily_period_still_reads_its_history_every_5_minutes() -> None:
    box: list[FakePrometheus] = []
    with fake_prometheus(answering(box)) as server:
        box.append(server)
        now = datetime.fromtimestamp(END, UTC)
        observed = snapshot([host_state("a")], [vm("x", "a", vcpus=1)])
        out = PrometheusLoad().window(observed, spec_for(server.url, history="2d"), now)
        _, history = server.queries
    assert history["step"] == ["300"]
    assert out.load is not None
    assert out.load.forecast is not None
