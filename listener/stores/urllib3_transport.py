"""An azure-core transport on urllib3's connection pool, for the queue clients' hot path.

azure-core sends every request through a transport (``transport=`` on any SDK client; the
``HttpTransport`` interface is the SDK's documented seam for other HTTP libraries). Its default,
``RequestsTransport``, hands each request to ``requests``, which then hands it to urllib3. On the
way ``requests`` prepares the request again (merging session settings, cookies, hooks), wraps the
response in its own object and parses cookies out of it twice: measured here, about a quarter of
the client's CPU per queue call. Queue calls use none of that: no cookies, no redirects (the SDK's
own policy handles them), no per-request proxy or netrc look-ups once the environment has none.

So this transport gives each request straight to a ``urllib3.PoolManager`` (the same pool
``requests`` would use, with the same certificate bundle), and maps urllib3's failures to the
azure-core errors ``RequestsTransport`` raises for the same cause, so the SDK's retry policy and
the listener's error translation see no difference. It is used only where ``requests`` would add
nothing: ``transport_for_queues`` answers None when the environment holds proxy or netrc settings,
and the caller then keeps the ``requests`` session (see
``cloudqueue.listener.stores.http_session``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import urllib3
from azure.core.exceptions import (
    DecodeError,
    IncompleteReadError,
    ServiceRequestError,
    ServiceRequestTimeoutError,
    ServiceResponseError,
    ServiceResponseTimeoutError,
)
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest import HttpRequest
from azure.core.rest._http_response_impl import HttpResponseImpl
from azure.core.utils import CaseInsensitiveDict
from requests.utils import DEFAULT_CA_BUNDLE_PATH
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)

from cloudqueue.listener.stores.http_session import ca_bundle, requests_reads_environment

__all__ = ["Urllib3Transport", "transport_for_queues"]

BLOCK_SIZE = 64 * 1024
"""Bytes per read when a response is streamed (queue calls read a few KiB at once)."""


class Urllib3Response(HttpResponseImpl):
    """azure-core's response around a urllib3 one (the implementation its own transports share)."""

    @property
    def urllib3_response(self) -> urllib3.BaseHTTPResponse:
        raw: urllib3.BaseHTTPResponse = self._internal_response
        return raw


class Urllib3Transport(HttpTransport[HttpRequest, Urllib3Response]):
    """Send azure-core requests through one thread-safe urllib3 pool manager.

    ``pool_size`` connections are kept per host (urllib3 opens more when all are busy and closes
    the extras on return, as ``requests`` does); urllib3 retries and redirects nothing: the SDK's
    retry and redirect policies decide. ``ca_bundle`` is a file or folder of certificates for
    HTTPS, by default the one ``requests`` uses (certifi's).
    """

    def __init__(
        self,
        *,
        pool_size: int,
        connection_timeout_s: float,
        read_timeout_s: float,
        ca_bundle: str | None = None,
    ) -> None:
        bundle = ca_bundle or DEFAULT_CA_BUNDLE_PATH
        folder = os.path.isdir(bundle)  # as requests tells a file of certificates from a folder
        self._pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=pool_size,
            block=False,
            retries=False,
            ca_certs=None if folder else bundle,
            ca_cert_dir=bundle if folder else None,
        )
        self._connection_timeout_s = connection_timeout_s
        self._read_timeout_s = read_timeout_s

    def open(self) -> None:
        """Nothing to open: connections are made on first use."""

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self) -> Urllib3Transport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(self, request: HttpRequest, *, stream: bool = False, **kwargs: Any) -> Urllib3Response:
        """Send ``request``; read the whole body unless ``stream`` (as ``RequestsTransport``)."""
        if not isinstance(request, HttpRequest) or request.files:
            raise TypeError("Urllib3Transport sends azure.core.rest.HttpRequest without files")
        timeout = urllib3.Timeout(
            connect=kwargs.pop("connection_timeout", self._connection_timeout_s),
            read=kwargs.pop("read_timeout", self._read_timeout_s),
        )
        if kwargs.pop("proxies", None):  # ProxyPolicy's: None unless the client was given proxies
            raise TypeError("Urllib3Transport sends through no proxy: keep the requests session")
        if kwargs:
            raise TypeError(f"Urllib3Transport takes no option {sorted(kwargs)[0]!r}")
        try:
            raw = self._pool.urlopen(
                request.method,
                request.url,
                body=request.content,
                headers=request.headers,
                timeout=timeout,
                retries=False,
                redirect=False,
                preload_content=False,
            )
        except HTTPError as error:
            raise _request_error(error) from error
        response = Urllib3Response(
            request=request,
            internal_response=raw,
            block_size=BLOCK_SIZE,
            status_code=raw.status,
            reason=raw.reason,
            content_type=raw.headers.get("Content-Type"),
            headers=CaseInsensitiveDict(raw.headers.items()),
            stream_download_generator=_download,
        )
        if not stream:
            try:
                response.read()
            finally:
                response.close()
        return response


def _request_error(error: HTTPError) -> Exception:
    """The azure-core error ``RequestsTransport`` raises for the same failure to send or receive."""
    # NewConnectionError subclasses ConnectTimeoutError: refused or unresolvable is not a timeout.
    if isinstance(error, NewConnectionError):
        return ServiceRequestError(error, error=error)
    if isinstance(error, ConnectTimeoutError):
        return ServiceRequestTimeoutError(error, error=error)
    if isinstance(error, ReadTimeoutError):
        return ServiceResponseTimeoutError(error, error=error)
    if isinstance(error, ProtocolError):  # the connection dropped after the request was sent
        return ServiceResponseError(error, error=error)
    if isinstance(error, urllib3.exceptions.SSLError | urllib3.exceptions.ProxyError):
        return ServiceRequestError(error, error=error)
    return ServiceResponseError(error, error=error)


def _download(
    response: Urllib3Response, pipeline: object = None, decompress: bool = True
) -> Iterator[bytes]:
    """The body in blocks; urllib3's failures while reading mapped as ``RequestsTransport``'s."""
    raw = response.urllib3_response
    finished = False
    try:
        yield from raw.stream(BLOCK_SIZE, decode_content=decompress)
        finished = True
    except urllib3.exceptions.DecodeError as error:
        raise DecodeError(error, error=error) from error
    except ReadTimeoutError as error:
        raise ServiceResponseTimeoutError(error, error=error) from error
    except ProtocolError as error:
        if "IncompleteRead" in str(error):
            raise IncompleteReadError(error, error=error) from error
        raise ServiceResponseError(error, error=error) from error
    except HTTPError as error:
        raise ServiceResponseError(error, error=error) from error
    finally:
        # Read to the end: the connection goes back to the pool (as requests' close does);
        # left part-read or failed: it is closed, never reused with bytes still in it.
        if finished:
            raw.release_conn()
        else:
            raw.close()


def transport_for_queues(
    *, pool_size: int, connection_timeout_s: float, read_timeout_s: float
) -> Urllib3Transport | None:
    """The urllib3 transport, or None when the environment has proxy or netrc settings that only
    ``requests`` applies (then keep its session)."""
    if requests_reads_environment():
        return None
    return Urllib3Transport(
        pool_size=pool_size,
        connection_timeout_s=connection_timeout_s,
        read_timeout_s=read_timeout_s,
        ca_bundle=ca_bundle(),
    )
