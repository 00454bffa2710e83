"""Microsoft Entra ID sign-in against Azurite: a throw-away certificate and a token issuer.

Azurite's OAuth mode (``--oauth basic``) serves HTTPS only and checks a bearer token's audience,
issuer and expiry, not its signature. So the suite makes a certificate authority and a certificate
for 127.0.0.1 with ``trustme``, starts Azurite with them, trusts the authority through
``REQUESTS_CA_BUNDLE`` (which requests, under the Azure SDK, reads), and signs in with
``StorageTokenIssuer``: a real ``TokenCredential`` issuing unsigned JWTs for the storage audience.

As a pytest plugin it provides ``azurite_oauth`` (session-scoped) and ``trusted_azurite_oauth``,
which also sets ``REQUESTS_CA_BUNDLE`` for the test and returns the environment the CLI needs.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError

from tests.support.azurite import REPO_ROOT, AzuriteProcess, OAuthTls

STORAGE_AUDIENCE = "https://storage.azure.com"
TENANT_ID = "72f988bf-86f1-41af-91ab-2d7cd011db47"
ISSUER = f"https://sts.windows.net/{TENANT_ID}/"
CREDENTIAL_PATH = "tests.support.entra:storage_credential"
"""The ``credential`` setting that makes the CLI sign in with this module's issuer."""


def _segment(document: dict[str, Any]) -> str:
    raw = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unsigned_jwt(*, audience: str, expires_on: int) -> str:
    """A JWT with the claims Azurite's basic OAuth mode checks, and a placeholder signature."""
    now = int(time.time())
    claims = {
        "aud": audience,
        "iss": ISSUER,
        "iat": now - 60,
        "nbf": now - 60,
        "exp": expires_on,
        "tid": TENANT_ID,
        "oid": "00000000-0000-0000-0000-000000000001",
    }
    return ".".join([_segment({"alg": "RS256", "typ": "JWT"}), _segment(claims), "c2lnbmF0dXJl"])


class StorageTokenIssuer:
    """A TokenCredential issuing tokens for ``audience`` that expire ``lifetime_s`` after issue."""

    def __init__(self, *, audience: str = STORAGE_AUDIENCE, lifetime_s: int = 3600) -> None:
        self.audience = audience
        self.lifetime_s = lifetime_s
        self.issued: list[AccessToken] = []
        self._lock = threading.Lock()

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        expires_on = int(time.time()) + self.lifetime_s
        token = AccessToken(unsigned_jwt(audience=self.audience, expires_on=expires_on), expires_on)
        with self._lock:
            self.issued.append(token)
        return token


def storage_credential() -> StorageTokenIssuer:
    """The credential ``CREDENTIAL_PATH`` names; ``ENTRA_TEST_AUDIENCE`` overrides the audience."""
    return StorageTokenIssuer(audience=os.environ.get("ENTRA_TEST_AUDIENCE", STORAGE_AUDIENCE))


def write_tls(folder: Path) -> tuple[OAuthTls, Path]:
    """A certificate and key for 127.0.0.1 signed by a new authority, and that authority's PEM."""
    import trustme  # here, not above: conftest loads this plugin without the dev extra too

    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1", "localhost")
    folder.mkdir(parents=True, exist_ok=True)
    cert, key, ca = folder / "cert.pem", folder / "key.pem", folder / "ca.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    key.write_bytes(server.private_key_pem.bytes())
    ca.write_bytes(authority.cert_pem.bytes())
    return OAuthTls(cert=cert, key=key), ca


class OAuthAzurite:
    """A running Azurite in OAuth mode and the authority its certificate is signed by."""

    def __init__(self, process: AzuriteProcess, ca_bundle: Path) -> None:
        self.process = process
        self.ca_bundle = ca_bundle

    @property
    def endpoints(self) -> str:
        """The connection string naming both services, with no secret in it."""
        return f"QueueEndpoint={self.process.queue_url};BlobEndpoint={self.process.blob_url}"

    def cli_env(self, **extra: str) -> dict[str, str]:
        """Environment for the ``cloudqueue`` CLI signing in with this module's issuer."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDQUEUE_")}
        return {
            **env,
            "PYTHONPATH": str(REPO_ROOT),
            "REQUESTS_CA_BUNDLE": str(self.ca_bundle),
            "CLOUDQUEUE_CONNECTION_STRING": self.endpoints,
            "CLOUDQUEUE_CREDENTIAL": CREDENTIAL_PATH,
            **extra,
        }


@pytest.fixture(scope="session")
def azurite_oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthAzurite]:
    """Azurite's queue, blob and table services over HTTPS, accepting bearer tokens, for the
    session."""
    tls, ca = write_tls(tmp_path_factory.mktemp("azurite-tls"))
    with AzuriteProcess(REPO_ROOT, blob=True, table=True, oauth=tls) as process:
        yield OAuthAzurite(process, ca)


@pytest.fixture
def trusted_azurite_oauth(
    azurite_oauth: OAuthAzurite, monkeypatch: pytest.MonkeyPatch
) -> OAuthAzurite:
    """The OAuth Azurite, its certificate trusted by this process's HTTP clients for the test."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(azurite_oauth.ca_bundle))
    return azurite_oauth


class UnavailableCredential:
    """A TokenCredential that cannot get a token, as a managed identity off Azure cannot."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        raise ClientAuthenticationError(
            message="no managed identity endpoint found\nAttempted: IMDS at 169.254.169.254"
        )


def unavailable_credential() -> UnavailableCredential:
    """What ``tests.support.entra:unavailable_credential`` names."""
    return UnavailableCredential()
