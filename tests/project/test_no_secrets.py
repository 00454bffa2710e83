"""No command prints a secret: account keys and SAS signatures never reach stdout or stderr.

Each command runs for real (``python -m cloudqueue ...``) with connection strings that carry
the Azurite account key or a SAS signature -- working ones, malformed ones, and ones whose storage
fails (a closed port, a signature Azurite rejects) -- and everything it wrote is searched for
the secrets, whole and in pieces, plain and percent-encoded.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.azurite import ACCOUNT_KEY, ACCOUNT_NAME, HOST, AzuriteProcess, free_port
from tests.support.cli import cloudqueue as run_cli
from tests.support.cli_fork import RunningProcess
from tests.support.paths import REPO_ROOT
from tests.support.polling import eventually
from tests.support.runs import start_cloudqueue

SIGNATURE = "FAKEsig%2Bs3cr3tS1gnatureXyZ0123456789abcdef%3D"
"""A SAS signature as it appears in a connection string: base64, percent-encoded."""
WRONG_KEY = "V1JPTkdrZXktbm90LXRoZS1henVyaXRlLW9uZS0wMTIzNDU2Nzg5YWJjZGVm"
"""A well-formed account key that Azurite rejects (base64 of "WRONGkey-not-the-azurite-...")."""
SAS = f"sv=2022-11-02&ss=q&srt=sco&sp=rwdlacup&se=2099-01-01T00:00:00Z&sig={SIGNATURE}"
INVOICE = '{"invoice_id": 1, "customer": "acme", "lines": []}'


def secret_fragments() -> list[str]:
    """Pieces of each secret that must not appear anywhere, in any encoding."""
    decoded_signature = "FAKEsig+s3cr3tS1gnatureXyZ0123456789abcdef="
    keys = [
        fragment
        for key in (ACCOUNT_KEY, WRONG_KEY)
        for fragment in (key, quote(key, safe=""), key[:16], key[30:46], key[-24:-2])
    ]
    return [
        *keys,
        SIGNATURE,
        decoded_signature,
        "FAKEsig",
        "s3cr3tS1gnature",
    ]


def assert_no_secret(*outputs: str) -> None:
    text = "\n".join(outputs)
    leaked = [fragment for fragment in secret_fragments() if fragment in text]
    assert not leaked, f"secret fragments {leaked} in output:\n{text}"


def endpoint(port: int) -> str:
    return f"http://{HOST}:{port}/{ACCOUNT_NAME}"


@pytest.fixture(scope="module")
def connection_strings(azurite: AzuriteProcess) -> dict[str, str]:
    """Connection strings by case, each holding the account key or a SAS signature."""
    closed = free_port()
    key = f"AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY}"
    return {
        "azurite": azurite.connection_string,
        "rejected-key": (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={WRONG_KEY};"
            f"QueueEndpoint={endpoint(azurite.queue.port)}"
        ),
        "rejected-sas": f"QueueEndpoint={endpoint(azurite.queue.port)};SharedAccessSignature={SAS}",
        "unreachable-key": f"DefaultEndpointsProtocol=http;{key};QueueEndpoint={endpoint(closed)}",
        "unreachable-sas": f"QueueEndpoint={endpoint(closed)};SharedAccessSignature={SAS}",
        "key-without-account": f"AccountKey={ACCOUNT_KEY};QueueEndpoint={endpoint(closed)}",
        "key-in-a-broken-string": f"{key};QueueEndpoint={endpoint(closed)};{ACCOUNT_KEY[:-2]}",
        "sas-without-endpoint": f"SharedAccessSignature={SAS}",
        "sas-in-a-bad-endpoint": f"QueueEndpoint=ftp://{HOST}/?{SAS};SharedAccessSignature={SAS}",
        "sas-as-a-url": f"https://{ACCOUNT_NAME}.queue.core.windows.net/?{SAS}",
    }


EXIT_CODES = {
    "azurite": 0,
    "rejected-key": 1,
    "rejected-sas": 1,
    "unreachable-key": 1,
    "unreachable-sas": 1,
    "key-without-account": 2,
    "key-in-a-broken-string": 2,
    "sas-without-endpoint": 2,
    "sas-in-a-bad-endpoint": 2,
    "sas-as-a-url": 2,
}
"""How each case ends for a command that opens storage: works, storage error, config error."""


def environment(connection_string: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": connection_string,
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_LOGGING__LEVEL": "DEBUG",  # the most verbose output is the one to check
    }


def cloudqueue(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env, cwd=REPO_ROOT, timeout_s=120)


@pytest.mark.parametrize("case", list(EXIT_CODES))
def test_storage_commands_never_print_the_secret(
    case: str, connection_strings: dict[str, str], queue_name: str, tmp_path: Path
) -> None:
    """enqueue and status, whether they work or fail, print no key and no signature; nor does
    run when the connection string is malformed (it then exits at once)."""
    env = environment(connection_strings[case], tmp_path)
    commands = [
        ["enqueue", queue_name, INVOICE],
        ["status", queue_name],
        ["status", queue_name, "--json"],
    ]
    if EXIT_CODES[case] == 2:
        commands.append(["run", "examples.billing:InvoiceWorker"])
    for args in commands:
        result = cloudqueue(env, *args)
        assert result.returncode == EXIT_CODES[case], (args, result.stdout, result.stderr)
        assert_no_secret(result.stdout, result.stderr)


@pytest.mark.parametrize("case", ["azurite", "rejected-sas", "key-in-a-broken-string"])
def test_config_show_masks_the_connection_string_from_every_source(
    case: str, connection_strings: dict[str, str], tmp_path: Path
) -> None:
    """config show lists the connection string with its secret masked, whether from env, TOML
    or --set; one it cannot parse is refused as `run` refuses it, without quoting it."""
    secret = connection_strings[case]
    config = tmp_path / "cloudqueue.toml"
    config.write_text(f"connection_string = '{secret}'\n")
    env = environment(secret, tmp_path)
    without_env = {k: v for k, v in env.items() if k != "CLOUDQUEUE_CONNECTION_STRING"}
    runs = [
        cloudqueue(env, "config", "show"),
        cloudqueue(env, "config", "show", "--json"),
        cloudqueue(without_env, "--config", str(config), "config", "show"),
        cloudqueue(without_env, "config", "show", "--set", f"connection_string={secret}"),
    ]
    parsable = EXIT_CODES[case] != 2
    for result in runs:
        assert result.returncode == (0 if parsable else 2), result.stderr
        assert_no_secret(result.stdout, result.stderr)
        assert ("=***" in result.stdout) == parsable  # the key or SAS masked, the rest shown


@pytest.fixture
def running_worker(tmp_path: Path) -> Iterator[list[RunningProcess]]:
    """Holds the `cloudqueue run` process a test starts, and always ends it."""
    started: list[RunningProcess] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(30)


@pytest.mark.parametrize(
    ("case", "event"),
    [
        ("azurite", "invoice_billed"),
        ("rejected-key", "dequeue_failed"),
        ("rejected-sas", "dequeue_failed"),
        ("unreachable-key", "dequeue_failed"),
        ("unreachable-sas", "dequeue_failed"),
    ],
)
def test_a_running_worker_logs_no_secret(
    case: str,
    event: str,
    connection_strings: dict[str, str],
    tmp_path: Path,
    running_worker: list[RunningProcess],
) -> None:
    """`run` logs at DEBUG from start to SIGTERM -- work done or storage failing -- and no
    line holds the key or the signature."""
    env = environment(connection_strings[case], tmp_path)
    if case == "azurite":
        assert cloudqueue(env, "enqueue", "invoices", INVOICE).returncode == 0
    log_path = tmp_path / "worker.log"
    process = start_cloudqueue(
        ["run", "examples.billing:InvoiceWorker"], env=env, log_path=log_path, cwd=REPO_ROOT
    )
    running_worker.append(process)
    eventually(lambda: '"host_started"' in log_path.read_text(), timeout_s=30)
    eventually(lambda: f'"{event}"' in log_path.read_text(), timeout_s=30)
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    assert '"host_stopped"' in log_path.read_text()
    assert_no_secret(log_path.read_text())
