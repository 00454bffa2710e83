"""Checkpoints: a handler saves its state in its own message, and a redelivery resumes from it.

In virtual time on the in-memory store (``run_until_drained``); the kill -9 tests on SQLite and
Azurite are in ``tests/workers/test_checkpoints_killed.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    Publisher,
    current_envelope,
)
from cloudqueue.listener.stores.payload_store import InMemoryPayloadStore
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.listener.wire.handler_notes import (
    CHECKPOINT_BLOB_FIELD,
    MAX_CHECKPOINT_BYTES,
    CheckpointError,
    rewritten,
)
from cloudqueue.listener.wire.packing import single_message
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.testing import run_until_drained


class ThreeSteps(QueueWorker[str]):
    """Three checkpointed steps; the first delivery fails during step 3."""

    queue_name = "steps"
    steps_run: ClassVar[list[tuple[int, int]]] = []

    def handle(self, item: str) -> None:
        envelope = current_envelope()
        done = envelope.checkpoint or {"done": 0}
        for step in range(done["done"] + 1, 4):
            ThreeSteps.steps_run.append((envelope.dequeue_count, step))
            if step == 3 and envelope.dequeue_count == 1:
                raise ConnectionError("the third step's service went away")
            envelope.save_checkpoint({"done": step})


def test_a_redelivery_resumes_at_the_step_after_the_last_checkpoint() -> None:
    """Steps 1 and 2 run once; the redelivery after the failure in step 3 starts at step 3."""
    ThreeSteps.steps_run = []
    result = run_until_drained(ThreeSteps(), ["job"], fail_fast=False)
    assert list(result) == ["job"]
    assert ThreeSteps.steps_run == [(1, 1), (1, 2), (1, 3), (2, 3)]


class AsyncSteps(QueueWorker[str]):
    """An ``async def`` handler: the first delivery checkpoints, then fails."""

    queue_name = "async-steps"
    seen: ClassVar[list[object]] = []

    async def handle(self, item: str) -> None:
        envelope = current_envelope()
        AsyncSteps.seen.append(envelope.checkpoint)
        if envelope.dequeue_count == 1:
            envelope.save_checkpoint({"done": 1})
            raise ConnectionError("killed after step 1")


def test_an_async_handler_resumes_alike() -> None:
    """The coroutine's redelivery reads the checkpoint its first delivery saved."""
    AsyncSteps.seen = []
    run_until_drained(AsyncSteps(), ["job"], fail_fast=False)
    assert AsyncSteps.seen == [None, {"done": 1}]


def make_listener(
    storage: InMemoryQueueStorage, clock: VirtualClock, queue: str, **options: Any
) -> CloudQueueListener[str]:
    return CloudQueueListener(
        storage, CloudQueueLocation(queue), str, clock=clock, sleeper=clock, **options
    )


def test_a_message_without_a_checkpoint_reads_none(
    virtual_storage: InMemoryQueueStorage, virtual_clock: VirtualClock, queue_name: str
) -> None:
    """A first delivery's checkpoint is None."""
    virtual_storage.put_message(queue_name, "plain")
    seen: list[object] = []
    listener = make_listener(virtual_storage, virtual_clock, queue_name)
    listener.subscribe(lambda _: seen.append(current_envelope().checkpoint))
    run_until_drained(listener)
    assert seen == [None]


def refusals(listener: CloudQueueListener[str], state: object) -> list[str]:
    """Drain the listener with a handler that saves ``state``: the CheckpointError messages."""
    errors: list[str] = []

    def handle(_: str) -> None:
        with pytest.raises(CheckpointError) as raised:
            current_envelope().save_checkpoint(state)
        errors.append(str(raised.value))

    listener.subscribe(handle)
    run_until_drained(listener)
    return errors


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"when": object()}, "must be a JSON value"),
        (float("nan"), "must be a JSON value"),
        ("x" * (MAX_CHECKPOINT_BYTES + 1), "over the limit"),
    ],
    ids=["not-json", "nan", "too-large"],
)
def test_a_checkpoint_that_is_no_json_or_too_large_is_one_clear_error(
    state: object,
    words: str,
    virtual_storage: InMemoryQueueStorage,
    virtual_clock: VirtualClock,
    queue_name: str,
) -> None:
    """save_checkpoint raises CheckpointError naming the problem, and nothing is written."""
    virtual_storage.put_message(queue_name, "plain")
    listener = make_listener(virtual_storage, virtual_clock, queue_name)
    errors = refusals(listener, state)
    assert len(errors) == 1
    assert words in errors[0]


def test_a_checkpoint_too_large_for_the_message_goes_to_the_payload_store(
    virtual_storage: InMemoryQueueStorage, virtual_clock: VirtualClock, queue_name: str
) -> None:
    """A 100 KiB state is kept in the payload store, the message naming it; the redelivery
    reads it back whole, and it is removed once the message is deleted."""
    virtual_storage.put_message(queue_name, "big")
    store = InMemoryPayloadStore()
    state = {"rows": [f"row {n:06d} " + "z" * 90 for n in range(1000)]}
    seen: list[object] = []

    def handle(_: str) -> None:
        envelope = current_envelope()
        seen.append(envelope.checkpoint)
        if envelope.dequeue_count == 1:
            envelope.save_checkpoint(state)
            raise ConnectionError("crash after the checkpoint")

    listener = make_listener(virtual_storage, virtual_clock, queue_name, payload_store=store)
    listener.subscribe(handle)
    run_until_drained(listener, fail_fast=False)
    assert seen == [None, state]
    assert store.names() == []  # removed with its message


def test_a_checkpoint_too_large_without_a_payload_store_is_one_clear_error(
    virtual_storage: InMemoryQueueStorage, virtual_clock: VirtualClock, queue_name: str
) -> None:
    """Without a payload store, a state over what the message holds raises CheckpointError."""
    virtual_storage.put_message(queue_name, "big")
    listener = make_listener(virtual_storage, virtual_clock, queue_name)
    errors = refusals(listener, {"blob": "q" * 70_000})
    assert len(errors) == 1
    assert "no payload store" in errors[0]


@pytest.mark.parametrize(
    "fields",
    [
        {"checkpoint": "{not json"},
        {"checkpoint": {"an": "object, not text"}},
        {CHECKPOINT_BLOB_FIELD: "other-queue/" + "0" * 32},
        {CHECKPOINT_BLOB_FIELD: "../../etc/passwd"},
    ],
    ids=["not-json", "not-text", "foreign-payload", "bad-name"],
)
def test_a_corrupt_checkpoint_in_a_foreign_message_is_logged_and_read_as_none(
    fields: dict[str, object],
    virtual_storage: InMemoryQueueStorage,
    virtual_clock: VirtualClock,
    queue_name: str,
) -> None:
    """The handler starts over (checkpoint None) and the message is handled and deleted; one
    ``checkpoint_unreadable`` event says why."""
    enveloped = single_message("plain", enveloped=True)
    assert isinstance(enveloped, str)
    virtual_storage.put_message(queue_name, rewritten(enveloped, fields))
    seen: list[object] = []
    listener = make_listener(
        virtual_storage, virtual_clock, queue_name, payload_store=InMemoryPayloadStore()
    )
    listener.subscribe(lambda item: seen.append((item, current_envelope().checkpoint)))
    with capture_logs() as logs:
        run_until_drained(listener)
    assert seen == [("plain", None)]
    assert [e["event"] for e in logs].count("checkpoint_unreadable") == 1
    assert virtual_storage.approximate_message_count(queue_name) == 0


def test_a_batch_message_refuses_a_checkpoint(
    virtual_storage: InMemoryQueueStorage, virtual_clock: VirtualClock, queue_name: str
) -> None:
    """A message of several items raises CheckpointError: each item would resume from it."""
    Publisher(virtual_storage, queue_name, str, batch=True).publish_many(["a", "b"])
    listener = make_listener(virtual_storage, virtual_clock, queue_name)
    errors = refusals(listener, 1)
    assert len(errors) == 2
    assert "carries 2" in errors[0]
