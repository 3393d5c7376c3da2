"""Range queries against Prometheus's HTTP API (``/api/v1/query_range``), over httpx.

One GET per query, on a connection of its own, within the policy's ``timeout`` as a whole:
connecting, sending, Prometheus's evaluation (its own ``timeout`` parameter) and reading the
answer, however slowly a server sends it (:class:`Deadline` shuts the connection when the
time is up). The answer is streamed and read no further than ``maxAnswer`` bytes
(decompressed). A bearer token, when Prometheus sits behind authentication, comes from
``RECONCILER_PROMETHEUS_TOKEN`` and is only ever sent in the ``Authorization`` header.
Errors become the project's: no answer, a deadline passed, 429 or 5xx are
``MetricsUnavailable`` (the next round asks again), a refused query (400, 422: bad PromQL;
401, 403), an answer over the size cap or one that is not a matrix is ``MetricsError`` with
Prometheus's own words. Each series comes back with its labels, for the core to join
(``reconciler.core.load_series``); a value that is not a number, or a series that is not one,
is left out: a bad series never fails the round.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from reconciler.adapters.http.deadline import Deadline
from reconciler.core.load_series import Series
from reconciler.errors import MetricsError, MetricsUnavailable
from reconciler.model.load import PrometheusSpec
from reconciler.model.quantity import format_size
from reconciler.redact import scrub

TOKEN_ENV = "RECONCILER_PROMETHEUS_TOKEN"


class _TooLarge(Exception):
    pass


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
        self.max_answer = spec.max_answer
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"User-Agent": "reconciler"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            # a connection per query: the deadline shuts the connections it saw opened
            limits=httpx.Limits(max_keepalive_connections=0),
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:  # never the headers: they may hold the token
        return f"<PrometheusClient {self.shown}>"

    @property
    def shown(self) -> str:
        """The URL as messages show it: no user info, no query string, no fragment (where
        a token could sit, though ``validate`` refuses them)."""
        url = urlsplit(self.url)
        host = url.netloc.rpartition("@")[2]
        return scrub(urlunsplit((url.scheme, host, url.path, "", "")))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def range_query(self, query: str, *, start: float, end: float, step: float) -> list[Series]:
        """``query`` evaluated every ``step`` seconds from ``start`` to ``end``: each series
        with its labels and its points in time order."""
        where = f"Prometheus at {self.shown}"
        params: Mapping[str, str] = {
            "query": query,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
            "timeout": f"{self.timeout:g}s",
        }
        deadline = Deadline(self.timeout)
        deadline.start()
        try:
            status, body = self._get(f"{self.url}/api/v1/query_range", params, deadline)
        except _TooLarge as err:
            raise MetricsError(
                f"{where} answered {query!r} with more than it may send (larger than "
                f"{format_size(self.max_answer)}, maxAnswer): read no further",
                hint="raise spec.load.prometheus.maxAnswer, or ask for less: a shorter window, "
                "a longer sampleEvery, a query that gives one series per VM",
            ) from err
        except httpx.HTTPError as err:
            if deadline.passed or isinstance(err, httpx.TimeoutException):
                raise MetricsUnavailable(
                    f"{where} did not answer within {self.timeout:g}s (the whole query, from "
                    "connecting to the answer's last byte)",
                    hint="check that Prometheus runs and answers; the next round asks again",
                ) from err
            raise MetricsUnavailable(
                f"{where} could not be reached: {type(err).__name__}: "
                f"{scrub(str(err).replace(self.url, self.shown))}",
                hint="check spec.load.prometheus.url and that Prometheus runs",
            ) from err
        finally:
            deadline.stop()
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
        return _series(body, where)

    def _get(
        self, url: str, params: Mapping[str, str], deadline: Deadline
    ) -> tuple[int, dict[str, Any]]:
        """The status and the JSON object of the answer (empty when it is not one), read as
        it comes and no further than ``max_answer`` bytes."""
        extensions = {"trace": deadline.trace}
        with self._client.stream("GET", url, params=params, extensions=extensions) as response:
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > self.max_answer:
                raise _TooLarge
            data = bytearray()
            for chunk in response.iter_bytes():
                if len(data) + len(chunk) > self.max_answer:
                    raise _TooLarge
                data += chunk
            status = response.status_code
        return status, _json(data)


def _json(data: bytearray) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error_text(body: Mapping[str, Any]) -> str:
    kind, text = body.get("errorType"), body.get("error")
    if isinstance(text, str) and text:
        return scrub(f"{kind}: {text}" if isinstance(kind, str) and kind else text)[:500]
    return "no error text"


def _series(body: Mapping[str, Any], where: str) -> list[Series]:
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise MetricsError(
            f"{where} answered a {kind or 'result'} where a range query gives a matrix",
            hint="check the query in spec.load.prometheus",
        )
    result = data.get("result")
    out: list[Series] = []
    for series in result if isinstance(result, list) else []:
        if not isinstance(series, dict):
            continue
        metric, values = series.get("metric"), series.get("values")
        if not isinstance(metric, dict) or not isinstance(values, list):
            continue
        labels = {k: v for k, v in metric.items() if isinstance(k, str) and isinstance(v, str)}
        points = {p[0]: p[1] for p in map(_point, values) if p is not None}
        out.append(Series(labels, sorted(points.items())))
    return out


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
