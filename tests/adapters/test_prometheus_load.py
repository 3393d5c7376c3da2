"""The load over a window from a real Prometheus (Debian's ``/usr/bin/prometheus``), started on
a free loopback port on hours of series backfilled with ``promtool tsdb create-blocks-from
openmetrics``: where the latest instant and the window disagree, the window wins. And what a
Prometheus that is down, hangs or refuses the query gives: unknown load, never zero, never a
failed round."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from reconciler.adapters.load.sources import PrometheusLoad
from reconciler.adapters.prometheus.client import PrometheusClient
from reconciler.core.load_series import by_vm
from reconciler.core.load_view import unknown
from reconciler.core.planner import plan
from reconciler.engine.load_window import WindowedObserver
from reconciler.errors import MetricsError, MetricsUnavailable
from reconciler.model.history import History
from reconciler.model.load import LoadSpec, PrometheusSpec, Statistic
from reconciler.model.snapshot import Snapshot
from tests.core.builders import desired, host, host_state, snapshot, vm
from tests.deploy.live import backfilled_prometheus
from tests.net import free_port

STEP = 15
HOURS = 3
# Three VMs on host a and one on b. Over the last 10 minutes "steady" used 2 cores all the time
# but rests in the last minute, "spike" idled and only woke in the last minute: the latest
# instant says spike is the busy one, the window says steady is.
END = int(datetime.now(UTC).timestamp()) // STEP * STEP - 600


def cores(domain: str, t: int) -> float:
    last_minute = t > END - 60
    if domain == "steady":
        return 0.0 if last_minute else 2.0
    if domain == "spike":
        return 3.0 if last_minute else 0.05
    return 1.0 if domain == "base" else 0.1


def openmetrics() -> str:
    lines = [
        "# HELP libvirt_domain_info_cpu_time_seconds Amount of CPU time used by the domain.",
        "# TYPE libvirt_domain_info_cpu_time_seconds counter",
    ]
    vms = (("steady", "a:9177"), ("spike", "a:9177"), ("base", "a:9177"), ("quiet", "b:9177"))
    for domain, instance in vms:
        total = 100.0
        for t in range(END - HOURS * 3600, END + 1, STEP):
            total += cores(domain, t) * STEP
            lines.append(
                f'libvirt_domain_info_cpu_time_seconds_total{{domain="{domain}",'
                f'instance="{instance}"}} {total:.3f} {t}'
            )
    # "reborn" was deleted two minutes before the end and created again under its name (a new
    # UUID, a counter from zero); "tripled" is scraped from one exporter by three jobs
    for uuid, since, until, used in (("old", -HOURS * 3600, -120, 2.0), ("", -105, 0, 0.1)):
        total = 100.0
        for t in range(END + since, END + until + 1, STEP):
            total += used * STEP
            lines.append(
                f'libvirt_domain_info_cpu_time_seconds_total{{domain="reborn",'
                f'uuid="uuid-reborn{uuid and "-" + uuid}",instance="b:9177"}} {total:.3f} {t}'
            )
    for job in ("libvirt", "libvirt-dr", "federate"):
        total = 100.0
        for t in range(END - HOURS * 3600, END + 1, STEP):
            total += 0.5 * STEP
            lines.append(
                f'libvirt_domain_info_cpu_time_seconds_total{{domain="tripled",'
                f'instance="b:9177",job="{job}"}} {total:.3f} {t}'
            )
    lines.append("# HELP node_pressure_cpu_waiting_seconds Time tasks waited for a CPU.")
    lines.append("# TYPE node_pressure_cpu_waiting_seconds counter")
    for name, share in (("a", 0.0), ("b", 0.3)):
        total = 0.0
        for t in range(END - HOURS * 3600, END + 1, STEP):
            total += share * STEP
            lines.append(
                f'node_pressure_cpu_waiting_seconds_total{{instance="{name}:9100"}} {total} {t}'
            )
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("prometheus")
    with backfilled_prometheus(folder, openmetrics(), scrape_interval="15s") as url:
        yield url


SPEC = LoadSpec.model_validate({"source": "prometheus", "window": "10m", "sampleEvery": "15s"})


def spec_for(url: str, **prometheus: object) -> LoadSpec:
    return SPEC.model_copy(
        update={"prometheus": PrometheusSpec.model_validate({"url": url, **prometheus})}
    )


def observed() -> Snapshot:
    # the observation's own short sample caught the last minute: spike busy, steady resting
    return snapshot(
        [host_state("a", cpus=8), host_state("b", cpus=8), host_state("c", cpus=8)],
        [
            vm("steady", "a", cpu_used=0.0),
            vm("spike", "a", cpu_used=3.0),
            vm("base", "a", cpu_used=1.0),
            vm("quiet", "b", cpu_used=0.1),
        ],
    )


def at_end() -> datetime:
    return datetime.fromtimestamp(END, UTC)


def test_the_window_wins_over_the_latest_instant(prometheus: str) -> None:
    out = PrometheusLoad().window(observed(), spec_for(prometheus), at_end())
    cpu = {str(v.name): v.cpu_used for v in out.vms}
    # over 10 minutes: steady 2 cores for 9 of them, spike 3 cores for 1 (rate over 1m)
    assert cpu["steady"] == pytest.approx(1.8, abs=0.15)
    assert cpu["spike"] == pytest.approx(0.35, abs=0.15)
    assert cpu["quiet"] == pytest.approx(0.1, abs=0.01)
    assert out.load is not None
    assert out.load.vms["spike"].now == 3.0
    assert out.load.vms["steady"].covered > 0.95
    assert not unknown(out).vms
    # the latest instant alone (a 1-minute window read as max over its one step)
    with PrometheusClient(spec_for(prometheus).prometheus) as client:
        series = client.range_query(SPEC.prometheus.vm_cpu, start=END, end=END, step=STEP)
    instant = {s.labels["domain"]: s.points for s in series}
    assert instant["spike"][0][1] > instant["steady"][0][1]


def test_the_planner_balances_on_the_window(prometheus: str) -> None:
    d = desired(
        [host(n) for n in ("a", "b", "c")],
        score={"cpu": 1, "memory": 0},
        threshold=20,
        cooldown="0s",
    )
    instant = plan(d, observed(), History(), now=at_end())
    window = plan(
        d,
        PrometheusLoad().window(observed(), spec_for(prometheus), at_end()),
        History(),
        now=at_end(),
    )
    # the instant moves the guest that spiked a moment ago, the window the one busy all along
    assert [m.vm for m in instant.moves] == ["spike"]
    assert window.moves[0].vm == "steady"
    assert window.moves[0].target == "c"


def test_statistics_and_pressure_by_host_label(prometheus: str) -> None:
    pressure = (
        'label_replace(rate(node_pressure_cpu_waiting_seconds_total[1m]), "host", "$1", '
        '"instance", "([^:]+).*")'
    )
    spec = spec_for(prometheus, hostPressure=pressure).model_copy(
        update={"statistic": Statistic.MAX}
    )
    out = PrometheusLoad().window(observed(), spec, at_end())
    assert out.load is not None
    assert out.load.pressure == {"a": pytest.approx(0.0), "b": pytest.approx(30.0, abs=0.5)}
    assert out.load.unknown_hosts == {"c": "no CPU pressure series for it"}
    assert {str(v.name): v.cpu_used for v in out.vms}["spike"] == pytest.approx(3.0, abs=0.1)


def test_a_new_vm_and_a_vm_of_another_label_are_unknown_not_idle(prometheus: str) -> None:
    snap = observed()
    newcomer = vm("newcomer", "b", cpu_used=0.0)
    snap = snap.model_copy(update={"vms": [*snap.vms, newcomer]})
    # a window before the series began: nothing of it covered
    early = datetime.fromtimestamp(END - HOURS * 3600 - 300, UTC)
    out = PrometheusLoad().window(snap, spec_for(prometheus), early)
    assert unknown(out).vms == {"steady", "spike", "base", "quiet", "newcomer"}
    out = PrometheusLoad().window(snap, spec_for(prometheus), at_end())
    assert unknown(out).vms == {"newcomer"}
    assert out.load is not None
    assert out.load.vms["newcomer"].window is None


def test_a_reborn_vm_and_one_scraped_by_three_jobs_on_the_default_query(prometheus: str) -> None:
    snap = observed()
    again = vm("reborn", "b", cpu_used=0.1)  # its UUID is uuid-reborn, the old one's another
    snap = snap.model_copy(update={"vms": [*snap.vms, again, vm("tripled", "b", cpu_used=0.5)]})
    out = PrometheusLoad().window(snap, spec_for(prometheus), at_end())
    assert out.load is not None
    # summed by domain, the new VM read the old one's 2 cores over most of the window
    assert out.load.vms["reborn"].window is None
    assert out.load.vms["reborn"].covered < 0.3
    assert "reborn" in unknown(out).vms
    # summed, three jobs read 1.5 cores; counted once, 0.5, and said
    assert out.load.vms["tripled"].window == pytest.approx(0.5, abs=0.02)
    assert out.load.duplicates == {"tripled": "3 series (job: federate, libvirt, libvirt-dr)"}


def test_a_refused_query_is_a_metrics_error_and_unknown_load(prometheus: str) -> None:
    spec = spec_for(prometheus, vmCpu="rate(libvirt_domain_info_cpu_time_seconds_total[1m]")
    with PrometheusClient(spec.prometheus) as client, pytest.raises(MetricsError) as err:
        client.range_query(spec.prometheus.vm_cpu, start=END - 60, end=END, step=STEP)
    assert "refused" in err.value.message
    assert "bad_data" in err.value.message
    out = PrometheusLoad().window(observed(), spec, at_end())
    assert out.load is not None
    assert out.load.problem is not None
    assert "refused" in out.load.problem
    assert unknown(out).vms == {"steady", "spike", "base", "quiet"}


def test_a_prometheus_that_is_down_gives_unknown_load() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with (
        PrometheusClient(spec_for(url).prometheus) as client,
        pytest.raises(MetricsUnavailable, match="could not be reached"),
    ):
        client.range_query("up", start=0, end=60, step=15)
    observer = WindowedObserver(
        _Fixed(observed()), spec_for(url), PrometheusLoad(), lambda: at_end()
    )
    out = observer.observe()
    assert out.load is not None
    assert out.load.problem is not None
    # the VMs keep their short sample for mandatory moves, but balance does not use it
    assert {v.name: v.cpu_used for v in out.vms} == {
        "steady": 0.0,
        "spike": 3.0,
        "base": 1.0,
        "quiet": 0.1,
    }
    assert unknown(out).hosts.keys() == {"a", "b"}
    # a fresh look at a host (admission's) is read on the round's window
    assert unknown(observer.observe_hosts(["a"])).vms == {"steady", "spike", "base"}


def test_a_prometheus_that_hangs_is_given_up_within_the_timeout() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        held: list[socket.socket] = []

        def accept() -> None:
            conn, _ = server.accept()
            held.append(conn)  # accepted, never answered

        threading.Thread(target=accept, daemon=True).start()
        spec = spec_for(f"http://127.0.0.1:{port}", timeout="1s")
        started = time.monotonic()
        with (
            PrometheusClient(spec.prometheus) as client,
            pytest.raises(MetricsUnavailable, match="did not answer within 1s"),
        ):
            client.range_query("up", start=0, end=60, step=15)
        assert time.monotonic() - started < 10
        for conn in held:
            conn.close()


class _Fixed:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def observe(self) -> Snapshot:
        return self.snap

    def observe_hosts(self, hosts: object) -> Snapshot:
        return self.snap.model_copy(update={"vms": [v for v in self.snap.vms if v.host in ("a",)]})


def test_the_token_goes_only_in_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_PROMETHEUS_TOKEN", "s3cret-token")
    with PrometheusClient(spec_for("http://127.0.0.1:1").prometheus) as client:
        assert "s3cret" not in repr(client)
        with pytest.raises(MetricsUnavailable) as err:
            client.range_query("up", start=0, end=60, step=15)
    assert "s3cret" not in str(err.value)


def test_bad_series_are_left_out_and_a_bad_answer_is_an_error() -> None:
    """What no real Prometheus sends, but a proxy in front of one might."""
    answers = iter(
        [
            {
                "status": "success",
                "data": {
                    "resultType": "matrix",
                    "result": [
                        {"metric": {"domain": "a"}, "values": [[1, "0.5"], [2, "NaN"], [3, "x"]]},
                        {"metric": {"domain": "a"}, "values": [[1, "0.25"], "junk"]},
                        {"metric": {"vm": "b"}, "values": [[1, "1"]]},
                        {"metric": {"domain": "c"}, "values": "junk"},
                        "junk",
                    ],
                },
            },
            {"status": "success", "data": {"resultType": "vector", "result": []}},
            "not an object",
        ]
    )

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=next(answers))

    spec = spec_for("http://prometheus.invalid").prometheus
    with PrometheusClient(spec, transport=httpx.MockTransport(answer)) as client:
        series = client.range_query("q", start=0, end=3, step=1)
        assert [(dict(s.labels), list(s.points)) for s in series] == [
            ({"domain": "a"}, [(1.0, 0.5)]),
            ({"domain": "a"}, [(1.0, 0.25)]),
            ({"vm": "b"}, [(1.0, 1.0)]),
        ]
        # joined by the core: the VM's two series at one instant count once, the largest
        joined = by_vm(series, [vm("a", "x"), vm("b", "x")])
        assert joined.points == {"a": [(1.0, 0.5)]}
        with pytest.raises(MetricsError, match="answered a vector"):
            client.range_query("q", start=0, end=3, step=1)
        with pytest.raises(MetricsError, match="refused"):
            client.range_query("q", start=0, end=3, step=1)
