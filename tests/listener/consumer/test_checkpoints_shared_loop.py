"""An ``async def`` handler's checkpoints on the threaded listener: its coroutine runs on the loop
every coroutine of the process shares, so the write goes to a worker thread and the other
coroutines go on meanwhile; ``await`` returns once the checkpoint is stored, and a save that is
not awaited is still written before its message settles.

On the in-memory store and the real clock, with the checkpoint's write held on an event.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    current_envelope,
)
from cloudqueue.workers.host.async_handler import AsyncHandlerRunner
from tests.support.polling import eventually

WAIT_S = 30.0
"""Deadline for an event the test itself sets; reached only when the code is broken."""


class HeldRewrites(InMemoryQueueStorage):
    """The in-memory store; an update that rewrites a message's text (a checkpoint) waits for
    ``release``, and each such update and each delete is noted in order."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.rewriting = threading.Event()
        self.calls: list[str] = []

    def update_visibility(self, *args: Any, **kwargs: Any) -> str:
        if kwargs.get("content") is not None:
            self.rewriting.set()
            assert self.release.wait(WAIT_S), "the held checkpoint was never released"
            self.calls.append("checkpoint")
        return super().update_visibility(*args, **kwargs)

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self.calls.append("delete")
        return super().delete_message(queue_name, message_id, pop_receipt)


@pytest.fixture
def storage(queue_name: str) -> HeldRewrites:
    storage = HeldRewrites()
    storage.create_queue(queue_name)
    return storage


@pytest.fixture
def listen(storage: HeldRewrites, queue_name: str) -> Iterator[Any]:
    """Start a listener of two messages in flight on one thread for an async handler."""
    running: list[tuple[CloudQueueListener[str], AsyncHandlerRunner]] = []

    def start(handle: Any) -> CloudQueueListener[str]:
        listener = CloudQueueListener(
            storage, CloudQueueLocation(queue_name), str, concurrency=2, dequeue_interval_s=0.05
        )
        runner = AsyncHandlerRunner(handle)
        listener.subscribe(runner)
        listener.start_listener(1)
        running.append((listener, runner))
        return listener

    yield start
    storage.release.set()
    for listener, runner in running:
        listener.stop(WAIT_S)
        runner.close()


def test_a_checkpoint_being_written_does_not_hold_up_the_other_coroutines(
    storage: HeldRewrites, listen: Any, queue_name: str
) -> None:
    """While "a"'s checkpoint is held in storage, "b"'s coroutine, on the same loop, runs to its
    end; "a"'s ``await`` returns once the write is released."""
    storage.put_message(queue_name, "a")
    storage.put_message(queue_name, "b")
    b_ran, a_saved = threading.Event(), threading.Event()

    async def handle(item: str) -> None:
        if item == "a":
            await current_envelope().save_checkpoint({"done": 1})
            a_saved.set()
        else:
            await asyncio.to_thread(storage.rewriting.wait, WAIT_S)
            b_ran.set()

    listener = listen(handle)
    assert storage.rewriting.wait(WAIT_S)
    assert b_ran.wait(WAIT_S), "the other coroutine waited for the checkpoint's write"
    assert not a_saved.is_set()
    storage.release.set()
    assert a_saved.wait(WAIT_S)
    eventually(lambda: listener.messages_processed == 2, timeout_s=WAIT_S)


def test_a_save_not_awaited_is_written_before_its_message_settles(
    storage: HeldRewrites, listen: Any, queue_name: str
) -> None:
    """The handler returns while its checkpoint is held; the message is deleted only after the
    write."""
    storage.put_message(queue_name, "a")
    returned = threading.Event()

    async def handle(item: str) -> None:
        current_envelope().save_checkpoint({"done": 1})
        returned.set()

    listener = listen(handle)
    assert returned.wait(WAIT_S), "save_checkpoint held the loop until its write ended"
    assert storage.rewriting.wait(WAIT_S)
    assert storage.calls == []
    storage.release.set()
    eventually(lambda: listener.messages_processed == 1, timeout_s=WAIT_S)
    assert storage.calls == ["checkpoint", "delete"]
