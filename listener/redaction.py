"""Masking of Azure Storage secrets in free text: exception messages, log lines, reprs.

Connection strings carry ``AccountKey=`` or ``SharedAccessSignature=``; request URLs carry a SAS
whose ``sig=`` parameter is the signature; request headers carry ``Authorization: SharedKey
account:signature`` or a bearer token. ``redact`` replaces each secret value with ``***`` and keeps
the surrounding text, so a message stays useful for diagnosis.
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
]


def redact(text: str) -> str:
    """Return ``text`` with every recognised secret value replaced by ``***``."""
    for pattern in _SECRET_VALUES:
        text = pattern.sub(lambda match: match.group(1) + MASK, text)
    return text
