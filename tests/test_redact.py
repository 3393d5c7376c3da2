"""One scrubber for every message: errors, log records (text and JSON, tracebacks included)."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.engine import logs
from reconciler.errors import GitError, ReconcilerError
from reconciler.redact import MASK, MAX_SCRUBBED, SECRET_ENV, register, scrub, scrub_parts

REPO = Path(__file__).resolve().parents[1]
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


# --- linear time, the same secrets removed, a bound on what is scrubbed -----------------------

OLD_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
"""The URL pattern scrub used before it was made linear: the reference for what it removes."""


def reference_scrub(text: str, secrets: list[str]) -> str:
    """What scrub did before (quadratic, so only for short texts)."""
    text = OLD_USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    for secret in sorted(secrets, key=lambda s: (-len(s), s)):
        text = text.replace(secret, MASK)
    return text


URLISH = "aZ9+.-:/@ \t\n\u2003é"
"""Characters that make and break URLs (scheme, separators, userinfo, whitespace). No
registered secret is made of them alone."""
SECRET_CHARS = "kqwKQW3478_"
"""Characters of the secrets of these tests: none in URLISH, no '*'."""

urlish_text = st.text(alphabet=URLISH, max_size=80)
secret_values = st.text(alphabet=SECRET_CHARS, min_size=4, max_size=12)


@given(urlish_text)
def test_scrub_removes_url_credentials_exactly_as_before(text: str) -> None:
    assert scrub(text) == reference_scrub(text, [])


@given(
    st.lists(secret_values, min_size=1, max_size=3, unique=True),
    st.lists(st.one_of(urlish_text, st.integers(min_value=0, max_value=2)), max_size=8),
)
def test_scrub_removes_every_known_secret_as_before(
    secrets: list[str], parts: list[object]
) -> None:
    text = "".join(secrets[p % len(secrets)] if isinstance(p, int) else str(p) for p in parts)
    with pytest.MonkeyPatch.context() as env:
        for name, value in zip(SECRET_ENV, secrets, strict=False):
            env.setenv(name, value)
        shown = scrub(text)
        expected = reference_scrub(text, secrets[: len(SECRET_ENV)])
    assert shown == expected
    assert not any(s in shown for s in secrets[: len(SECRET_ENV)])


ADVERSARIAL = [
    "a" * 200_000,  # a scheme that never meets '://'
    "a://" + "b" * 200_000,  # user info that never meets '@'
    "a" * 100_000 + "://" + "b" * 100_000,
    "a1+.-" * 40_000,
    "1" * 100_000 + "a" * 100_000,
    "ab://:" * 40_000,
    "x" * 100_000 + "://" + ":" * 100_000 + "/",
]


def test_scrub_takes_linear_time_on_inputs_that_made_it_quadratic() -> None:
    # each took from 20 s to minutes before (holding the GIL all along); now milliseconds.
    # A process of its own, so a regression fails at the bound instead of hanging the suite.
    code = (
        "import os, sys, json\n"
        "from reconciler.redact import scrub, scrub_parts\n"
        "for text in json.load(sys.stdin):\n"
        "    assert scrub(text) == text\n"
        # a secret that overlaps itself, at cuts through a long run of it
        "os.environ['RECONCILER_GIT_TOKEN'] = 'aaaa'\n"
        "head, tail = scrub_parts('a' * 500_000, 'a' * 500_000)\n"
        "assert 'aaaa' not in head + tail\n"
        "assert 'aaaa' not in scrub('a' * 3_000_000)\n"
        "print('done')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(ADVERSARIAL),
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO,
        check=False,
    )
    assert done.stdout.strip() == "done", done.stderr


def test_a_text_longer_than_the_bound_keeps_its_beginning_and_end_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "glpat-git-token-value")
    half = MAX_SCRUBBED // 2
    text = "BEGIN glpat-git-token-value " + "x" * (3 * MAX_SCRUBBED) + " https://u:pw@h END"
    shown = scrub(text)
    assert shown.startswith(f"BEGIN {MASK} x")
    assert shown.endswith(f" https://{MASK}@h END")
    left_out = len(text) - 2 * half
    assert f"[... {left_out} characters left out ...]" in shown
    assert len(shown) < MAX_SCRUBBED + 100


def test_the_bound_on_what_is_scrubbed_is_documented() -> None:
    docs = (REPO / "docs" / "run.md").read_text()
    said = " ".join(docs.split())
    assert f"longer than {MAX_SCRUBBED:,} characters keeps its first and its last" in said
    assert f"{MAX_SCRUBBED // 2:,}, with `[... N characters left out ...]`" in said


@pytest.mark.parametrize(
    ("secret", "where", "inside", "hidden"),
    [
        # the cut at the end of the kept beginning (or the start of the kept end) falls in
        # the middle of the secret: what of it is kept must not show
        ("glpat-git-token-value", "head", 10, "glpat-git-"),
        ("glpat-git-token-value", "tail", 10, "token-value"),
        ("https://alice:pw-1234@host/x", "head", 16, "alice:pw"),
        ("https://alice:pw-1234@host/x", "tail", 11, "ce:pw-1234"),
        ("https://alice:pw-1234@host/x", "tail", 6, "alice:pw-1234"),
    ],
)
def test_a_cut_through_a_secret_or_a_url_password_shows_no_part_of_it(
    secret: str, where: str, inside: int, hidden: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "glpat-git-token-value")
    half = MAX_SCRUBBED // 2
    size = 3 * MAX_SCRUBBED
    start = half - inside if where == "head" else size - half - inside
    text = "x" * start + secret + "x" * (size - start - len(secret))
    shown = scrub(text)
    kept = shown[: half + 10] if where == "head" else shown[-half - 10 :]
    assert MASK in kept
    for i in range(len(hidden) - 1):  # not a piece of it, of two characters or more
        assert hidden[i : i + 2] not in kept.replace("x", " "), (hidden[i : i + 2], kept)


@given(
    st.text(alphabet="xy ", max_size=30),
    st.sampled_from(["tok3n-kqw-7777", "https://kqw:7777-pw@h/x", "ssh://kqw@h"]),
    st.text(alphabet="xy ", max_size=30),
    st.data(),
)
def test_no_part_of_a_secret_across_a_cut_is_shown(
    before: str, secret: str, after: str, data: st.DataObject
) -> None:
    text = before + secret + after
    start = len(before)
    cut = data.draw(st.integers(min_value=start, max_value=start + len(secret)))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RECONCILER_FORGE_TOKEN", "tok3n-kqw-7777")
        env.setenv("RECONCILER_WEBHOOK_SECRET", "tok3n-kqw")  # the beginning of the other
        head, tail = scrub_parts(text[:cut], text[cut:])
        whole = scrub(text)
    secret_chars = set("kqw7")
    if not secret_chars & set(whole):  # what a whole scrub hides, a cut one hides too
        assert not secret_chars & set(head + tail), (text, cut, head, tail)
