"""``Worker.send`` puts items where ``cloudqueue run`` of that worker reads them: a producer and
a worker started with the same environment meet on the same queue, on SQLite, on Azurite and
on a partitioned queue; an invalid item is refused at the call, and nothing is sent."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pydantic
import pytest

from cloudqueue import QueueWorker
from cloudqueue.listener import ConfigurationError, Publisher, QueueStorage
from cloudqueue.listener.stores.layouts import QueueLayout, record_layout
from cloudqueue.workers import (
    WorkerHost,
    close_senders,
    load_settings,
    open_storage_from_settings,
)
from cloudqueue.workers.api import sending
from cloudqueue.workers.settings import CloudQueueSettings
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer
from tests.support.runs import Run, Runs, run_environment
from tests.support.sending_workers import (
    Email,
    PartitionedEmail,
    SendEmail,
    UrgentOrNormalEmail,
)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    started = Runs(tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queues.db'}"


def same_environment(
    connection_string: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """A worker's environment, this test process's too: what it sends, it sends there."""
    env = run_environment(connection_string, tmp_path)
    close_senders()  # nor what a host earlier in this process told sends to use
    for name, value in env.items():
        if name.startswith("CLOUDQUEUE_"):
            monkeypatch.setenv(name, value)
    yield env
    close_senders()  # the next test reads its own environment


@pytest.fixture
def env(sqlite: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    yield from same_environment(sqlite, tmp_path, monkeypatch)


def handled(run: Run) -> list[str]:
    return [event["to"] for event in run.events("email_handled")]


def stopped(run: Run) -> int:
    run.process.send_signal(signal.SIGTERM)
    return run.process.wait(30)


@pytest.fixture(params=["sqlite", "azure"])
def env_on_each_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """The same environment, on SQLite and on Azurite."""
    store = "sqlite" if request.param == "sqlite" else "azurite_connection_string"
    yield from same_environment(request.getfixturevalue(store), tmp_path, monkeypatch)


def test_a_running_worker_handles_what_send_sent_from_another_process(
    env_on_each_store: dict[str, str], runs: Runs
) -> None:
    """`cloudqueue run` in a child process and ``SendEmail.send`` here, told only the same
    environment (the store by ``CLOUDQUEUE_CONNECTION_STRING``), meet on one queue."""
    worker = runs.start(env_on_each_store, worker="tests.support.sending_workers:SendEmail")
    eventually(lambda: worker.events("host_started"), timeout_s=30)
    SendEmail.send(Email(to="ada@example.com"))
    SendEmail.send({"to": "grace@example.com"})
    both = ["ada@example.com", "grace@example.com"]
    eventually(lambda: sorted(handled(worker)) == both, timeout_s=30)
    assert stopped(worker) == 0


@pytest.fixture
def env_with_triggers(
    sqlite: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> Iterator[dict[str, str]]:
    """The same environment with a trigger channel, and workers that scale to no poller."""
    monkeypatch.setenv("CLOUDQUEUE_TRIGGERS__URL", redis_server.url)
    monkeypatch.setenv("CLOUDQUEUE_SCALING__MIN_THREADS", "0")
    yield from same_environment(sqlite, tmp_path, monkeypatch)


def test_send_wakes_a_worker_idle_at_zero_threads_through_its_trigger_channel(
    env_with_triggers: dict[str, str], runs: Runs
) -> None:
    """A worker scaled to no poller at all (its watchdog 5 minutes away) handles what ``send``
    sent at once: the send announced it on the channel, for the worker's store."""
    worker = runs.start(env_with_triggers, worker="tests.support.sending_workers:SendEmail")
    eventually(lambda: worker.events("dequeue_thread_stopped"), timeout_s=30)
    SendEmail.send({"to": "ada@example.com"})
    eventually(lambda: handled(worker) == ["ada@example.com"], timeout_s=20)
    assert stopped(worker) == 0


def test_a_partitioned_queue_is_met_by_the_worker_own_settings(
    env: dict[str, str], runs: Runs
) -> None:
    """Sent before any worker ran (no layout recorded), the items go to the four partitions
    the worker's own ``settings`` ask for, none to the plain queue, and the worker takes them."""
    assert PartitionedEmail.send_many({"to": f"{n}@example.com"} for n in range(8)) == 8
    storage = open_storage_from_settings()
    try:
        depths = [storage.approximate_message_count(f"emails-partitioned-p{i}") for i in range(4)]
        assert sum(depths) == 8
        assert all(depths)  # round-robin: every partition has some
        assert "emails-partitioned" not in storage.list_queues("emails-partitioned")
    finally:
        storage.close()
    worker = runs.start(env, worker="tests.support.sending_workers:PartitionedEmail")
    eventually(lambda: len(handled(worker)) == 8, timeout_s=30)
    assert stopped(worker) == 0


def test_send_follows_the_layout_recorded_in_the_store(env: dict[str, str]) -> None:
    """A queue recorded as 2 partitions gets its items on them, though the settings say none."""
    storage = open_storage_from_settings()
    try:
        record_layout(storage, "emails", QueueLayout(2))
        SendEmail.send_many([Email(to="a@example.com"), Email(to="b@example.com")])
        assert [storage.approximate_message_count(f"emails-p{i}") for i in range(2)] == [1, 1]
    finally:
        storage.close()


def test_an_invalid_item_raises_naming_the_field_and_nothing_is_opened_or_sent(
    env: dict[str, str], tmp_path: Path
) -> None:
    """``send({"to": 1})`` is pydantic's ValidationError naming ``to``; no store is even
    opened. In ``send_many`` one bad item stops them all before the first is sent."""
    with pytest.raises(pydantic.ValidationError, match=r"(?s)\bto\b.*valid string"):
        SendEmail.send({"to": 1})
    assert not (tmp_path / "queues.db").exists()
    with pytest.raises(pydantic.ValidationError):
        SendEmail.send_many([{"to": "a@example.com"}, {"subject": "no recipient"}])
    storage = open_storage_from_settings()
    try:
        assert "emails" not in storage.list_queues("emails")
    finally:
        storage.close()


def test_in_a_host_process_send_uses_the_host_settings(env: dict[str, str], tmp_path: Path) -> None:
    """A host built with settings of its own (``cloudqueue run --config/--set``) has sends in
    its process go to its store, not to the one the environment alone names."""
    own = load_settings(connection_string=f"sqlite:///{tmp_path / 'own.db'}")
    host = WorkerHost([SendEmail], own)  # built, not started: nothing takes the item
    try:
        SendEmail.send({"to": "a@example.com"})
        assert host.storage.approximate_message_count("emails") == 1
    finally:
        host.stop()
    assert not (tmp_path / "queues.db").exists()


def test_threads_sending_at_once_share_one_store_client(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads sending at once, as a web app's do, open the store once between them."""
    opened: list[QueueStorage] = []

    def counted(settings: CloudQueueSettings) -> QueueStorage:
        opened.append(open_storage_from_settings(settings))
        return opened[-1]

    monkeypatch.setattr(sending, "open_storage_from_settings", counted)
    start = threading.Barrier(8)

    def send_five(thread: int) -> None:
        start.wait()
        for n in range(5):
            SendEmail.send({"to": f"{thread}.{n}@example.com"})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(send_five, range(8)))
    assert len(opened) == 1
    assert opened[0].approximate_message_count("emails") == 40


def test_send_and_a_publisher_on_the_settings_store_meet(env: dict[str, str]) -> None:
    """``Publisher(open_storage_from_settings(), ...)`` writes where ``send`` does."""
    SendEmail.send({"to": "a@example.com"})
    storage = open_storage_from_settings()
    try:
        Publisher(storage, "emails", Email).publish({"to": "b@example.com"})
        assert storage.approximate_message_count("emails") == 2
    finally:
        storage.close()


def test_a_worker_of_several_queues_is_told_which(env: dict[str, str]) -> None:
    """Several ``queue_name``s: ``queue=`` names one of them; none, or another, is refused."""
    UrgentOrNormalEmail.send({"to": "a@example.com"}, queue="emails-urgent")
    with pytest.raises(ConfigurationError, match="reads several queues"):
        UrgentOrNormalEmail.send({"to": "a@example.com"})
    with pytest.raises(ConfigurationError, match="does not read queue 'emails'"):
        UrgentOrNormalEmail.send({"to": "a@example.com"}, queue="emails")
    storage = open_storage_from_settings()
    try:
        assert storage.approximate_message_count("emails-urgent") == 1
    finally:
        storage.close()


def test_a_worker_without_an_item_type_is_refused_before_anything_is_sent() -> None:
    """``send`` on a class that ``cloudqueue run`` would refuse says so, as one clear error."""

    class Untyped(QueueWorker):  # type: ignore[type-arg]
        queue_name = "untyped"

        def handle(self, item: object) -> None:
            pass

    with pytest.raises(ConfigurationError, match="has no item type"):
        Untyped.send("anything")
