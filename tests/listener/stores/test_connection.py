"""``open_storage`` picks the backend a connection string names; ``describe_storage`` tells which
without secrets; a malformed string is a ConfigurationError that never quotes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.connection import (
    DEFAULT_PATH,
    describe_storage,
    open_storage,
    parse_connection_string,
)
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from tests.support.azurite import ACCOUNT_KEY, AzuriteProcess

SECRET_KEY = "c2VjcmV0LWFjY291bnQta2V5LXZhbHVlLTEyMzQ1Njc4OTA="
SECRET_SIG = "S3cr3tS1gnatur3%3D"


@pytest.fixture
def opened() -> Iterator[list[QueueStorage]]:
    """Storages a test opened, closed when it ends."""
    storages: list[QueueStorage] = []
    yield storages
    for storage in storages:
        storage.close()


def test_open_storage_refuses_to_guess_a_store_without_a_connection_string(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """None, empty and blank strings are refused, naming the settings-based opener, and no
    file is made: once they silently opened the default file, whatever the workers used."""
    monkeypatch.chdir(tmp_path)
    for nothing in (None, "", "   "):
        with pytest.raises(ConfigurationError, match="open_storage_from_settings"):
            open_storage(nothing)  # type: ignore[arg-type]
    assert not (tmp_path / DEFAULT_PATH).exists()


def test_describing_no_connection_string_names_the_default_path(tmp_path: Path) -> None:
    """What the settings mean by none: SQLite at ``default_path``."""
    default = tmp_path / "default" / "queues.db"
    for nothing in (None, "", "   "):
        assert describe_storage(nothing, default_path=default) == f"sqlite {default}"
    assert describe_storage(None) == f"sqlite {DEFAULT_PATH.resolve()}"


def test_sqlite_url_with_a_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[QueueStorage]
) -> None:
    """sqlite:///data/q.db is a path relative to the working directory, described resolved."""
    monkeypatch.chdir(tmp_path)
    storage = open_storage("sqlite:///data/q.db")
    opened.append(storage)
    assert isinstance(storage, SqliteQueueStorage)
    storage.create_queue("relative")
    assert (tmp_path / "data" / "q.db").exists()
    assert describe_storage("sqlite:///data/q.db") == f"sqlite {tmp_path / 'data' / 'q.db'}"


def test_sqlite_url_with_an_absolute_path(tmp_path: Path, opened: list[QueueStorage]) -> None:
    """sqlite:////abs/q.db (four slashes) is an absolute path."""
    target = tmp_path / "abs.db"
    storage = open_storage(f"sqlite:///{target}")
    opened.append(storage)
    storage.create_queue("absolute")
    assert target.exists()
    assert describe_storage(f"sqlite:///{target}") == f"sqlite {target}"


def test_memory_url(opened: list[QueueStorage]) -> None:
    """memory:// opens a fresh in-memory store."""
    storage = open_storage("memory://")
    opened.append(storage)
    assert isinstance(storage, InMemoryQueueStorage)
    assert describe_storage("memory://") == "memory"


@pytest.mark.parametrize(
    ("connection_string", "account"),
    [
        ("AccountName=prodacct;AccountKey=a2V5;", "prodacct"),
        ("accountname = prodacct ; accountkey=a2V5", "prodacct"),
        ("QueueEndpoint=https://h.example;SharedAccessSignature=sv=1&sig=x", "azure"),
        ("UseDevelopmentStorage=true", "devstoreaccount1"),
        ("memory://", "memory"),
    ],
)
def test_one_parse_gives_the_account_that_triggers_name(
    connection_string: str, account: str
) -> None:
    """The typed target carries the identity triggers use: one parser, no second regex one."""
    assert parse_connection_string(connection_string).account == account


def test_sqlite_with_two_slashes_explains_the_slash_rule() -> None:
    """sqlite://x.db is refused with the three-slash / four-slash rule, not a generic error."""
    with pytest.raises(ConfigurationError, match=r"three slashes.*four for an absolute"):
        parse_connection_string("sqlite://x.db")


def test_azure_connection_string_opens_a_working_azure_backend(
    azurite: AzuriteProcess, opened: list[QueueStorage]
) -> None:
    """An Azure connection string (here Azurite's) opens AzureQueueStorage, ready to use."""
    storage = open_storage(azurite.connection_string)
    opened.append(storage)
    assert isinstance(storage, AzureQueueStorage)
    storage.create_queue("opened-by-connection-string")
    storage.put_message("opened-by-connection-string", "hello")
    assert storage.approximate_message_count("opened-by-connection-string") >= 1
    assert describe_storage(azurite.connection_string) == (
        f"azure account devstoreaccount1 at http://127.0.0.1:{azurite.queue.port}"
    )


def test_development_storage_shortcut(opened: list[QueueStorage]) -> None:
    """UseDevelopmentStorage=true (any case) means Azurite on its well-known port."""
    storage = open_storage("UseDevelopmentStorage=True")
    opened.append(storage)
    assert isinstance(storage, AzureQueueStorage)
    assert storage.endpoint == "http://127.0.0.1:10001/devstoreaccount1"
    assert describe_storage("usedevelopmentstorage=true;") == (
        "azure account devstoreaccount1 at http://127.0.0.1:10001"
    )


@pytest.mark.parametrize(
    ("connection_string", "description"),
    [
        (
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={SECRET_KEY};"
            "EndpointSuffix=core.windows.net",
            "azure account acct at https://acct.queue.core.windows.net",
        ),
        (
            f"accountname=acct;accountkey={SECRET_KEY};endpointsuffix=core.chinacloudapi.cn",
            "azure account acct at https://acct.queue.core.chinacloudapi.cn",
        ),
        (
            f"QueueEndpoint=https://acct.queue.core.windows.net/?sv=1&sig={SECRET_SIG};"
            f"SharedAccessSignature=sv=1&sig={SECRET_SIG}",
            "azure (shared access signature) at https://acct.queue.core.windows.net",
        ),
        (
            f"AccountName=acct;SharedAccessSignature=sv=1&sig={SECRET_SIG}",
            "azure account acct at https://acct.queue.core.windows.net",
        ),
    ],
)
def test_azure_descriptions_name_account_and_endpoint_only(
    connection_string: str, description: str
) -> None:
    """The description has the account and endpoint host, never keys or signatures."""
    assert describe_storage(connection_string) == description


@pytest.mark.parametrize(
    ("connection_string", "complaint"),
    [
        ("AccountName=acct;EndpointSuffix=core.windows.net", "neither AccountKey nor Shared"),
        (f"AccountKey={SECRET_KEY}", "no AccountName"),
        (f"AccountName=acct;AccountKey={SECRET_KEY[:-3]}!!", "not valid base64"),
        (f"SharedAccessSignature=sv=1&sig={SECRET_SIG}", "neither AccountName nor QueueEndpoint"),
        (f"AccountName=acct;{SECRET_KEY.rstrip('=')}", "part 2 is not Key=Value"),
        (f"just-a-secret-{SECRET_SIG}", "part 1 is not Key=Value"),
        (f"postgres://user:{SECRET_SIG}@db/queues", "unsupported connection string scheme"),
        (
            f"QueueEndpoint=ftp://acct/?sig={SECRET_SIG};SharedAccessSignature=sig={SECRET_SIG}",
            "QueueEndpoint",
        ),
        ("sqlite:///", "no path"),
    ],
)
def test_malformed_strings_say_what_is_wrong_without_quoting_secrets(
    connection_string: str, complaint: str
) -> None:
    """Both functions refuse a malformed string, naming the problem and never the secret."""
    for parse in (open_storage, describe_storage):
        with pytest.raises(ConfigurationError) as raised:
            parse(connection_string)
        message = str(raised.value)
        assert complaint in message
        for secret in (SECRET_KEY, SECRET_KEY[:20], SECRET_SIG, ACCOUNT_KEY):
            assert secret not in message
