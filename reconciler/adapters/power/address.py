"""A BMC's or a network's address as ``power.address`` gives it: ``NAME``, ``NAME:PORT``,
``[IPV6]:PORT``, ``[IPV6]`` or a bare IPv6 address."""

from __future__ import annotations

from reconciler.errors import ConfigError


def host_port(host: str, address: str, *, default_port: int, example: str) -> tuple[str, int]:
    """The name or address and the port of ``address`` (``default_port`` when it has none);
    ConfigError naming ``host`` when it is not one, with ``example``."""
    name, port = address, default_port
    if address.startswith("["):
        inside, _, rest = address[1:].partition("]")
        name = inside
        if rest:
            if not rest.startswith(":"):
                raise _bad(host, address, default_port, example)
            port = _port(rest[1:], host, address, default_port, example)
    elif address.count(":") == 1:
        name, _, text = address.partition(":")
        port = _port(text, host, address, default_port, example)
    if not name or name.startswith("-") or any(c.isspace() for c in name):
        raise _bad(host, address, default_port, example)
    return name, port


def _port(text: str, host: str, address: str, default_port: int, example: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _bad(host, address, default_port, example)
    return int(text)


def _bad(host: str, address: str, default_port: int, example: str) -> ConfigError:
    return ConfigError(
        f"host {host}: power.address {address!r} is not a host name or address (with :PORT "
        f"when not {default_port})",
        hint=f"e.g. {example}",
    )
