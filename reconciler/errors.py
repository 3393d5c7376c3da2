"""The project's error tree. Library errors are mapped to these where the library is called.

    ReconcilerError                 anything the reconciler raises on purpose
    ├── ConfigError                 the user's input is wrong; fix it and run again (exit 1)
    │   ├── DocumentError           a file could not be read as YAML documents (size, syntax,
    │   │                           anchors, duplicate keys, symlinks, encoding)
    │   └── ValidationFailed        documents parsed but broke the models or semantic rules;
    │                               carries every finding, not only the first
    ├── TransientError              the world did not answer as expected; retrying may help
    │   ├── HostUnreachable         a hypervisor could not be connected to
    │   ├── HostTimeout             a hypervisor call did not return in time
    │   ├── PushRejected            a compare-and-swap push lost: someone pushed first
    │   ├── RemoteUnreachable       the state repository's remote did not answer a fetch
    │   ├── ForgeUnavailable        a forge did not answer, or answered 429/5xx
    │   └── MetricsUnavailable      Prometheus did not answer in time, or answered 429/5xx
    └── TerminalError               the world refused; retrying the same thing will not help
        ├── LabError                the local lab cannot start here (missing root, binary, ...)
        ├── SnapshotError           a saved snapshot file is unreadable or of another version
        ├── GitError                a git command on the state repository failed
        ├── ForgeError              a forge's API refused or failed a call
        └── MetricsError            Prometheus refused a query (a bad query, no access)

The CLI maps ConfigError and TerminalError to exit 1 with the message and its hint, never a
traceback. Every message and hint is scrubbed of credentials where the error is made.
Infeasible placement is not an error: the planner reports it as data.
"""

from __future__ import annotations

from reconciler.redact import scrub


class ReconcilerError(Exception):
    """Base of every error the reconciler raises on purpose.

    ``hint`` says how to fix it, in one short sentence, for the CLI to show. Both are scrubbed
    of URL credentials and known secrets (``reconciler.redact``) here, once for every error.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        message = scrub(message)
        super().__init__(message)
        self.message = message
        self.hint = scrub(hint) if hint is not None else None

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(ReconcilerError):
    """The user's input is wrong; nothing was applied."""


class DocumentError(ConfigError):
    """A file could not be read as YAML documents.

    ``file``, ``line`` and ``column`` (1-based) point at the problem when known.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str,
        line: int = 1,
        column: int = 1,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.file = file
        self.line = line
        self.column = column


class ValidationFailed(ConfigError):
    """Documents broke the models or the semantic rules; ``findings`` lists every problem."""

    def __init__(self, message: str, findings: object) -> None:
        super().__init__(message)
        self.findings = findings


class TransientError(ReconcilerError):
    """The world did not answer as expected; retrying later may succeed."""


class HostUnreachable(TransientError):
    """A hypervisor could not be connected to."""


class HostTimeout(TransientError):
    """A hypervisor call did not return within its timeout."""


class RemoteUnreachable(TransientError):
    """The state repository's remote could not be fetched from; the next round tries again."""


class PushRejected(TransientError):
    """The remote branch moved since it was read; fetch, re-read and decide again."""


class ForgeUnavailable(TransientError):
    """A forge did not answer (network, timeout) or answered 429 or 5xx; retried with backoff.
    ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class MetricsUnavailable(TransientError):
    """Prometheus did not answer within its timeout, or answered 429 or 5xx."""


class TerminalError(ReconcilerError):
    """The world refused; retrying the same request will not help."""


class LabError(TerminalError):
    """The local lab cannot run on this machine, with what is missing and how to fix it."""


class SnapshotError(TerminalError):
    """A saved snapshot cannot be read."""


class GitError(TerminalError):
    """A git command on the state repository failed; the message never holds credentials."""


class ForgeError(TerminalError):
    """A forge's API refused or failed a call; ``status`` is the HTTP status when known."""

    def __init__(self, message: str, *, status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class MetricsError(TerminalError):
    """Prometheus refused a query (bad PromQL, no access) or answered what is not a result."""
