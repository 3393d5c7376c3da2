"""Checks of ``spec.load``: a window its sampling can fill, a Prometheus URL without secrets
(no user info, no query string), a ``prometheus`` section that is not read, a forecast with
history enough to learn from, a seasonal period its sampling and history can hold (and
settings that are not read)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from reconciler.config.findings import Finding, Severity, finding_at
from reconciler.config.yaml_source import DocPath, Document
from reconciler.core.forecast import MAX_POINTS, PHASES, phase_step
from reconciler.model.load import MAX_SAMPLES, ForecastModel, LoadSource, LoadSpec, Statistic
from reconciler.model.policy import BalancePolicySpec
from reconciler.model.quantity import format_duration


def _given(doc: Document | None, *path: str) -> bool:
    """Whether the policy file writes ``path`` itself (not a default)."""
    if doc is None:
        return False
    node: object = doc.data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def load_findings(spec: BalancePolicySpec, policy: Document | None) -> list[Finding]:
    """Every problem of ``spec.load`` in the policy document ``policy``."""
    load = spec.load
    base: DocPath = ("spec", "load")
    out: list[Finding] = []
    window, every = load.window, load.sample_every
    shown_window, shown_every = format_duration(window), format_duration(every)
    if window < 2 * every:
        out.append(
            finding_at(
                policy,
                (*base, "window"),
                Severity.ERROR,
                f"window {shown_window} holds fewer than two samples taken every {shown_every}: "
                "no load could ever be told over it",
                f"use a window of at least {format_duration(2 * every)}, or a shorter "
                "sampleEvery",
            )
        )
    samples = window / every
    if samples > MAX_SAMPLES:
        fewer = timedelta(seconds=-(-window.total_seconds() // MAX_SAMPLES))
        out.append(
            finding_at(
                policy,
                (*base, "sampleEvery"),
                Severity.ERROR,
                f"a {shown_window} window sampled every {shown_every} holds {samples:.0f} "
                f"samples per VM; at most {MAX_SAMPLES}",
                f"use sampleEvery: {format_duration(fewer)} or more, or a shorter window",
            )
        )
    url = urlsplit(load.prometheus.url)
    if url.password is not None or url.username is not None:
        out.append(
            finding_at(
                policy,
                (*base, "prometheus", "url"),
                Severity.ERROR,
                "the Prometheus URL holds credentials, which would be kept in git",
                "remove user:password@ from it; give a bearer token in "
                "RECONCILER_PROMETHEUS_TOKEN instead",
            )
        )
    if "?" in load.prometheus.url or "#" in load.prometheus.url:
        # never shown: a token in it would reach every log and CI run
        out.append(
            finding_at(
                policy,
                (*base, "prometheus", "url"),
                Severity.ERROR,
                "the Prometheus URL has a query string or fragment (not shown): a base URL "
                "takes none (the API's path is added after it), and a token in it would be kept "
                "in git and shown in messages",
                "remove the ? or # and what follows; give a bearer token in "
                "RECONCILER_PROMETHEUS_TOKEN, sent only in the Authorization header",
            )
        )
    if load.source is LoadSource.SAMPLES and _given(policy, "spec", "load", "prometheus"):
        out.append(
            finding_at(
                policy,
                (*base, "prometheus"),
                Severity.WARNING,
                "prometheus is not read: the load comes from run's own samples (source: samples)",
                "set source: prometheus to read it, or remove it",
            )
        )
    out.extend(_forecast_findings(load, policy))
    return out


SEASONAL_HISTORY = timedelta(days=2)


def _forecast_findings(load: LoadSpec, policy: Document | None) -> list[Finding]:
    base: DocPath = ("spec", "load", "forecast")
    spec = load.forecast
    if load.statistic is not Statistic.FORECAST:
        if _given(policy, "spec", "load", "forecast"):
            return [
                finding_at(
                    policy,
                    base,
                    Severity.WARNING,
                    f"forecast is not read: the load is the window's {load.statistic.value}",
                    "set statistic: forecast to read it, or remove it",
                )
            ]
        return []
    out: list[Finding] = []
    history = spec.history
    if spec.model is ForecastModel.SEASONAL and _given(
        policy, "spec", "load", "forecast", "period"
    ):
        out.extend(_period_findings(load, policy))
    elif spec.model is ForecastModel.SEASONAL and history < SEASONAL_HISTORY:
        out.append(
            finding_at(
                policy,
                (*base, "history"),
                Severity.ERROR,
                f"history {format_duration(history)} is shorter than the two days a seasonal "
                "forecast needs to see a day's cycle twice: no VM would ever be forecast",
                "use history: 2d or more (7d by default), or model: trend",
            )
        )
    if spec.model is ForecastModel.TREND and _given(policy, "spec", "load", "forecast", "period"):
        out.append(
            finding_at(
                policy,
                (*base, "period"),
                Severity.WARNING,
                "period is not read: a trend follows no cycle (model: trend)",
                "set model: seasonal to read it, or remove it",
            )
        )
    span = max(load.window, 2 * spec.horizon)
    if spec.model is ForecastModel.TREND and history < span:
        out.append(
            finding_at(
                policy,
                (*base, "history"),
                Severity.ERROR,
                f"history {format_duration(history)} is shorter than the "
                f"{format_duration(span)} a trend is drawn through (the window or twice the "
                "horizon, the longer)",
                f"use history: {format_duration(span)} or more",
            )
        )
    return out


def _period_findings(load: LoadSpec, policy: Document | None) -> list[Finding]:
    """A seasonal ``period`` the policy gives: two samples at least, seen twice in the
    history, and a history its step keeps within ``MAX_POINTS``."""
    base: DocPath = ("spec", "load", "forecast")
    spec = load.forecast
    period, history, every = spec.period, spec.history, load.sample_every
    shown, shown_history = format_duration(period), format_duration(history)
    out: list[Finding] = []
    if period < 2 * every:
        out.append(
            finding_at(
                policy,
                (*base, "period"),
                Severity.ERROR,
                f"period {shown} holds fewer than two samples taken every "
                f"{format_duration(every)}: no cycle could be told",
                f"use a period of at least {format_duration(2 * every)}, or a shorter "
                "sampleEvery",
            )
        )
    if 2 * period > history:
        out.append(
            finding_at(
                policy,
                (*base, "period"),
                Severity.ERROR,
                f"period {shown} is longer than half the history {shown_history}: a seasonal "
                "forecast needs to see its cycle twice, no VM would ever be forecast",
                f"use history: {format_duration(2 * period)} or more, or a period of at most "
                f"{format_duration(history / 2)}",
            )
        )
    step = max(every.total_seconds(), phase_step(load))
    points = history.total_seconds() / step
    if points > MAX_POINTS:
        longest = timedelta(seconds=MAX_POINTS * step // 60 * 60)
        out.append(
            finding_at(
                policy,
                (*base, "history"),
                Severity.ERROR,
                f"history {shown_history} read every {format_duration(timedelta(seconds=step))} "
                f"(a {PHASES}th of the {shown} period, or sampleEvery) holds {points:.0f} points "
                f"per VM; at most {MAX_POINTS}",
                f"use history: {format_duration(longest)} or less, or a longer period",
            )
        )
    return out
