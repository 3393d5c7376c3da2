"""The bounds of one Prometheus query, against a real HTTP server on loopback that answers as
Prometheus's API does but slowly or without end: the whole query ends at its ``timeout``
however the server trickles, and an answer larger than ``maxAnswer`` is read no further."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from reconciler.adapters.load.sources import PrometheusLoad
from reconciler.adapters.prometheus.client import PrometheusClient
from reconciler.core.load_view import unknown
from reconciler.errors import MetricsError, MetricsUnavailable
from reconciler.model.load import PrometheusSpec
from tests.adapters.test_prometheus_load import at_end, observed, spec_for
from tests.promhttp import fake_prometheus, matrix

MIB = 1024**2


def answer(query: str) -> dict[str, object]:
    return matrix(({"domain": "steady"}, [(t, 0.5) for t in range(0, 601, 15)]))


def spec(url: str, **more: object) -> PrometheusSpec:
    return PrometheusSpec.model_validate({"url": url, **more})


@pytest.mark.parametrize("where", ["trickle", "trickle_body"])
def test_a_server_that_trickles_is_given_up_at_the_query_deadline(where: str) -> None:
    with fake_prometheus(answer) as server:
        setattr(server, where, 0.2)  # a byte every 0.2 s: each read returns, the answer never ends
        server.lasting = 8
        started = time.monotonic()
        with (
            PrometheusClient(spec(server.url, timeout="1s")) as client,
            pytest.raises(MetricsUnavailable, match="did not answer within 1s") as err,
        ):
            client.range_query("q", start=0, end=600, step=15)
        took = time.monotonic() - started
    # ended near the deadline, not when the server stopped sending (30 s)
    assert 0.9 < took < 4, took
    assert server.sent > 1  # it did send: each read alone stayed within the timeout
    assert "whole query" in err.value.message


def test_a_trickling_server_leaves_the_load_unknown_within_the_deadline() -> None:
    with fake_prometheus(answer) as server:
        server.trickle_body = 0.2
        server.lasting = 8
        started = time.monotonic()
        out = PrometheusLoad().window(observed(), spec_for(server.url, timeout="1s"), at_end())
        took = time.monotonic() - started
    assert took < 4, took
    assert out.load is not None
    assert out.load.problem is not None
    assert "did not answer within 1s" in out.load.problem
    assert unknown(out).vms == {"steady", "spike", "base", "quiet"}


def test_an_answer_over_the_size_cap_is_read_no_further() -> None:
    with fake_prometheus(answer) as server:
        server.flood = 200 * MIB
        tracemalloc.start()
        try:
            with (
                PrometheusClient(spec(server.url, maxAnswer="1MiB")) as client,
                pytest.raises(MetricsError, match="larger than 1MiB") as err,
            ):
                client.range_query("q", start=0, end=600, step=15)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sent = server.sent
    assert "maxAnswer" in (err.value.hint or "")
    # streamed and stopped at the cap: what was held, and what the server got to send, is
    # the cap and the sockets' buffers, not the 200 MiB it had
    assert peak < 8 * MIB, peak
    assert sent < 64 * MIB, sent


def test_an_answer_whose_length_is_over_the_cap_is_not_read() -> None:
    points = [(t, 0.5) for t in range(0, 601, 15)]
    big = matrix(*(({"domain": f"vm{i}"}, points) for i in range(400)))
    with fake_prometheus(lambda q: big) as server:
        with (
            PrometheusClient(spec(server.url, maxAnswer="64KiB")) as client,
            pytest.raises(MetricsError, match="larger than 64KiB"),
        ):
            client.range_query("q", start=0, end=600, step=15)
        assert server.sent == 0 or server.sent < 1 * MIB
        # under the cap, the same answer is read in full
        with PrometheusClient(spec(server.url, maxAnswer="4MiB")) as client:
            series = client.range_query("q", start=0, end=600, step=15)
    assert len(series) == 400


def test_the_bounds_are_part_of_the_policy() -> None:
    default = PrometheusSpec()
    assert default.timeout.total_seconds() == 10
    assert default.max_answer == 32 * MIB
    with pytest.raises(ValueError, match="maxAnswer"):
        PrometheusSpec.model_validate({"maxAnswer": "1KiB"})
