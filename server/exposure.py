"""Serving without API keys is for this machine only: `parley serve` and `create_app`
refuse to start on any other address with no keys, unless the operator says so
(`allow_no_keys`, `--allow-no-keys`, PARLEY_ALLOW_NO_KEYS=true)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence


class UnsafeExposure(RuntimeError):
    """The server would be open to anyone who can reach its address."""


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) can only
    be this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # any other host name may resolve to a public address


def exposure(host: str, api_keys: Sequence[str]) -> str | None:
    """Why serving on `host` with these keys leaves the server open beyond this
    machine, or None."""
    if api_keys or is_loopback(host):
        return None
    return (
        f"serving on {host} with no API keys: anyone who can reach this address could "
        "use the server. Set PARLEY_API_KEYS=key1,key2, serve on 127.0.0.1, or, if the "
        "network in front of it is trusted, start with --allow-no-keys "
        "(PARLEY_ALLOW_NO_KEYS=true)."
    )


def refuse_unsafe_exposure(
    host: str, api_keys: Sequence[str], *, allow_no_keys: bool
) -> str | None:
    """Raise UnsafeExposure for an open server beyond loopback; the warning to log
    when the operator allowed it explicitly; else None."""
    problem = exposure(host, api_keys)
    if problem is None:
        return None
    if not allow_no_keys:
        raise UnsafeExposure(problem)
    return problem.split(": ", 1)[0] + ": allowed by --allow-no-keys (PARLEY_ALLOW_NO_KEYS)."
