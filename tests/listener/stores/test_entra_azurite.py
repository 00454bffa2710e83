"""Signing in with Microsoft Entra ID: Azurite in OAuth mode over HTTPS, no key anywhere.

Azurite checks each bearer token's audience, issuer and expiry; the tokens come from
``tests.support.entra.StorageTokenIssuer`` through the ``credential`` setting, as a managed
identity's would through ``CLOUDQUEUE_CREDENTIAL=managed_identity``.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, Publisher
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.connection import open_payload_store, open_storage
from tests.support.cli import cloudqueue, ok
from tests.support.entra import CREDENTIAL_PATH, OAuthAzurite, StorageTokenIssuer
from tests.support.polling import eventually
from tests.support.runs import start_cloudqueue

WORKER = "tests.support.workers:RecordingWorker"


def test_a_listener_signs_in_with_a_token_and_large_items_go_through_blobs(
    trusted_azurite_oauth: OAuthAzurite, queue_name: str
) -> None:
    """Queue and payload store open from endpoints and a credential; items of any size flow."""
    endpoints = trusted_azurite_oauth.endpoints
    storage = open_storage(endpoints, credential=CREDENTIAL_PATH)
    payloads = open_payload_store(endpoints, credential=CREDENTIAL_PATH)
    storage.create_queue(queue_name)
    publisher: Publisher[dict[str, str]] = Publisher(
        storage, queue_name, dict, payload_store=payloads
    )
    items = [{"text": "small"}, {"text": os.urandom(60_000).hex()}]  # the second needs a blob
    for item in items:
        publisher.publish(item)
    handled: list[dict[str, str]] = []
    listener: CloudQueueListener[dict[str, str]] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), dict, payload_store=payloads
    )
    listener.subscribe(handled.append)
    listener.start_listener(1)
    try:
        eventually(lambda: len(handled) == 2, timeout_s=60)
    finally:
        assert listener.stop(30)
        storage.close()
        payloads.close()
    assert sorted(handled, key=len) == sorted(items, key=len)


def test_a_token_that_expires_during_a_run_is_replaced(
    trusted_azurite_oauth: OAuthAzurite, queue_name: str
) -> None:
    """A listener outlives its first token: later calls carry fresh tokens and still succeed."""
    issuer = StorageTokenIssuer(lifetime_s=2)
    storage = AzureQueueStorage.from_account_url(trusted_azurite_oauth.process.queue_url, issuer)
    storage.create_queue(queue_name)
    publisher: Publisher[dict[str, int]] = Publisher(storage, queue_name, dict)
    handled: list[dict[str, int]] = []
    listener: CloudQueueListener[dict[str, int]] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), dict, dequeue_interval_s=0.05
    )
    listener.subscribe(handled.append)
    listener.start_listener(1)
    try:
        publisher.publish({"n": 1})
        eventually(lambda: len(handled) == 1, timeout_s=30)
        first_expiry = issuer.issued[0].expires_on
        eventually(lambda: time.time() > first_expiry + 1, timeout_s=10)
        publisher.publish({"n": 2})
        eventually(lambda: len(handled) == 2, timeout_s=30)
    finally:
        assert listener.stop(30)
        storage.close()
    assert any(token.expires_on > first_expiry for token in issuer.issued)


def test_enqueue_status_and_poison_work_without_a_key(
    trusted_azurite_oauth: OAuthAzurite,
) -> None:
    """The CLI signs in with CLOUDQUEUE_CREDENTIAL; a malformed message reaches poison."""
    env = trusted_azurite_oauth.cli_env()
    queue = f"entra-{uuid.uuid4().hex[:12]}"
    ok("enqueue", queue, '{"n": 1}', "not json at all", env=env)
    status = json.loads(ok("status", queue, "--json", env=env))
    assert status["depth"] == 2
    storage = open_storage(trusted_azurite_oauth.endpoints, credential=CREDENTIAL_PATH)
    handled: list[object] = []
    listener: CloudQueueListener[dict[str, int]] = CloudQueueListener(
        storage, CloudQueueLocation(queue), dict, dequeue_interval_s=0.05
    )
    listener.subscribe(handled.append)
    listener.start_listener(1)
    try:
        eventually(lambda: handled == [{"n": 1}], timeout_s=60)
        eventually(lambda: storage.approximate_message_count(f"{queue}-poison") == 1, timeout_s=60)
    finally:
        assert listener.stop(30)
        storage.close()
    listing = ok("poison", "list", queue, env=env)
    assert "undecodable" in listing


def test_cloudqueue_run_handles_messages_signed_in_with_a_token(
    trusted_azurite_oauth: OAuthAzurite, tmp_path: Path
) -> None:
    """`cloudqueue run` with a queue URL and a credential handles what `enqueue` put there."""
    queue = f"entra-{uuid.uuid4().hex[:12]}"
    env = trusted_azurite_oauth.cli_env(
        TEST_QUEUE=queue,
        CLOUDQUEUE_LOGGING__FORMAT="json",
        CLOUDQUEUE_STATE_DIR=str(tmp_path / "run"),
    )
    ok("enqueue", queue, *(json.dumps({"n": n}) for n in range(5)), env=env)
    log_path = tmp_path / "run.log"
    process = start_cloudqueue(["run", WORKER], env=env, log_path=log_path)
    try:
        eventually(lambda: log_path.read_text().count('"event": "handled"') == 5, timeout_s=60)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    text = log_path.read_text()
    assert "Bearer" not in text
    assert "eyJ" not in text  # no JWT (they start with base64 of '{"') in any log line


def test_a_token_for_the_wrong_audience_is_one_clear_line(
    azurite_oauth: OAuthAzurite,
) -> None:
    """Storage's 403 becomes one line naming the cause, with no traceback and no token."""
    env = azurite_oauth.cli_env(ENTRA_TEST_AUDIENCE="https://management.azure.com")
    result = cloudqueue("status", "anyqueue", env=env)
    assert result.returncode == 1
    assert "AuthenticationFailed" in result.stderr
    assert "https://storage.azure.com" in result.stderr
    assert "Traceback" not in result.stderr
    assert "eyJ" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_credential_that_cannot_get_a_token_is_one_line_naming_it(
    azurite_oauth: OAuthAzurite,
) -> None:
    """A failing credential says which one and why, in one line, without a traceback."""
    credential = "tests.support.entra:unavailable_credential"
    env = azurite_oauth.cli_env(CLOUDQUEUE_CREDENTIAL=credential)
    result = cloudqueue("status", "anyqueue", env=env)
    assert result.returncode == 1
    assert f"credential '{credential}' could not get a token" in result.stderr
    assert "no managed identity endpoint found" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_without_azure_identity_the_cli_exits_2_with_the_install_hint(
    azurite_oauth: OAuthAzurite, tmp_path: Path
) -> None:
    """A built-in credential without azure-identity installed is a usage error naming the extra."""
    shadow = tmp_path / "shadow" / "azure" / "identity"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('azure-identity is not installed')\n")
    env = azurite_oauth.cli_env(CLOUDQUEUE_CREDENTIAL="managed_identity")
    env["PYTHONPATH"] = f"{tmp_path / 'shadow'}{os.pathsep}{env['PYTHONPATH']}"
    result = cloudqueue("status", "anyqueue", env=env)
    assert result.returncode == 2
    assert "pip install 'cloudqueue[identity]'" in result.stderr
    assert "Traceback" not in result.stderr
