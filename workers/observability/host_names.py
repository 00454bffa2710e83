"""Host names in HTTP requests: which ones mean this machine, for the dashboard and /metrics.

Both HTTP endpoints bind to loopback by default and then answer only requests whose ``Host``
header names loopback: a web page elsewhere cannot reach them by rebinding a DNS name to
127.0.0.1 (its requests still carry that name).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str | None) -> str:
    """The name in a ``Host`` header, without port or brackets, lower-case ('' when absent)."""
    if not host_header:
        return ""
    try:
        return (urlsplit(f"//{host_header}").hostname or "").lower()
    except ValueError:  # e.g. an unbalanced "[" in the header
        return ""


__all__ = ["host_name", "is_loopback"]
