"""Power through a Redfish BMC (DMTF DSP0266), over httpx.

The host's ``ComputerSystem`` is ``power.system`` (a path such as ``/redfish/v1/Systems/1``,
or a member's Id such as ``1``), else the only member of ``/redfish/v1/Systems``. Its
``PowerState`` is the host's power (``PoweringOn``, ``PoweringOff`` and anything else are
``unknown``: neither is taken for on or off). ``power_on`` and ``power_off`` read the system,
do nothing when it already is in the state asked for (so a repeated call is harmless), and
else POST ``#ComputerSystem.Reset`` to the action's ``target`` with ResetType ``On`` or
``GracefulShutdown``; when the action's ``ResetType@Redfish.AllowableValues`` lists no
``GracefulShutdown`` they ask ``ForceOff`` instead, and log a warning saying so.

**Bounds.** One call (every request it makes: the collection, the system, the reset) has
the host's ``power.timeout`` as a whole, however slowly the BMC answers (``deadline``); an
answer is read no further than ``MAX_ANSWER`` bytes; redirects are not followed.
**Credentials.** Basic authentication with the user and password of ``credentials.passEnv``
(``credentials``), sent only in the ``Authorization`` header; messages name the variables,
never a value; what a BMC answers is scrubbed of the password before it reaches a message.
**Errors.** Not answering (refused connection, timeout, the deadline), 429 and 5xx are
``TransientError``: asking again later may work. A refusal (401, 403, another 4xx, a
redirect), a certificate that does not verify, an answer that is not a Redfish resource or
is too large are ``TerminalError``; an address with credentials in it, a system that cannot
be chosen, a missing variable are ``ConfigError``. ``power_state`` never raises: it answers
``unknown`` with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import httpx

from reconciler.adapters.http.deadline import Deadline
from reconciler.adapters.power.credentials import Login, login
from reconciler.errors import ConfigError, ReconcilerError, TerminalError, TransientError
from reconciler.model.power import HostPower
from reconciler.model.quantity import format_size
from reconciler.model.recovery import PowerState, PowerStatus
from reconciler.redact import scrub

log = logging.getLogger(__name__)

MAX_ANSWER: Final = 1024 * 1024
"""Bytes of one answer read at most (a ComputerSystem is a few KiB, with OEM parts tens)."""
SYSTEMS: Final = "/redfish/v1/Systems"
RESET: Final = "#ComputerSystem.Reset"
_DONE: Final = frozenset({200, 202, 204})
"""What a BMC answers a reset it accepted (202: a task it carries on with)."""
_STATES: Final = {"On": PowerState.ON, "Off": PowerState.OFF}
_SHOWN_ERROR: Final = 300
"""Characters of a BMC's own error text kept in a message."""


class _TooLarge(Exception):
    pass


class RedfishPower:
    """The ``redfish`` driver of the PowerSwitch port."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.environ = os.environ if environ is None else environ
        self._transport = transport

    def __repr__(self) -> str:
        return "<RedfishPower>"

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        started = time.monotonic()
        try:
            with self._call(host, power) as call:
                _, system = call.system()
        except ReconcilerError as err:
            return PowerStatus(
                state=PowerState.UNKNOWN, detail=str(err), seconds=time.monotonic() - started
            )
        said = system.get("PowerState")
        state = _STATES.get(said, PowerState.UNKNOWN) if isinstance(said, str) else None
        return PowerStatus(
            state=state or PowerState.UNKNOWN,
            detail=f"PowerState {said}" if state is not None else "no PowerState in the system",
            seconds=time.monotonic() - started,
        )

    def power_on(self, host: str, power: HostPower) -> None:
        with self._call(host, power) as call:
            path, system = call.system()
            if system.get("PowerState") == "On":
                log.info("%s is on already (%s): not asked again", host, call.where)
                return
            call.reset(path, system, "On")

    def power_off(self, host: str, power: HostPower) -> None:
        with self._call(host, power) as call:
            path, system = call.system()
            if system.get("PowerState") == "Off":
                log.info("%s is off already (%s): not asked again", host, call.where)
                return
            allowed = allowable_resets(system)
            kind = "GracefulShutdown"
            if allowed is not None and kind not in allowed:
                if "ForceOff" not in allowed:
                    raise TerminalError(
                        f"{call.where} offers neither GracefulShutdown nor ForceOff to "
                        f"power {host} off (it allows {', '.join(allowed) or 'nothing'})",
                        hint="use another power driver for this host (ipmi, command)",
                    )
                log.warning(
                    "%s offers no GracefulShutdown (it allows %s): powering %s off with "
                    "ForceOff, without a clean shutdown of its system",
                    call.where, ", ".join(allowed), host,
                )  # fmt: skip
                kind = "ForceOff"
            call.reset(path, system, kind)

    @contextmanager
    def _call(self, host: str, power: HostPower) -> Iterator[_Call]:
        base = _address(host, power)
        creds = login(host, power, self.environ)
        timeout = power.timeout.total_seconds()
        client = httpx.Client(
            auth=httpx.BasicAuth(creds.user, creds.password),
            verify=power.verify_tls,
            timeout=httpx.Timeout(timeout),
            headers={"User-Agent": "reconciler", "Accept": "application/json"},
            follow_redirects=False,
            transport=self._transport,
        )
        with client, Deadline(timeout) as deadline:
            yield _Call(host, power, base, creds, client, deadline)


class _Call:
    """One call to a BMC: its requests share the client and the deadline."""

    def __init__(
        self,
        host: str,
        power: HostPower,
        base: str,
        creds: Login,
        client: httpx.Client,
        deadline: Deadline,
    ) -> None:
        self.host = host
        self.power = power
        self.base = base
        self.where = f"the Redfish BMC of {host} at {base}"
        self.creds = creds
        self.client = client
        self.deadline = deadline

    def system(self) -> tuple[str, dict[str, Any]]:
        """The path of the host's ComputerSystem and the system as the BMC gives it."""
        path = self._system_path()
        return path, self.get(path)

    def _system_path(self) -> str:
        chosen = self.power.system
        if chosen is not None:
            if chosen.startswith(("http://", "https://")):
                raise ConfigError(
                    f"host {self.host}: power.system {chosen!r} is a URL",
                    hint=f"give its path (e.g. {SYSTEMS}/1) or its Id (e.g. 1)",
                )
            return chosen if chosen.startswith("/") else f"{SYSTEMS}/{chosen}"
        members = self.get(SYSTEMS).get("Members")
        paths = [
            m["@odata.id"]
            for m in (members if isinstance(members, list) else [])
            if isinstance(m, dict) and isinstance(m.get("@odata.id"), str)
        ]
        if len(paths) == 1:
            return str(paths[0])
        if not paths:
            raise TerminalError(
                f"{self.where} lists no ComputerSystem in {SYSTEMS}",
                hint="give the system's path in the host's power.system",
            )
        listed = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        raise ConfigError(
            f"host {self.host}: {self.where} has {len(paths)} systems ({listed}); which one "
            "is the host cannot be guessed",
            hint="set the host's power.system to the path of its own",
        )

    def reset(self, path: str, system: Mapping[str, Any], kind: str) -> None:
        actions = system.get("Actions")
        action = actions.get(RESET) if isinstance(actions, dict) else None
        target = action.get("target") if isinstance(action, dict) else None
        if not isinstance(target, str) or not target.startswith("/"):
            target = f"{path.rstrip('/')}/Actions/ComputerSystem.Reset"
        status, body = self._request("POST", target, {"ResetType": kind})
        if status not in _DONE:
            self._refused(status, body, f"the reset {kind}")
        log.info("%s: asked for %s (answer %s)", self.where, kind, status)

    def get(self, path: str) -> dict[str, Any]:
        status, body = self._request("GET", path)
        if status != 200:
            self._refused(status, body, path)
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise TerminalError(
                f"{self.where} answered {path} with what is not a Redfish resource (a JSON "
                f"object): {self._text(body)[:80]!r}",
                hint="check that power.address is the BMC's Redfish service",
            )
        return value

    def _request(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        url = self.base + path
        timeout = self.deadline.seconds
        try:
            with self.client.stream(
                method, url, json=body, extensions=self.deadline.extensions
            ) as response:
                length = response.headers.get("content-length", "")
                if length.isdigit() and int(length) > MAX_ANSWER:
                    raise _TooLarge
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > MAX_ANSWER:
                        raise _TooLarge
                if 300 <= response.status_code < 400:
                    where = response.headers.get("location", "elsewhere")
                    raise TerminalError(
                        f"{self.where} answered {path} with a redirect "
                        f"({response.status_code}) to {scrub(where)[:200]}",
                        hint="give the address it redirects to as power.address",
                    )
                return response.status_code, bytes(data)
        except _TooLarge as err:
            raise TerminalError(
                f"{self.where} answered {path} with more than {format_size(MAX_ANSWER)}: "
                "read no further",
                hint="check that power.address is the BMC's Redfish service",
            ) from err
        except httpx.HTTPError as err:
            if self.deadline.passed or isinstance(err, httpx.TimeoutException):
                raise TransientError(
                    f"{self.where} did not answer within {timeout:g}s (the whole call, "
                    "from connecting to the answer's last byte)",
                    hint="check that the BMC is up and reachable; raise power.timeout for a "
                    "slow one",
                ) from err
            tls = _tls_problem(err)
            if tls is not None:
                raise TerminalError(
                    f"{self.where}: TLS failed: {tls}",
                    hint="give the BMC a certificate this machine trusts (SSL_CERT_FILE), "
                    "check the address's scheme, or set verifyTls: false for a lab only",
                ) from err
            raise TransientError(
                f"{self.where} could not be reached: {type(err).__name__}: {self._text(str(err))}",
                hint="check power.address and that the BMC is up",
            ) from err

    def _refused(self, status: int, body: bytes, what: str) -> None:
        said = _redfish_message(body)
        text = self._text(said)[:_SHOWN_ERROR] if said else "no error text"
        message = f"{self.where} answered {status} to {what}: {text}"
        if status == 429 or status >= 500:
            raise TransientError(message, hint="the BMC is busy or failing; asked again later")
        if status == 401:
            raise TerminalError(message, hint=f"check the user and password in {self.creds.names}")
        if status == 403:
            raise TerminalError(
                message,
                hint=f"give the user of {self.creds.user_var} the right to reset the system "
                "(Redfish ConfigureComponents)",
            )
        if status == 404:
            raise TerminalError(
                message, hint="check power.system (a path under /redfish/v1/Systems)"
            )
        raise TerminalError(message, hint="see the BMC's answer")

    def _text(self, text: str | bytes) -> str:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return scrub(text, [self.creds.password])


def allowable_resets(system: Mapping[str, Any]) -> list[str] | None:
    """The ResetType values the system's reset action lists; None when it lists none."""
    actions = system.get("Actions")
    action = actions.get(RESET) if isinstance(actions, dict) else None
    values = action.get("ResetType@Redfish.AllowableValues") if isinstance(action, dict) else None
    if not isinstance(values, list):
        return None
    return [v for v in values if isinstance(v, str)]


def _redfish_message(body: bytes) -> str:
    """A Redfish error's own words: its ExtendedInfo messages, else its message, else the
    start of the body."""
    try:
        value = json.loads(body)
    except ValueError:
        return body[:_SHOWN_ERROR].decode("utf-8", "replace").strip()
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        return body[:_SHOWN_ERROR].decode("utf-8", "replace").strip()
    info = error.get("@Message.ExtendedInfo")
    said = [
        m["Message"]
        for m in (info if isinstance(info, list) else [])
        if isinstance(m, dict) and isinstance(m.get("Message"), str)
    ]
    if said:
        return "; ".join(said)
    message = error.get("message")
    return message if isinstance(message, str) else str(error.get("code", ""))


def _address(host: str, power: HostPower) -> str:
    """The BMC's base URL: the scheme, host and port of ``power.address`` (Redfish gives
    every resource by its absolute path)."""
    address = power.address or ""
    try:
        url = httpx.URL(address)
    except httpx.InvalidURL as err:
        raise ConfigError(
            f"host {host}: power.address is not a URL: {err}", hint="e.g. https://bmc-kvm-07"
        ) from err
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(
            f"host {host}: power.address {scrub(address)!r} is not an http(s) URL",
            hint="e.g. https://bmc-kvm-07.example.net",
        )
    if url.userinfo:
        raise ConfigError(
            f"host {host}: power.address holds credentials (user info before @)",
            hint="take them out of the address (and out of git); give credentials: {passEnv: "
            "[BMC_USER, BMC_PASSWORD]}",
        )
    return f"{url.scheme}://{url.netloc.decode('ascii')}"


def _tls_problem(err: BaseException) -> str | None:
    """What went wrong with TLS, when ``err`` comes from a TLS failure."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return getattr(seen, "verify_message", None) or seen.reason or str(seen)
        seen = seen.__cause__ or seen.__context__
    text = str(err)
    if "CERTIFICATE_VERIFY_FAILED" in text or "[SSL" in text:
        return text
    return None
