"""The one seam around the handling of messages: ``Middleware``, a base class of no-op hooks.

A listener holds one ordered list of middleware (``middleware=[...]``; a worker's
``middleware`` attribute and the ``listener.middleware`` setting feed it). Each hook is called
on every middleware that overrides it, in list order -- ``around_handle`` nests, the first in the
list outermost:

* ``on_start`` / ``on_stop``: the listener's first threads start; it has stopped.
* ``before_fetch`` / ``after_fetch``: around each get of a batch, on the dequeue thread.
* ``before_handle``: on the dequeue thread, before a fetched message is started. A wait here
  holds the thread back (a rate limit) and is not counted as handling time.
* ``around_handle``: wraps the handling of one message after it was decoded (its items handed to
  the observers, i.e. the worker's handler). It may time it, skip it, retry it later, give it
  up, re-route it, or call ``call_next()`` to go on (see ``MessageContext``).
* ``after_settle``: once the message is deleted, retried, poisoned, dropped or left, with the
  outcome and its reason (``MessageContext.outcome``).
* the bus's events: ``on_queue_empty`` (the design's ``QueueEmpty``: may decide the idle wait),
  ``on_queue_work_detected`` (the design's ``QueueWorkDetected``), ``on_batch_processed`` and
  ``on_scaled`` (``cloudqueue.listener.consumer.events``).

A hook that raises is contained and logged like a failing observer: in ``around_handle`` the
message counts as failed (and is retried, then poisoned); anywhere else the error is logged and
the listener goes on. Any hook may be an ``async def``: its coroutine runs to completion on the
listener's event loop (``cloudqueue.listener.consumer.coroutines``); an async ``around_handle``
awaits ``call_next()``, which then runs the rest of the chain on a worker thread. An
``around_handle`` may also be a generator that ``yield``s where it would call ``call_next()``
(``cloudqueue.listener.consumer.wrapping``): it then runs without a thread hop on both paths.

On the event-loop consumer (``async def`` handlers) the same middleware run on the handler's
loop (``cloudqueue.listener.consumer.event_loop.stack``): async hooks are awaited there, sync ones
called there -- except the hooks of a middleware that says it ``blocking`` (a wait, a remote
ledger), which run on a worker thread, and a plain ``around_handle``, which runs on a worker
thread with ``call_next()`` handing the rest of the chain back to the loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from cloudqueue.listener.consumer.events import (
    BatchProcessed,
    ListenerStarted,
    ListenerStopped,
    QueueEmpty,
    QueueEmptyDecision,
    QueueWorkDetected,
    Scaled,
)
from cloudqueue.listener.consumer.item_failures import ItemFailure
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.storage import QueueMessage
from cloudqueue.listener.wire.envelope import Envelope

T = TypeVar("T")

OutcomeKind = Literal[
    "deleted",
    "retried",
    "poisoned",
    "dropped",
    "skipped",
    "rerouted",
    "left",
    "delayed",
    "deferred",
]
"""Where a message ended: ``deleted`` after its handler returned; ``retried`` (hidden for a
back-off, or its failed items re-published); ``poisoned``; ``dropped`` (a duplicate of done
work); ``skipped`` or ``rerouted`` by a middleware; ``left`` where it was (lost lease, storage
failure: it reappears); ``delayed``: not due yet, hidden again unhandled (a delay beyond 7 days,
``cloudqueue.listener.consumer.hops``); ``deferred`` by a middleware: still held, it comes back in
line later."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a message was settled, and why (a poison or skip reason, a retry's error)."""

    kind: OutcomeKind
    reason: str | None = None
    error: str | None = None
    retry_in_s: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What a middleware decided instead of (or after) handling: see ``MessageContext``."""

    kind: Literal["skip", "retry", "give_up", "reroute", "defer"]
    reason: str
    error: str | None = None
    delay_s: float | None = None
    queue_name: str | None = None


Resume = Callable[[], None]
"""Puts a deferred message back in line (callable from any thread, once; later calls do nothing)."""

Deferrer = Callable[["MessageContext[Any]", "float | None"], Resume]
"""What the listener gives each context to defer it: parks its lease (``cloudqueue.listener.consumer
.deferrals``) and returns how to resume it, at once or after the given seconds."""


@dataclass(slots=True, eq=False)
class MessageContext(Generic[T]):
    """One message on its way through the middleware: what it is, what became of it.

    ``items`` are the decoded items (one, unless a publisher batched them); ``failures`` the
    items any observer raised on, filled when ``call_next()`` returns. A middleware may decide
    instead of handling (not calling ``call_next``) or after it:

    * ``skip(reason)``: delete the message without handling it (a duplicate, a cancelled key);
    * ``retry(reason, delay_s=...)``: hide it for ``delay_s`` and count a failed delivery;
    * ``give_up(reason, error)``: move it to the poison queue now, with that reason;
    * ``reroute(queue_name)``: put its text on another queue, then delete it here;
    * ``defer(reason)``: not now -- the message stays held (its lease renewed) but gives up its
      handler slot, and goes back in line when the returned ``Resume`` is called (or after
      ``resume_after_s``); no delivery is counted (a busy key: ``cloudqueue.listener.middleware``).

    A middleware that neither calls ``call_next`` nor decides leaves the message failed: it is
    retried, never silently deleted. A ``retry`` or ``give_up`` decided after ``call_next`` about
    a message whose observers failed on some items applies to those items only (the others were
    handled: see ``cloudqueue.listener.consumer.settlement``).
    """

    queue_name: str
    message: QueueMessage
    items: list[T]
    envelope: Envelope | None
    deliveries: int
    """This delivery's number, earlier messages of the same items included."""
    failures: list[ItemFailure] = field(default_factory=list)
    decision: Decision | None = None
    outcome: Outcome | None = None
    deliverable: bool = False
    """True when the items will go to the observers on ``call_next``; False for a message that
    cannot be handled (undecodable, delivered too often, a duplicate...), which ``call_next``
    settles instead (``outcome`` says how when it returns)."""
    handled: bool = False
    """True once the items went to the observers (``call_next`` ran to the end)."""
    middleware_error: Exception | None = None
    """What a middleware raised while wrapping the handling: the message counts as failed."""
    payload_name: str | None = None
    """The stored payload the message's items were read from, if any."""
    attempts: int = 0
    """Deliveries of these items in earlier messages (a re-published batch's)."""
    reached: int = 0
    """How deep the middleware chain went (the stack tells a middleware that went on)."""
    key: str | None = None
    """The message's key (``cloudqueue.listener.wire.keys``): the one it carries, else the worker's
    ``key(item)`` (a message whose items give different keys has none)."""
    deferrer: Deferrer | None = field(default=None, repr=False)
    """Set by the listener: how ``defer`` parks this message."""

    @property
    def message_id(self) -> str:
        return self.message.id

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def due(self) -> datetime | None:
        """When a message delayed beyond 7 days is due (its envelope's ``due``), else None."""
        envelope = self.envelope
        return None if envelope is None else envelope.due

    def skip(self, reason: str) -> None:
        self.decision = Decision("skip", reason)

    def retry(self, reason: str, *, delay_s: float, error: str | None = None) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self.decision = Decision("retry", reason, error=error or reason, delay_s=delay_s)

    def give_up(self, reason: str, error: str) -> None:
        self.decision = Decision("give_up", reason, error=error)

    def reroute(self, queue_name: str, *, reason: str = "rerouted") -> None:
        self.decision = Decision("reroute", reason, queue_name=queue_name)

    def defer(self, reason: str, *, resume_after_s: float | None = None) -> Resume:
        """Keep the message held but out of its slot until the returned ``Resume`` is called
        (or ``resume_after_s`` passed); it is then read and handled again, with no delivery
        counted. A stop releases deferred messages to the queue."""
        if self.deferrer is None:
            raise RuntimeError("this message cannot be deferred: no listener holds it")
        if resume_after_s is not None and resume_after_s < 0:
            raise ValueError(f"resume_after_s must be >= 0, got {resume_after_s}")
        self.decision = Decision("defer", reason, delay_s=resume_after_s)
        return self.deferrer(self, resume_after_s)


CallNext = Callable[[], Any]
"""Goes on with the handling: the next middleware, or the observers (returns nothing useful;
an async ``around_handle`` awaits it)."""


class Middleware:
    """Hooks around a listener's work; override the ones you need (each is a no-op here).

    One instance serves every thread of a listener at once: keep its state thread-safe. See
    the module's docstring for when each hook runs.
    """

    blocking: bool = False
    """True when a sync hook of this middleware may wait (a rate limit, a call to remote
    storage): on an event loop it then runs on a worker thread rather than stall the loop."""

    def blocks(self, context: MessageContext[Any]) -> bool:
        """Whether a generator ``around_handle`` may wait for this message: on an event loop
        its steps then run on a worker thread. ``blocking`` unless overridden (a middleware
        that calls storage for some messages only says which)."""
        return self.blocking

    def on_start(self, event: ListenerStarted) -> Awaitable[None] | None:
        """The listener starts its first dequeue threads."""
        return None

    def on_stop(self, event: ListenerStopped) -> Awaitable[None] | None:
        """The listener has stopped and its threads have exited."""
        return None

    def before_fetch(self, queue_name: str) -> Awaitable[None] | None:
        """A dequeue thread is about to get a batch."""
        return None

    def after_fetch(
        self, queue_name: str, messages: Sequence[QueueMessage]
    ) -> Awaitable[None] | None:
        """A get returned ``messages`` (possibly none)."""
        return None

    def before_handle(self, message: QueueMessage) -> Awaitable[None] | None:
        """A fetched message is about to start, on the dequeue thread (may wait)."""
        return None

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Any:
        """Wrap the handling of one decoded message; call ``call_next()`` to go on."""
        return call_next()

    def after_settle(self, context: MessageContext[Any]) -> Awaitable[None] | None:
        """The message was settled: ``context.outcome`` says how."""
        return None

    def on_queue_empty(self, event: QueueEmpty) -> QueueEmptyDecision | None:
        """A get came back empty: return a decision to set the idle wait (one middleware may)."""
        return None

    def on_queue_work_detected(self, event: QueueWorkDetected) -> Awaitable[None] | None:
        """An idle thread (or the listener's first get) found messages."""
        return None

    def on_batch_processed(self, event: BatchProcessed) -> Awaitable[None] | None:
        """A thread finished a stretch of work."""
        return None

    def on_scaled(self, event: Scaled) -> Awaitable[None] | None:
        """The scaler grew or shrank the pool."""
        return None


HOOKS = (
    "on_start",
    "on_stop",
    "before_fetch",
    "after_fetch",
    "before_handle",
    "around_handle",
    "after_settle",
    "on_queue_empty",
    "on_queue_work_detected",
    "on_batch_processed",
    "on_scaled",
)
"""Every hook, so the stack calls only the middleware that override each."""


def make_middleware(made: object, name: str) -> Middleware:
    """A middleware from a class (made with no arguments), a factory, or an instance."""
    if isinstance(made, Middleware):
        return made
    if callable(made):
        try:
            middleware = made()
        except Exception as error:
            raise ConfigurationError(f"middleware {name!r} could not be made: {error}") from None
        if isinstance(middleware, Middleware):
            return middleware
    raise ConfigurationError(
        f"middleware {name!r} is not a Middleware (subclass listener.Middleware)"
    )


def overrides(middleware: Middleware, hook: str) -> bool:
    """True when the middleware's class defines its own ``hook``."""
    return getattr(type(middleware), hook) is not getattr(Middleware, hook)


__all__ = [
    "HOOKS",
    "CallNext",
    "Decision",
    "Deferrer",
    "MessageContext",
    "Middleware",
    "Outcome",
    "OutcomeKind",
    "Resume",
    "make_middleware",
    "overrides",
]
