"""Which settings sign in with Microsoft Entra ID, and how they are refused when they cannot."""

from __future__ import annotations

import sys

import pytest

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.stores.credentials import NamedCredential, open_credential
from cloudqueue.listener.stores.token_connection import TokenTarget, token_target


def test_a_queue_service_url_alone_signs_in_with_the_default_credential() -> None:
    """No key, no SAS: the URL selects token sign-in and the blob and table URLs are derived
    from it."""
    assert token_target("https://acct.queue.core.windows.net/", None) == TokenTarget(
        "https://acct.queue.core.windows.net",
        "https://acct.blob.core.windows.net",
        "default",
        "https://acct.table.core.windows.net",
    )


def test_endpoints_with_a_credential_set_both_urls_on_their_own() -> None:
    """QueueEndpoint, BlobEndpoint and TableEndpoint without a secret, plus a credential, name
    the three services."""
    target = token_target(
        "QueueEndpoint=https://127.0.0.1:1/dev;BlobEndpoint=https://127.0.0.1:2/dev;"
        "TableEndpoint=https://127.0.0.1:3/dev",
        "azure_cli",
    )
    assert target == TokenTarget(
        "https://127.0.0.1:1/dev", "https://127.0.0.1:2/dev", "azure_cli", "https://127.0.0.1:3/dev"
    )


@pytest.mark.parametrize("connection_string", [None, "", "sqlite:///q.db", "memory://"])
def test_without_a_credential_nothing_changes_for_embedded_stores(
    connection_string: str | None,
) -> None:
    """Key, SAS and embedded connection strings keep their meaning when no credential is set."""
    assert token_target(connection_string, None) is None


@pytest.mark.parametrize(
    ("connection_string", "credential", "problem"),
    [
        ("http://acct.queue.core.windows.net", None, "https://"),
        ("https://acct.queue.core.windows.net?sv=1&sig=SECRET", None, "no query string"),
        ("AccountName=a;AccountKey=a2V5", "default", "not both"),
        ("sqlite:///q.db", "default", "not Azure"),
        ("BlobEndpoint=https://h/b", "default", "queue service URL"),
    ],
)
def test_impossible_combinations_are_refused_without_quoting_secrets(
    connection_string: str, credential: str | None, problem: str
) -> None:
    """Each refusal says what is wrong and never repeats a SAS or key."""
    with pytest.raises(ConfigurationError, match=problem) as refused:
        token_target(connection_string, credential)
    assert "SECRET" not in str(refused.value)
    assert "a2V5" not in str(refused.value)


def test_the_description_names_the_url_and_credential_only() -> None:
    """status and logs show where and how the worker signs in, nothing secret."""
    description = describe_storage("https://acct.queue.core.windows.net", credential="azure_cli")
    assert description == "azure at https://acct.queue.core.windows.net (credential azure_cli)"


@pytest.mark.parametrize(
    "name", ["default", "managed_identity", "managed_identity:abc", "azure_cli"]
)
def test_the_built_in_credentials_are_built_by_name(name: str) -> None:
    """Each built-in name gives azure-identity's credential, wrapped to name it in failures."""
    credential = open_credential(name)
    assert isinstance(credential, NamedCredential)
    assert credential.name == name
    credential.close()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("password", "unknown credential"),
        ("azure_cli:abc", "only managed_identity takes a client id"),
        ("tests.nowhere:make", "cannot import credential module"),
        ("json:dumps", "failed when called: TypeError"),
        ("json:JSONDecoder", "did not return a TokenCredential"),
    ],
)
def test_a_credential_that_cannot_be_built_is_a_configuration_error(
    name: str, problem: str
) -> None:
    """Typos, bad modules and callables that return something else are refused at start."""
    with pytest.raises(ConfigurationError, match=problem):
        open_credential(name)


def test_without_azure_identity_the_error_gives_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The built-in credentials need the identity extra, and the error says how to install it."""
    monkeypatch.setitem(sys.modules, "azure.identity", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'cloudqueue\[identity\]'"):
        open_credential("default")
