"""Secrets out of text: the one place that scrubs messages, log records and git's output.

``scrub`` replaces the userinfo of every URL (``https://user:token@host/x`` becomes
``https://***@host/x``) and every secret this process knows of with ``***``: the values of
the environment variables in ``SECRET_ENV`` (read each time, so a token set later counts)
and whatever ``register`` was given (a password taken out of a repository URL, the Basic
credential made from it). ``ReconcilerError`` scrubs its message and hint with it, the log
handlers with ``ScrubFilter`` (``reconciler.engine.logs``, which keeps ``logging`` off the path
of commands that never log), and the adapters every output of git and of the forges before it
reaches a message.

Standard library only and outside the layers, so the errors, the adapters and the engine can
all use it.
"""

from __future__ import annotations

import os
import re
import threading

SECRET_ENV = (
    "RECONCILER_GIT_TOKEN",
    "RECONCILER_FORGE_TOKEN",
    "RECONCILER_WEBHOOK_SECRET",
    "RECONCILER_PROMETHEUS_TOKEN",
)
"""Environment variables whose values are secrets wherever they appear."""

MASK = "***"
_MIN_SECRET = 4  # shorter values would mask ordinary words
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
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
    return sorted(values, key=len, reverse=True)  # a longer secret before its parts


def holds_secret(text: str) -> bool:
    """Whether ``text`` holds a secret this process knows of (not counting URL user info)."""
    return any(secret in text for secret in _secrets())


def scrub(text: str) -> str:
    """``text`` without URL credentials and without any known secret."""
    text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    return text
