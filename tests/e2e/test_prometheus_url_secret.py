"""A credential in the query string of the Prometheus URL: ``validate`` refuses it on its line
with the fix (the token's environment variable), and no command prints it, nor the client's
messages should such a URL reach it."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.prometheus.client import PrometheusClient
from reconciler.cli import main
from reconciler.errors import MetricsUnavailable
from reconciler.model.load import PrometheusSpec
from tests.config.clusters import cluster_yaml, policy_yaml, write_folder
from tests.net import free_port

SECRET = "q5ecret-in-the-query"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize(
    "url",
    [
        f"http://127.0.0.1:9090/?access_token={SECRET}",
        f"http://127.0.0.1:9090/prometheus?user=me&password={SECRET}",
        f"https://prometheus.example?token={SECRET}",
        f"http://127.0.0.1:9090/#{SECRET}",
    ],
)
def test_validate_refuses_a_query_string_and_never_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    policy = policy_yaml(
        "basis: used", f"load: {{source: prometheus, prometheus: {{url: '{url}'}}}}"
    )
    folder = write_folder(tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy})
    code, out = run(capsys, "validate", folder)
    assert code == 1, out
    assert "error: spec.load.prometheus.url:" in out
    assert "RECONCILER_PROMETHEUS_TOKEN" in out
    assert SECRET not in out
    code, out = run(capsys, "validate", folder, "--format", "json")
    assert code == 1
    assert SECRET not in out
    # nor does a command that reads the folder
    code, out = run(capsys, "plan", folder, "--state-dir", tmp_path / "state")
    assert code == 1, out
    assert SECRET not in out


def test_the_client_never_shows_a_query_string() -> None:
    url = f"http://127.0.0.1:{free_port()}/?token={SECRET}"
    with PrometheusClient(PrometheusSpec(url=url)) as client:
        assert SECRET not in repr(client)
        with pytest.raises(MetricsUnavailable) as err:
            client.range_query("up", start=0, end=60, step=15)
    assert SECRET not in str(err.value)
    assert f"127.0.0.1:{url.split(':')[2].split('/')[0]}" in err.value.message
