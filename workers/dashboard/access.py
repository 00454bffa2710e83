"""Who may use the dashboard: loopback only by default, a token once it listens further.

* Bound to a loopback address (the default), a request must name a loopback host in its Host
  header: a web page elsewhere cannot reach the dashboard by rebinding a DNS name to 127.0.0.1.
* With a token (the ``dashboard.token`` setting, or one generated at start when bound beyond
  loopback) every request must carry it: ``Authorization: Bearer TOKEN`` (scripts), or the cookie
  the page sets when opened once as ``/?token=TOKEN`` (browsers; the page is then redirected to
  ``/`` so that the token leaves the address bar). No page or response body ever contains it.
* A change (requeue) is a POST only, with a JSON body, and refused when its Origin is another
  site: a form on another site cannot send JSON without the browser asking first, and the
  dashboard grants no cross-site requests.
* No page may frame the dashboard (``X-Frame-Options: DENY`` and ``frame-ancestors 'none'`` on
  every response, see ``app.SECURITY_HEADERS``): a page on another port of this machine is
  another origin, and could otherwise lay the dashboard under a decoy and steal a click.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from cloudqueue.workers.observability.host_names import host_name, is_loopback

TOKEN_COOKIE = "cloudqueue_dashboard"  # noqa: S105 (the name of the cookie, not a token)
TOKEN_QUERY = "token"  # noqa: S105 (the name of the query parameter)


def new_token() -> str:
    """A token for one run of the dashboard: 192 random bits, safe in a URL."""
    return secrets.token_urlsafe(24)


def chosen_token(configured: str | None, host: str) -> tuple[str | None, bool]:
    """(the token in force, whether it was generated now) for a dashboard bound to ``host``.

    The configured token always; else, beyond loopback, a new one (to be printed); else none.
    """
    if configured is not None:
        return configured, False
    if is_loopback(host):
        return None, False
    return new_token(), True


@dataclass(frozen=True, slots=True)
class Access:
    """The rules for one running dashboard."""

    token: str | None
    loopback_only: bool

    def __repr__(self) -> str:
        return f"Access(token={'set' if self.token else None}, loopback_only={self.loopback_only})"

    def host_allowed(self, host_header: str | None) -> bool:
        """On loopback, only requests addressed to a loopback name (no DNS rebinding)."""
        if not self.loopback_only:
            return True
        return is_loopback(host_name(host_header))

    def token_accepted(self, presented: str | None) -> bool:
        if self.token is None:
            return True
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8"), self.token.encode("utf-8")
        )

    def same_origin(self, origin: str | None, host_header: str | None) -> bool:
        """A POST's Origin (when the browser sends one) must be the dashboard itself."""
        if origin is None:
            return True  # not a browser, or an old one: the token and the JSON body still hold
        return urlsplit(origin).netloc == (host_header or "")


def presented_token(authorization: str | None, cookie: str | None) -> str | None:
    """The token a request carries: the bearer token, else the dashboard's cookie."""
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return cookie


__all__ = [
    "TOKEN_COOKIE",
    "TOKEN_QUERY",
    "Access",
    "chosen_token",
    "is_loopback",
    "new_token",
    "presented_token",
]
