"""Structured logs: fields bound to a context (cluster, round, plan id, VM) on every line.

``with bound(round=7):`` adds fields to every record logged inside it, in this thread or task
(contextvars); a thread started inside copies nothing, so a worker binds its own ``vm``.
``configure("json")`` writes one JSON object a line (for journald or a log shipper),
``configure("text")`` a readable line with the fields as ``key=value``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal, TextIO

from reconciler.redact import scrub

FIELDS = ("cluster", "round", "plan_id", "vm", "trigger", "mode")
"""Context fields, in the order text lines show them."""

_EMPTY: dict[str, object] = {}  # never mutated: bound() sets a new dict
_context: ContextVar[dict[str, object]] = ContextVar("reconciler_log_context", default=_EMPTY)

LogFormat = Literal["json", "text"]


class ScrubFilter(logging.Filter):
    """Scrubs a log record: its message (arguments merged in), its bound fields and, rendered
    once into ``record.exc_text``, its traceback, which the formatters print instead of
    ``exc_info``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        fields = getattr(record, "context", None)  # the fields bound() adds
        if isinstance(fields, dict):
            record.context = {k: scrub(v) if isinstance(v, str) else v for k, v in fields.items()}
        return True


@contextmanager
def bound(**fields: object) -> Iterator[None]:
    """Bind ``fields`` to every record logged inside the block (None unbinds a field)."""
    merged = {**_context.get(), **fields}
    token = _context.set({k: v for k, v in merged.items() if v is not None})
    try:
        yield
    finally:
        _context.reset(token)


def current() -> dict[str, object]:
    return dict(_context.get())


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record as ``record.context``."""

    def filter(self, record: logging.LogRecord) -> bool:
        extra = getattr(record, "context", None)
        record.context = {**_context.get(), **(extra if isinstance(extra, dict) else {})}
        return True


def _ordered(context: dict[str, object]) -> list[tuple[str, object]]:
    known = [(k, context[k]) for k in FIELDS if k in context]
    return known + sorted((k, v) for k, v in context.items() if k not in FIELDS)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_ordered(getattr(record, "context", {})))
        if record.exc_info:
            line["error"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        fields = " ".join(f"{k}={v}" for k, v in _ordered(getattr(record, "context", {})))
        text = f"{when} {record.levelname.lower():7} {record.getMessage()}"
        if fields:
            text += f"  {fields}"
        if record.exc_info:
            text += "\n" + (record.exc_text or self.formatException(record.exc_info))
        return text


def handler(fmt: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    out = logging.StreamHandler(stream or sys.stderr)
    out.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    out.addFilter(ContextFilter())
    out.addFilter(ScrubFilter())  # no secret in a message, a field or a traceback
    return out


def configure(fmt: LogFormat, *, level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Send the ``reconciler`` loggers to ``stream`` (stderr) in ``fmt``, replacing old set-up."""
    logger = logging.getLogger("reconciler")
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler(fmt, stream))
    logger.setLevel(level)
    logger.propagate = False
