"""A BMC's user and password, read from the reconciler's environment by the names a host's
``power.credentials.passEnv`` gives (never from git). A name that is not set, or set to
nothing, is a ``ConfigError`` naming the variable, never a value. The password is registered
with ``reconciler.redact``, so no later message or log line shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.errors import ConfigError
from reconciler.model.power import HostPower
from reconciler.redact import register


@dataclass(frozen=True)
class Login:
    """A user and a password, and the variables they came from (for messages)."""

    user: str
    password: str = field(repr=False)
    user_var: str
    password_var: str

    @property
    def names(self) -> str:
        """The variables, as messages name them: ``BMC_USER/BMC_PASSWORD``."""
        return f"{self.user_var}/{self.password_var}"


def login(host: str, power: HostPower, environ: Mapping[str, str]) -> Login:
    """The user and password of ``host``'s BMC; ConfigError when either variable is missing."""
    if power.credentials is None:
        raise ConfigError(
            f"host {host}: power driver {power.driver} needs credentials",
            hint="add credentials: {passEnv: [BMC_USER, BMC_PASSWORD]} to the host's power",
        )
    user_var, password_var = power.credentials.pass_env
    values: list[str] = []
    for name in (user_var, password_var):
        value = environ.get(name)
        if not value:
            state = "not set" if value is None else "empty"
            raise ConfigError(
                f"host {host}: {name} (its power.credentials.passEnv) is {state} in the "
                "reconciler's environment",
                hint=f"set {name} where the reconciler runs (a systemd EnvironmentFile, a "
                "Kubernetes secret), never in the state repository",
            )
        values.append(value)
    register(values[1])
    return Login(values[0], values[1], user_var, password_var)
