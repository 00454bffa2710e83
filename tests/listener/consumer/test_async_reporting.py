"""Progress and checkpoints on the single event loop, as on threads: a report kept for status and
written with the next renewal at no transaction of its own; a checkpoint stored when its save is
awaited, in the message or (too large for it) the payload store, received by the redelivery, and
its stored payload removed after the delete; a checkpoint that cannot be saved one clear error.

In-process on the in-memory store with real (short) visibility timeouts; the resume after a
"kill" on Azurite too, where the aio SDK rewrites the message's text.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener import InMemoryQueueStorage, Publisher, current_envelope
from cloudqueue.listener.consumer.current import current_message
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.payload_store import InMemoryPayloadStore
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.handler_notes import (
    MAX_CHECKPOINT_BYTES,
    PROGRESS_FIELD,
    CheckpointError,
)
from tests.conftest import make_storage
from tests.support.event_loop_consumer import ONE_TASK, LoopConsumer
from tests.support.polling import eventually

TIMEOUT_S = 2
"""The visibility timeout: renewed after 1 s, and a "killed" handler's message back after 2."""

AT_ONCE = DeliveryPolicy(retry_delays_s=(0,))
"""A failed message is visible again at once."""

Handler = Callable[[str], Awaitable[None]]


class Noting(InMemoryQueueStorage):
    """The in-memory store, noting each update (with the text it wrote, if any) and delete."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str | None]] = []

    def update_visibility(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append(("update_visibility", kwargs.get("content")))
        return super().update_visibility(*args, **kwargs)

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self.calls.append(("delete_message", None))
        return super().delete_message(queue_name, message_id, pop_receipt)


def consumer(
    storage: InMemoryQueueStorage, queue_name: str, handler: Handler, **options: Any
) -> LoopConsumer[str]:
    options = {"scaling": ONE_TASK, "delivery": AT_ONCE, **options}
    made = LoopConsumer(storage, queue_name, handler, MessageCodec(str), **options)
    return made.start()


def drained(
    storage: InMemoryQueueStorage, queue_name: str, handler: Handler, **options: Any
) -> None:
    """Run a consumer of ``handler`` until it handled one message."""
    running = consumer(storage, queue_name, handler, **options)
    try:
        eventually(lambda: running.messages_processed == 1)
    finally:
        running.stop()


def one_message(queue_name: str, text: str = "a long job") -> Noting:
    storage = Noting()
    storage.create_queue(queue_name)
    storage.put_message(queue_name, text)
    return storage


def test_progress_rides_the_renewal_and_shows_until_the_message_settles(
    queue_name: str,
) -> None:
    """While the handler runs, ``progress_reports()`` (the host's live state) has its report;
    the only storage call between the report and the renewal after it is that renewal, which
    writes the report into the message; the redelivery's text carries it; once settled, no
    report is left."""
    storage = one_message(queue_name)
    reported, fail = threading.Event(), threading.Event()
    carried: list[object] = []

    async def handle(_: str) -> None:
        envelope = current_envelope()
        if envelope.dequeue_count == 1:
            envelope.progress(0.4, "2 of 5 files")
            reported.set()
            await asyncio.to_thread(fail.wait, 30)
            raise ConnectionError("the job's service went away")
        message = current_message()
        assert message is not None
        fields = parse_envelope(message.content)
        carried.append(None if fields is None else fields.fields.get(PROGRESS_FIELD))

    running = consumer(storage, queue_name, handle, visibility_timeout_s=TIMEOUT_S)
    try:
        assert reported.wait(10)
        before = len(storage.calls)
        [report] = running.consumer.progress_reports()
        assert (report.queue, report.fraction, report.detail) == (queue_name, 0.4, "2 of 5 files")
        eventually(lambda: running.consumer.leases.renewals >= 1)
        [(call, written)] = storage.calls[before:]
        assert call == "update_visibility"
        assert written is not None
        assert "2 of 5 files" in written
        fail.set()
        eventually(lambda: running.messages_processed == 1)
        assert carried == [{"fraction": 0.4, "detail": "2 of 5 files"}]
        assert running.consumer.progress_reports() == []
    finally:
        fail.set()
        running.stop()


class Killed:
    """Three steps; the first delivery saves after step 2, then hangs in step 3 until killed
    (its consumer stopped with no grace: cancelled, never settled)."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int]] = []
        self.saved = threading.Event()

    async def __call__(self, _: str) -> None:
        envelope = current_envelope()
        done = envelope.checkpoint or {"done": 0}
        for step in range(done["done"] + 1, 4):
            self.steps.append((envelope.dequeue_count, step))
            if step == 3 and envelope.dequeue_count == 1:
                self.saved.set()
                await asyncio.Event().wait()  # killed here
            await envelope.save_checkpoint({"done": step})


@pytest.mark.parametrize("backend", ["memory", "azure"])
def test_a_handler_killed_after_a_checkpoint_resumes_from_it_on_the_redelivery(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, queue_name: str
) -> None:
    """Steps 1 and 2 run once: after the kill in step 3 the message reappears (its visibility
    timeout) and the next consumer's handler starts at step 3, then deletes it."""
    storage = make_storage(backend, request, tmp_path)
    storage.create_queue(queue_name)
    storage.put_message(queue_name, "three steps")
    handler = Killed()
    options = {"visibility_timeout_s": 1, "grace_s": 0.0}
    try:
        first = LoopConsumer(storage, queue_name, handler, MessageCodec(str), **options).start()
        assert handler.saved.wait(20)
        first.stop()
        assert first.consumer.cancelled_at_stop == 1
        second = LoopConsumer(storage, queue_name, handler, MessageCodec(str), **options)
        second.start()
        try:
            eventually(lambda: second.messages_processed == 1)
        finally:
            second.stop()
        assert handler.steps == [(1, 1), (1, 2), (1, 3), (2, 3)]
        assert storage.approximate_message_count(queue_name) == 0
    finally:
        storage.close()


def test_a_checkpoint_too_large_for_the_message_goes_to_the_payload_store_and_is_removed(
    queue_name: str,
) -> None:
    """A 100 KiB state is put in the payload store, the message naming it; the redelivery reads
    it back whole (the store holding it then), and it is removed once the message is deleted."""
    storage, store = one_message(queue_name, "big"), InMemoryPayloadStore()
    state = {"rows": [f"row {n:06d} " + "z" * 90 for n in range(1000)]}
    seen: list[tuple[object, list[str]]] = []

    async def handle(_: str) -> None:
        envelope = current_envelope()
        seen.append((envelope.checkpoint, store.names()))
        if envelope.dequeue_count == 1:
            await envelope.save_checkpoint(state)
            raise ConnectionError("crash after the checkpoint")

    drained(storage, queue_name, handle, payload_store=store)
    [(first, none_stored), (second, stored)] = seen
    assert (first, none_stored, second, len(stored)) == (None, [], state, 1)
    assert store.names() == []  # removed with its message


def saved_then_failed(queue_name: str, save: Callable[[object], Awaitable[None]]) -> list[object]:
    """Drain one message whose first delivery saves ``{"done": 1}`` through ``save``, then
    fails: the checkpoint each delivery read."""
    storage = one_message(queue_name)
    seen: list[object] = []

    async def handle(_: str) -> None:
        envelope = current_envelope()
        seen.append(envelope.checkpoint)
        if envelope.dequeue_count == 1:
            await save({"done": 1})
            raise ConnectionError("failed after the checkpoint")

    drained(storage, queue_name, handle)
    return seen


def test_a_save_not_awaited_is_written_before_its_message_settles(queue_name: str) -> None:
    """A handler that does not await its saves goes on at once; its failure is settled only
    after the writes, made in the order of the saves, so the redelivery receives the last."""

    async def save(state: object) -> None:
        envelope = current_envelope()
        envelope.save_checkpoint({"done": 0})
        envelope.save_checkpoint(state)

    assert saved_then_failed(queue_name, save) == [None, {"done": 1}]


def test_a_save_from_a_thread_the_handler_started_returns_once_stored(queue_name: str) -> None:
    """Called on a worker thread (``asyncio.to_thread``), save_checkpoint waits for the write
    on the loop, as on threads."""

    async def save(state: object) -> None:
        await asyncio.to_thread(lambda: current_envelope().save_checkpoint(state))

    assert saved_then_failed(queue_name, save) == [None, {"done": 1}]


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("x" * (MAX_CHECKPOINT_BYTES + 1), "over the limit"),
        ({"when": object()}, "must be a JSON value"),
        ({"blob": "q" * 70_000}, "no payload store"),
    ],
    ids=["over-the-limit", "not-json", "too-large-without-a-store"],
)
def test_a_checkpoint_that_cannot_be_saved_is_the_threaded_paths_clear_error(
    state: object, words: str, queue_name: str
) -> None:
    """save_checkpoint raises CheckpointError at once, naming the problem, as on threads, and
    writes nothing."""
    storage = one_message(queue_name)
    errors: list[str] = []

    async def handle(_: str) -> None:
        with pytest.raises(CheckpointError) as raised:
            current_envelope().save_checkpoint(state)
        errors.append(str(raised.value))

    drained(storage, queue_name, handle)
    assert len(errors) == 1
    assert words in errors[0]
    assert [call for call, _ in storage.calls] == ["delete_message"]


def test_a_batch_message_refuses_a_checkpoint(queue_name: str) -> None:
    """A message of several items raises CheckpointError for each: each would resume from it."""
    storage = Noting()
    storage.create_queue(queue_name)
    Publisher(storage, queue_name, str, batch=True).publish_many(["a", "b"])
    errors: list[str] = []

    async def handle(_: str) -> None:
        with pytest.raises(CheckpointError) as raised:
            current_envelope().save_checkpoint(1)
        errors.append(str(raised.value))

    drained(storage, queue_name, handle)
    assert len(errors) == 2
    assert "carries 2" in errors[0]
