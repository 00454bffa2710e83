"""Microsoft Entra ID sign-in: the ``credential`` setting turned into a token credential.

Accepted values (``CLOUDQUEUE_CREDENTIAL``)::

    default                        DefaultAzureCredential (environment, workload and managed
                                   identity, Azure CLI... in its documented order)
    managed_identity               the managed identity of the VM, App Service or container
    managed_identity:CLIENT_ID     a user-assigned managed identity
    workload_identity              Kubernetes workload identity (AZURE_CLIENT_ID, AZURE_TENANT_ID,
                                   AZURE_FEDERATED_TOKEN_FILE set by the webhook)
    azure_cli                      whoever is signed in with `az login`
    package.module:callable        your own: called without arguments, returns a TokenCredential

The built-in ones need the optional ``azure-identity`` (``pip install 'cloudqueue[identity]'``).
Every credential is wrapped so that a failure to get a token is one line naming the credential and
the reason (never a traceback, never a token): ``NamedCredential``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from azure.core.credentials import AccessToken, TokenCredential
from azure.core.exceptions import ClientAuthenticationError

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import import_extra, import_object
from cloudqueue.listener.redaction import redact

__all__ = ["BUILT_IN_CREDENTIALS", "NamedCredential", "open_credential"]

BUILT_IN_CREDENTIALS = ("default", "managed_identity", "workload_identity", "azure_cli")


class NamedCredential:
    """A token credential whose failures say which credential failed and why, in one line."""

    def __init__(self, name: str, inner: TokenCredential) -> None:
        self.name = name
        self._inner = inner

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        try:
            return self._inner.get_token(*scopes, **kwargs)
        except Exception as error:
            # azure-identity's messages span lines and list every credential it tried; the first
            # line says what went wrong. The SDK turns this into the storage call's failure.
            reason = redact(str(error)).strip().partition("\n")[0] or type(error).__name__
            raise ClientAuthenticationError(
                message=f"credential {self.name!r} could not get a token: {reason}"
            ) from None

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return f"NamedCredential({self.name!r})"


def open_credential(spec: str) -> NamedCredential:
    """The credential a ``credential`` setting names; ConfigurationError when it cannot be built."""
    name = spec.strip()
    kind, _, client_id = name.partition(":")
    if kind in BUILT_IN_CREDENTIALS:
        return NamedCredential(name, _built_in(kind, client_id or None))
    if ":" not in name:
        raise ConfigurationError(
            f"unknown credential {name!r}: use one of {', '.join(BUILT_IN_CREDENTIALS)}, "
            "managed_identity:CLIENT_ID or 'package.module:callable'"
        )
    return NamedCredential(name, _custom(name))


def _built_in(kind: str, client_id: str | None) -> TokenCredential:
    identity = import_extra("azure.identity", extra="identity", needed_by=f"credential {kind!r}")
    factories: dict[str, Callable[[], TokenCredential]] = {
        "default": identity.DefaultAzureCredential,
        "managed_identity": lambda: identity.ManagedIdentityCredential(client_id=client_id),
        "workload_identity": identity.WorkloadIdentityCredential,
        "azure_cli": identity.AzureCliCredential,
    }
    if client_id is not None and kind != "managed_identity":
        raise ConfigurationError(f"only managed_identity takes a client id, not {kind!r}")
    try:
        return factories[kind]()
    except ValueError as error:  # e.g. workload identity without its environment variables
        raise ConfigurationError(f"credential {kind!r} cannot be built: {error}") from None


def _custom(path: str) -> TokenCredential:
    factory = import_object(path, what="credential")
    if not callable(factory):
        raise ConfigurationError(f"credential {path!r} is not callable")
    try:
        credential = factory()
    except Exception as error:
        reason = redact(str(error)).partition("\n")[0]
        raise ConfigurationError(
            f"credential {path!r} failed when called: {type(error).__name__}: {reason}"
        ) from None
    if not callable(getattr(credential, "get_token", None)):
        raise ConfigurationError(f"credential {path!r} did not return a TokenCredential")
    return credential  # type: ignore[no-any-return]
