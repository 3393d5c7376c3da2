"""``statistic: forecast`` from a real Prometheus (Debian's ``/usr/bin/prometheus``) on three days
of series backfilled with ``promtool``: one more range query over the history, at a 5m step,
from which a VM with a daily cycle is forecast; a VM seen for a few hours only keeps its
window's mean, and says so. A history query that fails (a server on loopback that answers the
window and refuses the history) leaves the window's mean, not the load unknown."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from reconciler.adapters.load.sources import HISTORY_STEP, PrometheusLoad
from reconciler.model.load import LoadSpec
from reconciler.model.snapshot import Snapshot
from tests.core.builders import host_state, snapshot, vm
from tests.deploy.live import backfilled_prometheus
from tests.promhttp import fake_prometheus, matrix

DAY = 86400
STEP = 60
END = int(datetime.now(UTC).timestamp()) // 3600 * 3600 - 3600


def cycle(t: float) -> float:
    """Cores over the day: 0.5 at midnight (UTC), 2.5 at noon."""
    return 1.5 - math.cos(2 * math.pi * (t % DAY) / DAY)


def openmetrics() -> str:
    lines = [
        "# HELP libvirt_domain_info_cpu_time_seconds Amount of CPU time used by the domain.",
        "# TYPE libvirt_domain_info_cpu_time_seconds counter",
    ]
    for domain, since in (("cyclic", 3 * DAY), ("young", 6 * 3600)):
        total = 100.0
        for t in range(END - since, END + 1, STEP):
            total += cycle(t) * STEP
            lines.append(
                f'libvirt_domain_info_cpu_time_seconds_total{{domain="{domain}",'
                f'instance="a:9177"}} {total:.3f} {t}'
            )
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("prometheus")
    with backfilled_prometheus(folder, openmetrics(), scrape_interval="60s") as url:
        yield url


def spec_for(url: str) -> LoadSpec:
    return LoadSpec.model_validate(
        {
            "source": "prometheus",
            "window": "10m",
            "sampleEvery": "60s",
            "statistic": "forecast",
            "forecast": {"horizon": "30m", "history": "7d", "weight": 0.5},
            "prometheus": {
                "url": url,
                "vmCpu": "rate(libvirt_domain_info_cpu_time_seconds_total[5m])",
            },
        }
    )


def observed() -> Snapshot:
    return snapshot(
        [host_state("a", cpus=8)],
        [vm("cyclic", "a", cpu_used=1.0, vcpus=4), vm("young", "a", cpu_used=1.0, vcpus=4)],
    )


def test_a_daily_cycle_is_forecast_from_the_history_query(prometheus: str) -> None:
    now = datetime.fromtimestamp(END, UTC)
    out = PrometheusLoad().window(observed(), spec_for(prometheus), now)
    view = out.load
    assert view is not None
    assert view.problem is None
    assert view.forecast is not None
    assert view.forecast.used == ["cyclic"]
    assert view.forecast.no_history == ["young"]  # six hours: not two days
    coming = sum(cycle(END + k) for k in range(0, 1800, STEP)) / 30
    cyclic = view.vms["cyclic"]
    assert cyclic.forecast == pytest.approx(coming, rel=0.05)
    assert cyclic.forecast_error is not None
    assert cyclic.forecast_error < 0.05
    mean = sum(cycle(END - k) for k in range(0, 600, STEP)) / 10
    cpu = {str(v.name): v.cpu_used for v in out.vms}
    assert cpu["cyclic"] == pytest.approx(0.5 * coming + 0.5 * mean, rel=0.05)
    assert cpu["young"] == pytest.approx(mean, rel=0.05)  # its window's mean stands
    assert HISTORY_STEP == 300.0


def test_a_history_query_that_fails_leaves_the_window_not_the_load_unknown() -> None:
    now = datetime.fromtimestamp(END, UTC)
    window = [(float(t), 1.5) for t in range(END - 600, END + 1, 60)]
    asked: list[str] = []

    def answer(query: str) -> dict[str, object]:
        asked.append(query)
        if len(asked) == 1:  # the window
            return matrix(({"domain": "cyclic"}, window), ({"domain": "young"}, window))
        return {"status": "error", "errorType": "timeout", "error": "query timed out"}

    with fake_prometheus(answer) as server:
        out = PrometheusLoad().window(observed(), spec_for(server.url), now)
        history = server.queries[1]
    assert len(asked) == 2
    assert history["step"] == ["300"]
    assert float(history["end"][0]) - float(history["start"][0]) == 7 * DAY - 300
    view = out.load
    assert view is not None
    assert view.problem is None
    assert view.forecast is not None
    assert view.forecast.used == []
    assert view.forecast.no_history == ["cyclic", "young"]
    assert [v.cpu_used for v in out.vms] == [1.5, 1.5]
