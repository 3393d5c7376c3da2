"""Range queries against Prometheus's HTTP API (``/api/v1/query_range``), over httpx.

One GET per query, within the policy's ``timeout`` (each of connecting, sending and reading,
and Prometheus's own evaluation timeout). A bearer token, when Prometheus sits behind
authentication, comes from ``RECONCILER_PROMETHEUS_TOKEN`` and is only ever sent in the
``Authorization`` header. Errors become the project's: no answer, a timeout, 429 or 5xx are
``MetricsUnavailable`` (the next round asks again), a refused query (400, 422: bad PromQL;
401, 403) or an answer that is not a matrix is ``MetricsError`` with Prometheus's own words.
A series without the label that names it is left out, and so is a value that is not a number:
a bad series never fails the round.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import httpx

from reconciler.errors import MetricsError, MetricsUnavailable
from reconciler.model.load import PrometheusSpec
from reconciler.redact import scrub

TOKEN_ENV = "RECONCILER_PROMETHEUS_TOKEN"
Points = dict[str, list[tuple[float, float]]]
"""Label value -> (time, value) points, in time order."""


class PrometheusClient:
    """Range queries to one Prometheus server."""

    def __init__(
        self,
        spec: PrometheusSpec,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = spec.url.rstrip("/")
        self.timeout = spec.timeout.total_seconds()
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"User-Agent": "reconciler"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:  # never the headers: they may hold the token
        return f"<PrometheusClient {scrub(self.url)}>"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def range_query(
        self, query: str, *, start: float, end: float, step: float, label: str
    ) -> Points:
        """``query`` evaluated every ``step`` seconds from ``start`` to ``end``, by the value
        of ``label`` of each series (series of the same value are added up)."""
        where = f"Prometheus at {scrub(self.url)}"
        params: Mapping[str, str] = {
            "query": query,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
            "timeout": f"{self.timeout:g}s",
        }
        try:
            response = self._client.get(f"{self.url}/api/v1/query_range", params=params)
        except httpx.TimeoutException as err:
            raise MetricsUnavailable(
                f"{where} did not answer within {self.timeout:g}s ({type(err).__name__})",
                hint="check that Prometheus runs and answers; the next round asks again",
            ) from err
        except httpx.HTTPError as err:
            raise MetricsUnavailable(
                f"{where} could not be reached: {type(err).__name__}: {scrub(str(err))}",
                hint="check spec.load.prometheus.url and that Prometheus runs",
            ) from err
        body = _json(response)
        status = response.status_code
        if status == 429 or status >= 500:
            raise MetricsUnavailable(f"{where} answered {status}: {_error_text(body)}")
        if status != 200 or body.get("status") != "success":
            hint = (
                f"give a token with read access in {TOKEN_ENV}"
                if status in (401, 403)
                else "check the query in spec.load.prometheus (try it in Prometheus's web UI)"
            )
            raise MetricsError(
                f"{where} refused {query!r}: {status} {_error_text(body)}", hint=hint
            )
        return _points(body, label, where)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error_text(body: Mapping[str, Any]) -> str:
    kind, text = body.get("errorType"), body.get("error")
    if isinstance(text, str) and text:
        return scrub(f"{kind}: {text}" if isinstance(kind, str) and kind else text)[:500]
    return "no error text"


def _points(body: Mapping[str, Any], label: str, where: str) -> Points:
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise MetricsError(
            f"{where} answered a {kind or 'result'} where a range query gives a matrix",
            hint="check the query in spec.load.prometheus",
        )
    result = data.get("result")
    out: dict[str, dict[float, float]] = {}
    for series in result if isinstance(result, list) else []:
        if not isinstance(series, dict):
            continue
        metric = series.get("metric")
        name = metric.get(label) if isinstance(metric, dict) else None
        values = series.get("values")
        if not isinstance(name, str) or not name or not isinstance(values, list):
            continue
        points = out.setdefault(name, {})
        for pair in values:
            point = _point(pair)
            if point is not None:
                t, v = point
                points[t] = points.get(t, 0.0) + v
    return {name: sorted(points.items()) for name, points in out.items()}


def _point(pair: object) -> tuple[float, float] | None:
    if not isinstance(pair, list) or len(pair) != 2:
        return None
    try:
        t, v = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        return None
    if not math.isfinite(t) or not math.isfinite(v):
        return None
    return t, v
