"""The requests session under the Azure SDK: a bigger pool, and the environment read once.

A ``requests.Session`` with ``trust_env`` (the default) looks, for every request, for proxy
variables, a CA bundle variable and a ``.netrc`` file: in a profile of a 4-thread drain that was
about a sixth of the client's busy CPU (``get_netrc_auth``, ``merge_environment_settings``,
``get_environ_proxies``), the same answer each time. The listener's session therefore reads the
environment once, when the storage is opened: if none of those settings exists then, the session
skips the lookups (``trust_env = False``); if any does, it keeps ``requests``' usual behaviour, so
``HTTPS_PROXY``/``NO_PROXY`` and ``.netrc`` work as they always did. A CA bundle variable
(``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE``, as requests reads them) needs no per-request look:
it is read at open and given to the SDK as ``connection_verify``. Set all of them before the worker
starts: a variable set later is not seen.

A CA bundle path also costs requests a ``os.path.isdir`` call per request, even for plain ``http``
(Azurite), where there is nothing to verify; the adapter leaves it out of such requests.

The queue clients skip ``requests`` altogether when the environment has no proxy or netrc setting
(``cloudqueue.listener.stores.urllib3_transport``); the blob clients, and the queue clients when it
has one, use this session.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
NETRC_FILES = (".netrc", "_netrc")
"""The files ``requests.utils.get_netrc_auth`` looks for in the home folder (or ``$NETRC``)."""


def requests_reads_environment(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> bool:
    """True when the environment holds a proxy or netrc setting requests would use."""
    environ = os.environ if environ is None else environ
    return _proxies(environ) or _netrc_exists(environ, home)


def ca_bundle(environ: Mapping[str, str] | None = None) -> str | None:
    """The CA bundle file requests would verify with, from the environment; None for its own."""
    environ = os.environ if environ is None else environ
    for name in CA_BUNDLE_VARIABLES:
        if environ.get(name):
            return environ[name]
    return None


def _proxies(environ: Mapping[str, str]) -> bool:
    # NO_PROXY alone sends nothing through a proxy; urllib lists it as the scheme "no".
    if environ is os.environ:
        # What requests itself asks: the environment, and on macOS/Windows the system settings.
        return any(scheme != "no" for scheme in urllib.request.getproxies())
    return any(
        name.lower().endswith("_proxy") and name.lower() != "no_proxy" and value
        for name, value in environ.items()
    )


def _netrc_exists(environ: Mapping[str, str], home: Path | None) -> bool:
    if environ.get("NETRC"):
        return True
    try:
        folder = home if home is not None else Path("~").expanduser()
    except RuntimeError:  # no home folder to expand: requests finds no netrc either
        return False
    return any((folder / name).exists() for name in NETRC_FILES)


class _Adapter(HTTPAdapter):
    """requests' adapter, minus the CA bundle look-up on requests that use no TLS."""

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        if (request.url or "").startswith("http://") and isinstance(kwargs.get("verify"), str):
            kwargs["verify"] = True  # only https verifies; a path costs an isdir per request
        return super().send(request, *args, **kwargs)


def pooled_session(pool_size: int) -> requests.Session:
    """A session like azure-core's own (no urllib3 retries: the SDK's retry policy decides), with
    ``pool_size`` connections per host, reading the environment only if it has settings."""
    session = requests.Session()
    session.trust_env = requests_reads_environment()
    no_retries = Retry(total=False, redirect=False, raise_on_status=False)
    adapter = _Adapter(pool_connections=4, pool_maxsize=pool_size, max_retries=no_retries)
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return session
