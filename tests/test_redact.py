"""One scrubber for every message: errors, log records (text and JSON, tracebacks included)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from reconciler.engine import logs
from reconciler.errors import GitError, ReconcilerError
from reconciler.redact import register, scrub

URL = "https://alice:s3cr3t-token@git.example.com/infra/state.git"


def test_scrub_takes_userinfo_out_of_every_url() -> None:
    assert scrub("ssh://git:pw@h/x and https://t@h/y") == "ssh://***@h/x and https://***@h/y"
    assert scrub(URL) == "https://***@git.example.com/infra/state.git"
    assert scrub("no url here") == "no url here"


def test_scrub_masks_registered_secrets_and_the_tokens_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register("b64-Y3JlZGVudGlhbA")
    assert scrub("Authorization: Basic b64-Y3JlZGVudGlhbA") == "Authorization: Basic ***"
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", "ghp_forge-token-value")
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "glpat-git-token-value")
    assert scrub("bad ghp_forge-token-value, glpat-git-token-value") == "bad ***, ***"
    register("ab")  # too short to mask without masking ordinary words
    assert scrub("abc") == "abc"


def test_every_error_scrubs_its_message_and_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", "ghp_forge-token-value")
    err = GitError(f"cannot fetch {URL}", hint="token ghp_forge-token-value was refused")
    assert "s3cr3t" not in str(err)
    assert "s3cr3t" not in err.message
    assert err.hint == "token *** was refused"
    assert "s3cr3t" not in repr(ReconcilerError(URL))


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_records_are_scrubbed_message_fields_and_traceback(
    fmt: logs.LogFormat, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "glpat-git-token-value")
    stream = io.StringIO()
    root = logging.getLogger("reconciler")
    saved = (list(root.handlers), root.level, root.propagate)
    logs.configure(fmt, stream=stream)
    log = logging.getLogger("reconciler.test")
    try:
        with logs.bound(cluster="lab", repo=URL):
            log.warning("cannot reach %s", URL)
            try:
                raise RuntimeError(f"token glpat-git-token-value for {URL}")
            except RuntimeError:
                log.exception("round failed")
    finally:
        root.handlers[:], root.level, root.propagate = saved
    out = stream.getvalue()
    assert "s3cr3t" not in out
    assert "glpat-git-token-value" not in out
    assert "https://***@git.example.com" in out
    assert "RuntimeError: token *** for https://***@" in out
    if fmt == "json":
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert lines[0]["message"] == "cannot reach https://***@git.example.com/infra/state.git"
        assert "RuntimeError" in lines[1]["error"]
