"""Masking of secrets in free text: exception messages, log lines, reprs, ``config show``.

Connection strings carry ``AccountKey=`` or ``SharedAccessSignature=``; request URLs carry a SAS
whose ``sig=`` parameter is the signature; request headers carry ``Authorization: SharedKey
account:signature`` or a bearer token. Any URL (``redis://``, ``rediss://``, ``unix://``,
``https://``) may carry a password in its userinfo (``redis://user:PASSWORD@host``,
``unix://:PASSWORD@/path``) or in a query parameter (``?password=``, ``?api_key=``,
``?access_token=``, ``?client_secret=``). ``redact`` replaces each secret value with ``***`` and
keeps the surrounding text, so a message stays useful for diagnosis. This is the one place that
knows what a secret looks like: logs, errors and ``cloudqueue config show`` all call it.
"""

from __future__ import annotations

import re

MASK = "***"

_SECRET_VALUES = [
    # AccountKey=...; in connection strings, account_key: '...' in reprs of credential dicts.
    re.compile(r"""(?i)\b(account_?key['"]?\s*[:=]\s*['"]?)[^;\s'",}]+"""),
    # A whole SAS in a connection string: sv=...&sig=... up to the next setting.
    re.compile(r"""(?i)\b(SharedAccessSignature\s*=\s*)[^;\s'"]+"""),
    # Authorization (and x-ms-copy-source-authorization) header values, keeping the scheme.
    re.compile(
        r"""(?i)(authorization['"]?\s*[:=]\s*['"]?(?:(?:SharedKey(?:Lite)?|Bearer|Basic)\s+)?)"""
        r"""[^'"\r\n,}]+"""
    ),
    # "SharedKey account:signature" wherever it appears outside a header.
    re.compile(r"""(?i)\b(SharedKey(?:Lite)?\s+[^\s:'"]+:)[^\s'",}]+"""),
    # The signature of a SAS in a URL or query string, also when percent-encoded.
    re.compile(r"""(?i)\b(sig(?:=|%3D))[^&;\s'"]+"""),
    # The password of a URL's userinfo (scheme://user:PASSWORD@host), up to its last "@".
    re.compile(r"""(?i)\b([a-z][a-z0-9+.\-]*://[^:/?#@\s'"]*:)[^/?#\s'"]*(?=@)"""),
    # A userinfo with no password (scheme://TOKEN@host): services put tokens there.
    re.compile(r"""(?i)\b([a-z][a-z0-9+.\-]*://)[^:/?#@\s'"]+(?=@)"""),
    # A query parameter whose name says it holds a credential: password, api_key, token, ...
    re.compile(
        r"""(?i)([?&;][\w.\-]*(?:pass(?:word|wd)?|pwd|key|token|secret|sig)[\w.\-]*=)"""
        r"""[^&#;\s'"]+"""
    ),
]


def redact(text: str) -> str:
    """Return ``text`` with every recognised secret value replaced by ``***``."""
    for pattern in _SECRET_VALUES:
        text = pattern.sub(lambda match: match.group(1) + MASK, text)
    return text
