"""`cloudqueue dashboard` in a real browser: threads follow a burst, requeue from the page works.

A real `cloudqueue run` worker on the embedded SQLite store, the real `cloudqueue dashboard`
command, and Debian's headless Chromium driven by Playwright (installed by the fixture when
missing). Everything asserted is read from the rendered page.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, sync_playwright

from cloudqueue.listener import Publisher
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from tests.support.azurite import free_port, port_accepts
from tests.support.chromium import CHROMIUM_ARGS, ensure_chromium
from tests.support.paths import REPO_ROOT
from tests.support.polling import eventually
from tests.support.written_lines import log_events

QUEUE = "invoices"
ARTIFACTS = REPO_ROOT / "build" / "test-artifacts"
BURST = 120


@dataclass
class Scene:
    publisher: Publisher[dict[str, Any]]
    broken_flag: Path
    worker_log: Path
    url: str

    def handled(self) -> set[int]:
        return {int(event["n"]) for event in log_events(self.worker_log, "handled")}


def _start(args: list[str], env: dict[str, str], output: Path) -> subprocess.Popen[bytes]:
    with output.open("wb") as file:
        return subprocess.Popen(
            [sys.executable, "-m", "cloudqueue", *args],
            env=env,
            stdout=file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    """A worker that poisons `"poison": true` items while broken, and a dashboard watching it."""
    broken_flag = tmp_path / "broken"
    broken_flag.touch()
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_POISON__MAX_DEQUEUE_COUNT": "1",
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_SCALING__MESSAGES_PER_THREAD": "10",
        "CLOUDQUEUE_SCALING__MAX_THREADS": "6",
        "CLOUDQUEUE_SCALING__SCALE_IN_DELAY_S": "0.5",
        # One message per thread, each 0.1 s: the burst keeps several threads busy for about two
        # seconds, several of the dashboard's samples, however fast the machine is.
        "CLOUDQUEUE_LISTENER__CONCURRENCY": "1",
        "TEST_QUEUE": QUEUE,
        "TEST_BROKEN_FLAG": str(broken_flag),
        "TEST_HANDLER_DELAY_S": "0.1",
    }
    storage = SqliteQueueStorage(tmp_path / "queues.db")
    storage.create_queue(QUEUE)
    storage.create_queue("totals")
    publisher = Publisher(storage, QUEUE, dict[str, Any])
    port = free_port()
    worker_log = tmp_path / "worker.log"
    worker = _start(["run", "tests.support.flaky_workers:FlakyWorker"], env, worker_log)
    dashboard_args = ["dashboard", QUEUE, "--port", str(port), "--interval", "0.5"]
    dashboard = _start(dashboard_args, env, tmp_path / "dashboard.log")
    try:
        eventually(lambda: port_accepts(port), timeout_s=20)
        yield Scene(publisher, broken_flag, worker_log, f"http://127.0.0.1:{port}/")
    finally:
        _end(dashboard)
        _end(worker)
        storage.close()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    """Debian's Chromium, headless, on a new empty profile."""
    executable = ensure_chromium()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=str(executable),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1000},
        )
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def shown(page: Page, name: str, *, queue: str = QUEUE) -> str:
    """The text the page shows for one field of the queue's section."""
    return page.locator(f'[data-queue="{queue}"] [data-field="{name}"]').first.inner_text()


def number(page: Page, name: str) -> int:
    return int(shown(page, name).replace(",", ""))


def group_row(page: Page, group_id: str) -> list[str]:
    return page.locator(f'[data-group="{group_id}"] td').all_inner_texts()


def test_the_page_shows_threads_follow_a_burst_and_requeues_a_poisoned_message(
    scene: Scene, page: Page
) -> None:
    """Threads rise above one for a burst and come back; Requeue moves the poisoned one back; a
    group sent meanwhile is listed with its counts until it completes."""
    scene.publisher.publish({"n": -1, "poison": True})
    page.goto(scene.url)
    group = scene.publisher.send_group(
        [{"n": 1000 + n} for n in range(5)], on_complete="totals", group_id="billing-run"
    )
    eventually(lambda: group_row(page, group.id)[:6] == ["billing-run", "done", "5", "0", "0", "5"])
    eventually(lambda: number(page, "poison-count") == 1, timeout_s=15)
    assert "cannot handle this item" in page.locator('[data-queue="invoices"] .poison').inner_text()

    scene.publisher.publish_many({"n": n} for n in range(BURST))
    peak = eventually(lambda: number(page, "threads") > 1 and number(page, "threads"))
    eventually(lambda: len(scene.handled()) >= BURST, timeout_s=20)
    eventually(lambda: number(page, "threads") == 1, timeout_s=15)
    assert number(page, "processed") >= BURST

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    scene.broken_flag.unlink()  # the fix is deployed
    page.locator('[data-queue="invoices"] [data-action="requeue"]').first.click()
    eventually(lambda: "requeued 1 message(s)" in shown(page, "requeue-result"))
    eventually(lambda: -1 in scene.handled(), timeout_s=10)
    eventually(lambda: number(page, "poison-count") == 0)
    assert peak > 1


def test_the_page_shows_a_running_handlers_progress(tmp_path: Path, page: Page) -> None:
    """A handler blocked in step 2 of 3 shows its last report in its worker's row."""
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "TEST_QUEUE": QUEUE,
        "TEST_RECORD_PATH": str(tmp_path / "record.txt"),
        "TEST_HANG_IN_STEP": "2",
    }
    storage = SqliteQueueStorage(tmp_path / "queues.db")
    storage.create_queue(QUEUE)
    Publisher(storage, QUEUE, dict[str, Any]).publish({"job": "three steps"})
    port = free_port()
    worker_args = ["run", "tests.support.checkpoint_workers:ThreeCheckpointedSteps"]
    worker = _start(worker_args, env, tmp_path / "worker.log")
    dashboard_args = ["dashboard", QUEUE, "--port", str(port), "--interval", "0.5"]
    dashboard = _start(dashboard_args, env, tmp_path / "dashboard.log")
    try:
        eventually(lambda: port_accepts(port), timeout_s=20)
        page.goto(f"http://127.0.0.1:{port}/")
        workers = page.locator(f'[data-queue="{QUEUE}"] .workers tbody')
        eventually(lambda: "33% step 2 of 3" in workers.inner_text(), timeout_s=20)
    finally:
        _end(dashboard)
        _end(worker)
        storage.close()
