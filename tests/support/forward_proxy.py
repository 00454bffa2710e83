"""A counting HTTP forward proxy in front of Azurite, for tests of proxy settings.

A client told to use a proxy (``HTTP_PROXY``) sends it absolute-form requests
(``GET http://host:port/path HTTP/1.1``); this one counts them, turns the request line back into
origin form and passes them to Azurite through ``FaultProxy``'s forwarding (with no faults).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tests.support.fault_proxy import FaultProxy


@dataclass
class ForwardProxy(FaultProxy):
    """Forwards every proxied request to ``upstream_port`` and counts them in ``forwarded``."""

    forwarded: int = 0
    _count_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> ForwardProxy:
        super().start()
        return self

    async def _forward(self, request: bytes) -> bytes:
        with self._count_lock:
            self.forwarded += 1
        return await super()._forward(origin_form(request))


def origin_form(request: bytes) -> bytes:
    """``GET http://host:port/path?q HTTP/1.1`` becomes ``GET /path?q HTTP/1.1``."""
    line, separator, rest = request.partition(b"\r\n")
    method, target, version = line.split(b" ", 2)
    if b"://" in target:
        path = target.split(b"://", 1)[1].partition(b"/")[1:]
        target = b"".join(path) or b"/"
    return b" ".join([method, target, version]) + separator + rest
