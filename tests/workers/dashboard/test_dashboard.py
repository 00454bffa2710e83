"""The dashboard's app and command: who may see and change what, and what /api/state says."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from starlette.exceptions import StarletteDeprecationWarning

from cloudqueue.listener.poison.move import poison_message
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.connection import describe_storage, open_storage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers.cli import cli
from cloudqueue.workers.dashboard.access import Access, chosen_token
from cloudqueue.workers.dashboard.app import create_app
from cloudqueue.workers.views.sampler import Sampler, _counters
from tests.support.azurite import ACCOUNT_KEY, free_port
from tests.support.polling import eventually

with warnings.catch_warnings():
    # Starlette 1.x asks for the httpx2 fork under its TestClient; httpx works as well.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

QUEUE = "invoices"
TOKEN = "correct-horse-battery-staple"
REQUEUE = f"/api/queues/{QUEUE}/poison/requeue"


def poisoned(storage: QueueStorage, queue: str = QUEUE, *, count: int = 1) -> None:
    """Put ``count`` messages in the queue and poison them as a listener would."""
    storage.create_queue(queue)
    storage.create_queue(poison_queue_name(queue))
    for number in range(count):
        storage.put_message(queue, f"item {number}")
    for message in storage.get_messages(queue, max_messages=32, visibility_timeout_s=30):
        poison_message(
            storage,
            queue,
            message,
            reason="handler_failed",
            error="ValueError: bad invoice",
            now=datetime.now(UTC),
        )


def client_for(storage: QueueStorage, tmp_path: Path, access: Access) -> TestClient:
    sampler = Sampler(
        storage,
        queues=[QUEUE],
        state_dir=tmp_path / "run",
        where=describe_storage("sqlite:///" + str(tmp_path / "queues.db")),
        policy=ScalingPolicy(),
    )
    sampler.sample()
    return TestClient(create_app(sampler, access, run_sampler=False))


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[SqliteQueueStorage]:
    with closing(SqliteQueueStorage(tmp_path / "queues.db")) as store:
        poisoned(store)
        yield store


@pytest.fixture
def open_client(storage: SqliteQueueStorage, tmp_path: Path) -> TestClient:
    """The dashboard as it runs bound to loopback, without a token."""
    return client_for(storage, tmp_path, Access(token=None, loopback_only=True))


@pytest.fixture
def guarded_client(storage: SqliteQueueStorage, tmp_path: Path) -> TestClient:
    """The dashboard as it runs bound beyond loopback, with a token."""
    return client_for(storage, tmp_path, Access(token=TOKEN, loopback_only=False))


LOCAL = {"host": "127.0.0.1:8787"}
JSON_POST = {**LOCAL, "content-type": "application/json"}


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/"), ("GET", "/api/state"), ("GET", "/static/dashboard.js"), ("POST", REQUEUE)],
)
def test_off_loopback_every_request_without_the_token_is_refused(
    guarded_client: TestClient, method: str, path: str
) -> None:
    """No token, or a wrong one: 401 for the page, the API, the static files and the action."""
    assert guarded_client.request(method, path, json={}).status_code == 401
    wrong = {"authorization": "Bearer not-the-token"}
    assert guarded_client.request(method, path, json={}, headers=wrong).status_code == 401


def test_off_loopback_the_bearer_token_opens_the_api(guarded_client: TestClient) -> None:
    """Scripts send Authorization: Bearer TOKEN."""
    response = guarded_client.get("/api/state", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.json()["queues"][0]["poison"]["count"] == 1


def test_the_token_in_the_address_signs_the_browser_in_and_leaves_the_address_bar(
    guarded_client: TestClient,
) -> None:
    """/?token=... sets an HttpOnly, SameSite=Strict cookie and redirects to /, then / opens."""
    response = guarded_client.get(f"/?token={TOKEN}", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert guarded_client.get("/").status_code == 200  # the client keeps the cookie
    assert TOKEN not in guarded_client.get("/").text
    assert TOKEN not in guarded_client.get("/api/state").text


def test_a_wrong_token_in_the_address_signs_nobody_in(guarded_client: TestClient) -> None:
    response = guarded_client.get("/?token=guess", follow_redirects=False)
    assert response.status_code == 401
    assert "set-cookie" not in response.headers


def test_on_loopback_a_request_for_another_host_name_is_refused(open_client: TestClient) -> None:
    """DNS rebinding: a page of evil.example resolving to 127.0.0.1 gets nothing."""
    assert open_client.get("/api/state", headers={"host": "evil.example:8787"}).status_code == 421
    assert open_client.get("/api/state", headers={"host": "localhost:8787"}).status_code == 200
    assert open_client.get("/api/state", headers=LOCAL).status_code == 200


FRAMING_HEADERS = {
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("GET", "/", LOCAL),
        ("GET", "/api/state", LOCAL),
        ("GET", "/static/dashboard.js", LOCAL),
        ("POST", REQUEUE, JSON_POST),
        ("GET", "/api/state", {"host": "evil.example:8787"}),
        ("POST", REQUEUE, {**JSON_POST, "origin": "http://localhost:9999"}),
        ("GET", "/no-such-page", LOCAL),
    ],
)
def test_no_response_may_be_framed_by_another_page(
    open_client: TestClient, method: str, path: str, headers: dict[str, str]
) -> None:
    """Clickjacking: every answer, refusals included, forbids framing, sniffing and referrers."""
    response = open_client.request(method, path, json={"limit": 1}, headers=headers)
    for name, value in FRAMING_HEADERS.items():
        assert response.headers.get(name) == value, (name, response.status_code)


def test_off_loopback_refusals_and_sign_in_forbid_framing_too(guarded_client: TestClient) -> None:
    """The 401 and the sign-in redirect carry the same headers as the page."""
    for response in (
        guarded_client.get("/"),
        guarded_client.get(f"/?token={TOKEN}", follow_redirects=False),
    ):
        assert response.headers.get("x-frame-options") == "DENY"
        assert response.headers.get("content-security-policy") == "frame-ancestors 'none'"


def test_requeue_is_a_json_post_only(open_client: TestClient, storage: SqliteQueueStorage) -> None:
    """GET is not allowed, a form post is refused, a post from another site is refused."""
    assert open_client.get(REQUEUE, headers=LOCAL).status_code == 405
    form = {**LOCAL, "content-type": "application/x-www-form-urlencoded"}
    assert open_client.post(REQUEUE, content="limit=1", headers=form).status_code == 415
    elsewhere = {**JSON_POST, "origin": "https://evil.example"}
    assert open_client.post(REQUEUE, json={}, headers=elsewhere).status_code == 403
    assert storage.approximate_message_count(poison_queue_name(QUEUE)) == 1


def test_requeue_by_id_moves_that_message_back(
    open_client: TestClient, storage: SqliteQueueStorage
) -> None:
    """The id the page lists is the one moved; the answer counts it, the state shows it gone."""
    state = open_client.get("/api/state", headers=LOCAL).json()
    record = state["queues"][0]["poison"]["latest"][0]
    assert record["reason"] == "handler_failed"
    assert record["error"] == "ValueError: bad invoice"
    origin = {**JSON_POST, "origin": "http://127.0.0.1:8787"}
    answer = open_client.post(REQUEUE, json={"id": record["original_id"]}, headers=origin)
    assert answer.json() == {"moved": 1, "skipped": []}
    assert storage.approximate_message_count(QUEUE) == 1
    after = open_client.get("/api/state", headers=LOCAL).json()
    assert after["queues"][0]["poison"] == {"count": 0, "latest": []}


def test_requeue_refuses_a_queue_the_dashboard_does_not_watch(open_client: TestClient) -> None:
    response = open_client.post("/api/queues/other/poison/requeue", json={}, headers=JSON_POST)
    assert response.status_code == 404


def test_requeue_refuses_a_malformed_body(open_client: TestClient) -> None:
    for body in ([1], {"limit": 0}, {"limit": "all"}, {"id": 7}):
        response = open_client.post(REQUEUE, json=body, headers=JSON_POST)
        assert response.status_code == 400, body


def test_a_named_queue_that_does_not_exist_is_shown_as_an_error(
    storage: SqliteQueueStorage, tmp_path: Path
) -> None:
    """The dashboard keeps running and says so, rather than failing on start."""
    sampler = Sampler(
        storage, queues=["missing"], state_dir=tmp_path, where="here", policy=ScalingPolicy()
    )
    sampler.sample()
    (shown,) = sampler.state()["queues"]
    assert shown["queue"] == "missing"
    assert shown["error"] == "queue missing does not exist on here"


def test_running_groups_and_those_ended_in_the_last_ten_minutes_are_shown(tmp_path: Path) -> None:
    """/api/state lists the store's groups newest first: a running one with its counts, one that
    ended a minute ago; one that ended an hour ago is gone from view."""
    clock = ManualClock()
    with closing(SqliteQueueStorage(tmp_path / "queues.db", clock=clock)) as store:
        ledger = group_ledger_for(store)
        assert ledger is not None
        ledger.open("old", total=1, on_complete="totals")
        ledger.settle("old", "0", "handled")
        clock.advance(3600)
        ledger.open("recent", total=1, on_complete="totals")
        ledger.settle("recent", "0", "poisoned")
        clock.advance(60)
        ledger.open("running", total=3, on_complete="totals")
        ledger.settle("running", "1", "handled")
        clock.advance(5)
        sampler = Sampler(
            store,
            queues=[],
            state_dir=tmp_path,
            where="here",
            policy=ScalingPolicy(),
            now=clock.now,
            groups=ledger,
        )
        sampler.sample()
        state = TestClient(create_app(sampler, Access(None, loopback_only=True), run_sampler=False))
        shown = state.get("/api/state", headers=LOCAL).json()["groups"]
    assert [(row["group"], row["state"], row["pending"]) for row in shown] == [
        ("running", "running", 2),
        ("recent", "completing", 0),
    ]
    assert (shown[0]["handled"], shown[0]["total"], shown[0]["age_s"]) == (1, 3, 5.0)


def test_cost_meter_values_are_summed_when_workers_publish_them() -> None:
    """Transactions/hour and cost/month from the cost meter win; absent, the measured rate."""
    metered: list[dict[str, Any]] = [
        {"processed": 3, "failed": 1, "poisoned": 0, "dequeue_errors": 0},
        {"processed": 4, "failed": 0, "poisoned": 1, "dequeue_errors": 2},
    ]
    metered[0] |= {"storage_transactions_per_hour": 100.0, "projected_cost_per_month_usd": 1.5}
    metered[1] |= {"storage_transactions_per_hour": 50.0, "projected_cost_per_month_usd": 0.5}
    counters = _counters(metered, {"transactions_per_hour": 999.0})
    assert counters["processed"] == 7
    assert counters["storage_transactions_per_hour"] == 150.0
    assert counters["projected_cost_per_month_usd"] == 2.0
    unmetered = [{"processed": 1, "failed": 0, "poisoned": 0, "dequeue_errors": 0}]
    counters = _counters(unmetered, {"transactions_per_hour": 999.0})
    assert counters["storage_transactions_per_hour"] == 999.0
    assert counters["projected_cost_per_month_usd"] is None


def test_items_processed_are_summed_beside_messages() -> None:
    """A batched message of 200 items counts 200 items; an older worker's file counts messages."""
    workers: list[dict[str, Any]] = [
        {"processed": 1, "items_processed": 200, "failed": 0, "poisoned": 0, "dequeue_errors": 0},
        {"processed": 3, "failed": 0, "poisoned": 0, "dequeue_errors": 0},
    ]
    counters = _counters(workers, {"transactions_per_hour": None})
    assert (counters["items_processed"], counters["processed"]) == (203, 4)


def test_no_page_or_response_carries_the_account_key(
    azurite_connection_string: str, tmp_path: Path
) -> None:
    """On Azure storage: neither the key nor the connection string in any body or header."""
    storage = open_storage(azurite_connection_string)
    queue = f"dash{uuid.uuid4().hex[:12]}"
    try:
        poisoned(storage, queue)
        sampler = Sampler(
            storage,
            queues=[queue],
            state_dir=tmp_path,
            where=describe_storage(azurite_connection_string),
            policy=ScalingPolicy(),
        )
        sampler.sample()
        client = TestClient(create_app(sampler, Access(token=None, loopback_only=True)))
        paths = ["/", "/api/state", "/static/dashboard.js", "/static/index.html"]
        responses = [client.get(path, headers=LOCAL) for path in paths]
        responses.append(
            client.post(f"/api/queues/{queue}/poison/requeue", json={}, headers=JSON_POST)
        )
        assert responses[-1].json() == {"moved": 1, "skipped": []}
        for response in responses:
            seen = response.text + json.dumps(dict(response.headers))
            assert ACCOUNT_KEY not in seen
            assert ACCOUNT_KEY[:20] not in seen
            assert azurite_connection_string not in seen
        assert responses[1].json()["queues"][0]["queue"] == queue
    finally:
        storage.delete_queue(queue)
        storage.delete_queue(poison_queue_name(queue))
        storage.close()


@pytest.mark.parametrize(
    ("configured", "host", "expected"),
    [
        ("set", "127.0.0.1", ("set", False)),
        ("set", "0.0.0.0", ("set", False)),
        (None, "127.0.0.1", (None, False)),
        (None, "localhost", (None, False)),
        (None, "::1", (None, False)),
    ],
)
def test_a_configured_token_is_used_and_never_generated_nor_none_on_loopback(
    configured: str | None, host: str, expected: tuple[str | None, bool]
) -> None:
    """The setting wins wherever bound; on loopback without it, no token at all."""
    assert chosen_token(configured, host) == expected


def test_beyond_loopback_without_a_setting_a_new_token_is_generated_each_start() -> None:
    first, generated = chosen_token(None, "0.0.0.0")
    assert generated
    assert first
    assert len(first) >= 32
    assert chosen_token(None, "192.168.1.5")[0] != first


def test_without_the_extra_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No uvicorn installed: exit code 2, as for any configuration error, and the pip command."""
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(cli, ["dashboard"])
    assert result.exit_code == 2
    assert "pip install 'cloudqueue[dashboard]'" in result.output


def test_bound_beyond_loopback_the_command_prints_a_generated_token_and_requires_it(
    tmp_path: Path,
) -> None:
    """`--host 0.0.0.0` with no token setting: one printed, requests without it refused."""
    port = free_port()
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }
    env.pop("CLOUDQUEUE_DASHBOARD__TOKEN", None)
    log_path = tmp_path / "dashboard.log"
    with log_path.open("wb") as log_file:
        command = ["dashboard", "--host", "0.0.0.0", "--port", str(port)]
        process = subprocess.Popen(
            [sys.executable, "-m", "cloudqueue", *command],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        printed = eventually(lambda: re.findall(r"\?token=([\w-]+)", log_path.read_text()))
        token = printed[0]
        url = f"http://127.0.0.1:{port}/api/state"
        answer = eventually(lambda: _get(url, {"authorization": f"Bearer {token}"}), timeout_s=20)
        assert answer.status_code == 200
        assert httpx.get(url, timeout=5).status_code == 401
        assert (
            httpx.get(url, headers={"authorization": "Bearer guess"}, timeout=5).status_code == 401
        )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def _get(url: str, headers: dict[str, str]) -> httpx.Response:
    try:
        return httpx.get(url, headers=headers, timeout=5)
    except httpx.TransportError as error:
        raise AssertionError("not listening yet") from error  # `eventually` tries again
