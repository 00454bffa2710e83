"""``around_handle`` as a generator: stepped around the rest of the chain by either stack -- a
return before the ``yield`` goes no further, a failure reaches the ``yield``, and a ``blocking``
one is stepped on a worker thread while the handler runs on the loop."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from cloudqueue.listener.consumer.event_loop.stack import AsyncMiddlewareStack
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper, run_wrapped
from cloudqueue.listener.stores.storage import QueueMessage


def context() -> MessageContext[Any]:
    now = datetime.now(UTC)
    message = QueueMessage(
        id="m1",
        pop_receipt="receipt",
        dequeue_count=1,
        inserted_on=now,
        expires_on=None,
        next_visible_on=now,
        content="{}",
    )
    return MessageContext("q", message, [{}], None, 1, deliverable=True)


class Steps(Middleware):
    """Notes each step and the thread it ran on; skips instead of going on when told."""

    def __init__(self, *, skip: bool = False, blocking: bool = False) -> None:
        self.skip, self.blocking = skip, blocking
        self.steps: list[tuple[str, str]] = []

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        self.steps.append(("before", threading.current_thread().name))
        if self.skip:
            context.skip("told to")
            return
        try:
            yield
        finally:
            self.steps.append(("after", threading.current_thread().name))


def test_the_code_after_the_yield_runs_after_the_rest_and_a_return_goes_no_further() -> None:
    """Stepped around a plain call: before, the rest, after; a skip never calls the rest."""
    calls: list[str] = []
    going_on = Steps()
    run_wrapped(going_on.around_handle(context(), lambda: None), lambda: calls.append("rest"))
    skipping = Steps(skip=True)
    run_wrapped(skipping.around_handle(context(), lambda: None), lambda: calls.append("never"))
    assert calls == ["rest"]
    assert [step for step, _ in going_on.steps] == ["before", "after"]
    assert [step for step, _ in skipping.steps] == ["before"]


def test_a_failure_of_the_rest_reaches_the_yield_and_comes_back_out() -> None:
    """The wrapper's finally runs, and the failure is raised to the caller."""
    steps = Steps()

    def failing() -> None:
        raise RuntimeError("the rest failed")

    with pytest.raises(RuntimeError, match="the rest failed"):
        run_wrapped(steps.around_handle(context(), lambda: None), failing)
    assert [step for step, _ in steps.steps] == ["before", "after"]


def test_a_wrapper_that_yields_twice_is_refused() -> None:
    """One yield: a second is a bug in the middleware, not a second handling."""

    def twice() -> Wrapper:
        yield
        yield

    with pytest.raises(RuntimeError, match="only once"):
        run_wrapped(twice(), lambda: None)


def test_on_the_event_loop_a_blocking_wrapper_steps_on_a_thread_and_the_rest_on_the_loop() -> None:
    """A short wrapper is stepped on the loop's thread; a ``blocking`` one on a worker thread,
    while the handling between its steps stays on the loop."""
    short, blocking = Steps(), Steps(blocking=True)
    handled_on: list[str] = []

    async def deliver() -> None:
        handled_on.append(threading.current_thread().name)
        message_context.handled = True

    async def main() -> str:
        stack = AsyncMiddlewareStack([short, blocking], queue_name="q")
        await stack.handle(message_context, deliver)
        return threading.current_thread().name

    message_context = context()
    loop_thread = asyncio.run(main())
    assert handled_on == [loop_thread]
    assert {thread for _, thread in short.steps} == {loop_thread}
    assert [step for step, _ in blocking.steps] == ["before", "after"]
    assert all(":blocking" in thread for _, thread in blocking.steps)  # the stack's own pool
    assert message_context.middleware_error is None
