"""Azure SDK exceptions turned into ``cloudqueue.listener.errors``, at one boundary, without
secrets.

Every Azure module here (queues, payload blobs, the tick ledger) runs its SDK calls through
``translate_error``: the project's error type chosen from the service's error code or the HTTP
status, and a message built from safe parts only (operation, queue, status, code, a hint), never
the SDK's own text, which can quote a request URL with its SAS ``sig=`` or the account name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

import structlog
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ServiceRequestError,
    ServiceResponseError,
)

from cloudqueue.listener import errors
from cloudqueue.listener.redaction import redact

__all__ = ["error_code", "translate_error", "translated"]

log = structlog.get_logger(__name__)

_ERRORS_BY_CODE: dict[str, type[errors.StorageError]] = {
    "QueueNotFound": errors.QueueNotFoundError,
    "MessageNotFound": errors.MessageNotFoundError,
    "PopReceiptMismatch": errors.PopReceiptMismatchError,
    "RequestBodyTooLarge": errors.MessageTooLargeError,
    # Azure takes 30 s or more to delete a queue; re-creating it meanwhile is refused.
    "QueueBeingDeleted": errors.TransientStorageError,
}
_TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_HINTS = {
    "AuthenticationFailed": "storage refused the key, SAS or token: check it is for this account, "
    "not expired, and (a token) issued for the audience https://storage.azure.com",
    "AuthorizationPermissionMismatch": "the SAS lacks the permission, or the identity a data "
    "role, for this operation (see the least-privilege table in the README)",
    "AuthorizationFailure": "the SAS or identity may not do this here (permissions, IP, network)",
}


def translate_error(err: AzureError, *, operation: str, queue_name: str) -> errors.StorageError:
    """The project's error for an SDK exception, its message built from safe parts only.

    SDK messages can quote request URLs (with a SAS ``sig=``) or account names, so the message
    names the operation, queue, status and error code, never the SDK's text.
    """
    where = f"{operation} on queue {queue_name!r} failed" if queue_name else f"{operation} failed"
    if isinstance(err, ClientAuthenticationError) and err.response is None:
        # Raised before any request by a credential that could not get a token; the message is
        # NamedCredential's own one line (which credential, why), never a token.
        return errors.StorageError(f"{where}: {err.message}")
    if isinstance(err, ServiceRequestError | ServiceResponseError | IncompleteReadError):
        return errors.TransientStorageError(f"{where}: {type(err).__name__} (no usable response)")
    if not isinstance(err, HttpResponseError):
        return errors.StorageError(f"{where}: {type(err).__name__}")
    status = err.status_code
    code = error_code(err)
    message = f"{where}: HTTP {status} {code}".rstrip()
    if code in _HINTS:
        message = f"{message}: {_HINTS[code]}"
    error_type = _ERRORS_BY_CODE.get(code)
    if error_type is None:
        transient = status is not None and status in _TRANSIENT_STATUSES
        error_type = errors.TransientStorageError if transient else errors.StorageError
    return error_type(message)


def error_code(err: HttpResponseError) -> str:
    """The service's error code, e.g. ``QueueNotFound``; empty when the answer carried none."""
    # The SDK gives a StorageErrorCode enum for some errors and a plain string for others.
    code = getattr(err, "error_code", None)
    if isinstance(code, Enum):
        return str(code.value)
    return str(code or "")


@contextmanager
def translated(operation: str, queue_name: str) -> Iterator[None]:
    """Run an SDK call, turning its exceptions into the project's (without the SDK's text)."""
    try:
        yield
    except AzureError as err:
        error = translate_error(err, operation=operation, queue_name=queue_name)
        # The SDK's own text, redacted and cut to its first line (the rest is the raw XML body),
        # is kept for diagnosis in a debug event rather than in the exception.
        detail = redact(str(err)).partition("\n")[0]
        log.debug("storage_call_failed", error=str(error), detail=detail)
        raise error from None
