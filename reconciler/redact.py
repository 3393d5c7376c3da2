"""Secrets out of text: the one place that scrubs messages, log records and git's output.

``scrub`` replaces the userinfo of every URL (``https://user:token@host/x`` becomes
``https://***@host/x``) and every secret this process knows of with ``***``: the values of
the environment variables in ``SECRET_ENV`` (read each time, so a token set later counts)
and whatever ``register`` was given (a password taken out of a repository URL, the Basic
credential made from it). ``ReconcilerError`` scrubs its message and hint with it, the log
handlers with ``ScrubFilter`` (``reconciler.engine.logs``, which keeps ``logging`` off the path
of commands that never log), and the adapters every output of git and of the forges before it
reaches a message.

**Bounds.** ``scrub`` takes time linear in the text, whatever it holds (no pattern that
backtracks over what it has seen). A text longer than ``MAX_SCRUBBED`` characters keeps its
first and its last half, with ``[... N characters left out ...]`` between. ``scrub_parts``
scrubs the two ends of a text whose middle was cut out (a command's kept output): a secret
or a URL's user info that the cut goes through shows no part of itself on either side; what
might be one at a cut is masked.

Standard library only and outside the layers, so the errors, the adapters and the engine can
all use it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from typing import Final

SECRET_ENV = (
    "RECONCILER_GIT_TOKEN",
    "RECONCILER_FORGE_TOKEN",
    "RECONCILER_WEBHOOK_SECRET",
    "RECONCILER_PROMETHEUS_TOKEN",
)
"""Environment variables whose values are secrets wherever they appear."""

MASK = "***"
_MIN_SECRET = 4  # shorter values would mask ordinary words
MAX_SCRUBBED: Final = 1024 * 1024
"""Characters of a text scrubbed and kept; a longer one keeps its first and its last half."""
_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[0-9+.-]*[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@"
)
"""A URL's scheme and user info. It is tried only where a run of scheme characters begins
(the look-behind), and each of its parts stops at the first character that cannot follow, so
every character is looked at a bounded number of times: linear time. It matches what
``(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\\s]+@`` matches (where that one backtracked from
every position), with the digits and signs before the scheme's first letter (kept as they
are)."""
_OPEN_USERINFO = re.compile(r"[^/@\s]*")
"""What may be a URL's user info cut before its ``@`` (read backwards from a cut)."""
_UP_TO_AT = re.compile(r"[^@\s]*")
"""From a cut to the ``@`` of a URL's user info the cut went through (if an ``@`` follows)."""
_known: set[str] = set()
_lock = threading.Lock()


def register(*secrets: str) -> None:
    """Scrub these values from every message from now on (too-short ones are ignored)."""
    with _lock:
        _known.update(s for s in secrets if len(s) >= _MIN_SECRET)


def _secrets() -> list[str]:
    with _lock:
        values = set(_known)
    values.update(v for name in SECRET_ENV if len(v := os.environ.get(name, "")) >= _MIN_SECRET)
    return sorted(values, key=_longest_first)


def holds_secret(text: str) -> bool:
    """Whether ``text`` holds a secret this process knows of (not counting URL user info)."""
    return any(secret in text for secret in _secrets())


def scrub(text: str, also: Iterable[str] = ()) -> str:
    """``text`` without URL credentials and without any known secret, nor any of ``also``
    (values of any length, e.g. a short password a caller knows); at most ``MAX_SCRUBBED``
    characters of it."""
    if len(text) <= MAX_SCRUBBED:
        return _scrubbed(text, _with(also))
    half = MAX_SCRUBBED // 2
    head, tail = scrub_parts(text[:half], text[-half:], also)
    return f"{head}[... {len(text) - 2 * half} characters left out ...]{tail}"


def scrub_parts(head: str, tail: str, also: Iterable[str] = ()) -> tuple[str, str]:
    """The beginning and the end of a text whose middle was cut out, each scrubbed, with what
    at a cut may be part of a secret, or of a URL's user info, that the cut went through
    masked: the end of ``head`` that begins a secret (or follows ``://`` with no ``/``, ``@``
    or space), the start of ``tail`` that ends one (or comes before a URL's ``@``), and any
    secret that overlaps those."""
    secrets = _with(also)
    keep = _head_cut(head, secrets)
    start = _tail_cut(tail, secrets)
    first = _scrubbed(head[:keep], secrets) + (MASK if keep < len(head) else "")
    last = (MASK if start > 0 else "") + _scrubbed(tail[start:], secrets)
    return first, last


def _head_cut(text: str, secrets: list[str]) -> int:
    """Where to end the kept beginning ``text`` so that nothing before is part of a secret or
    of a URL's user info that goes on after: before the end of it that begins a secret, the
    user info open at its end and every secret that overlaps those. Linear: the cut only
    moves back, and the run of user info characters before it is looked for again only once
    the cut has left it."""
    backwards = text[::-1]
    cut = len(text) - max((_begun(text, s) for s in secrets), default=0)
    run = -1  # where the run of characters that may be user info, up to the cut, begins
    while True:
        if run < 0 or cut < run:
            found = _OPEN_USERINFO.match(backwards, len(text) - cut)
            run = cut - (found.end() - (len(text) - cut) if found is not None else 0)
        moved = run if run < cut and text.endswith("://", 0, run) else cut
        for secret in secrets:  # one that the cut goes through: cut before it
            at = text.find(secret, max(0, moved - len(secret) + 1), moved + len(secret) - 1)
            if at != -1:
                moved = at
        if moved == cut:
            return cut
        cut = moved


def _tail_cut(text: str, secrets: list[str]) -> int:
    """Where to begin the kept end ``text`` so that nothing after is part of a secret or of a
    URL's user info that began before: after the start of it that ends a secret, the user
    info up to its ``@`` and every secret that overlaps those. Linear: the cut only moves on,
    and the next ``@`` or space is looked for again only once the cut has passed it."""
    cut = max((_ended(text, s) for s in secrets), default=0)
    stop, slash = -1, -1  # the next "@" or space from the cut, and the last "/" before it
    while True:
        if stop < cut:
            found = _UP_TO_AT.match(text, cut)
            stop = found.end() if found is not None else cut
            slash = text.rfind("/", cut, stop)
        at = stop < len(text) and text[stop] == "@"
        moved = stop if at and max(cut, slash + 1) < stop else cut
        for secret in secrets:  # one that the cut goes through: cut after it
            at_ = text.rfind(secret, max(0, moved - len(secret) + 1), moved + len(secret) - 1)
            if at_ != -1:
                moved = at_ + len(secret)
        if moved == cut:
            return cut
        cut = moved


def _with(also: Iterable[str]) -> list[str]:
    extra = {s for s in also if s}
    known = _secrets()
    return sorted(extra.union(known), key=_longest_first) if extra else known


def _longest_first(secret: str) -> tuple[int, str]:
    return -len(secret), secret  # a longer secret before its parts; then always one order


def _scrubbed(text: str, secrets: list[str]) -> str:
    text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _begun(text: str, secret: str) -> int:
    """The length of the longest end of ``text`` that is how ``secret`` begins (not all of it)."""
    start = max(0, len(text) - len(secret) + 1)
    while (at := text.find(secret[0], start)) != -1:
        if secret.startswith(text[at:]):
            return len(text) - at
        start = at + 1
    return 0


def _ended(text: str, secret: str) -> int:
    """The length of the longest start of ``text`` that is how ``secret`` ends (not all of it)."""
    end = min(len(text), len(secret) - 1)
    while (at := text.rfind(secret[-1], 0, end)) != -1:
        if secret.endswith(text[: at + 1]):
            return at + 1
        end = at
    return 0
