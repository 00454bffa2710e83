"""The worker entry point users subclass: a queue name, an item type and a handler."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from cloudqueue.listener.consumer.middleware import Middleware, make_middleware
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import import_object
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.policies.priority import STRICT, Priority
from cloudqueue.listener.policies.retry import Retry
from cloudqueue.listener.workflows.group_ledger import GroupError
from cloudqueue.workers.api.class_checks import (
    check_chain,
    check_hooks,
    check_item_type,
    check_takes,
    defines,
    item_type_argument,
)
from cloudqueue.workers.api.results import DEFAULT_RESULTS_TTL_S, check_results
from cloudqueue.workers.settings.model import check_worker_overrides

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from cloudqueue.listener.consumer.listener import CloudQueueListener
    from cloudqueue.listener.workflows.result_handle import ResultHandle
    from cloudqueue.listener.workflows.sending import GroupHandle

T = TypeVar("T")


class QueueWorker(Generic[T]):
    """Subclass with ``queue_name`` and ``handle``; the item type comes from ``QueueWorker[T]``.

    ``queue_name`` may be a tuple of queues in priority order (``("invoices-urgent",
    "invoices")``): one listener reads them all, as ``listener.priority`` (strict, or weighted by
    ``listener.weights``) shares its gets; each queue keeps its own ``-poison`` queue.

    Example::

        class InvoiceWorker(QueueWorker[Invoice]):
            queue_name = "invoices"
            settings = {"scaling": {"max_threads": 4}, "listener": {"visibility_timeout_s": 120}}

            def handle(self, item: Invoice) -> None:
                bill(item)

    ``handle`` runs for several messages at once, in no order (see ``handle``); it may also be an
    ``async def``, whose coroutines share one event loop per worker. Returning deletes the
    message; raising leaves it in the queue for another try. ``settings`` overrides the
    process-wide settings for this worker only (any listener, backoff or scaling field);
    ``middleware`` wraps the handling of each message (``cloudqueue.listener.Middleware``);
    ``retry`` shapes its retries (``Retry``). A worker may define ``handle_batch`` instead of
    ``handle``, and ``startup`` / ``shutdown`` (plain or ``async def``) to open and close what its
    handlers share, once per process. The class is checked at load (``check``).
    ``key`` and ``concurrency_key``, when defined, give the keys that idempotent handling,
    cancelling and the per-key limit use (see each).
    """

    queue_name: ClassVar[str | tuple[str, ...]]
    item_type: ClassVar[Any]
    """From ``QueueWorker[Item]``, or set in the class; a worker without one is refused."""
    settings: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    middleware: ClassVar[Sequence[Middleware | Callable[[], Middleware]]] = ()
    """Middleware around each of this worker's messages, outermost first: instances, or classes
    (and factories) made once per hosted worker. The ``listener.middleware`` setting adds more
    after these."""
    retry: ClassVar[Retry | None] = None
    """This worker's retry policy: delays, what to retry or give up on, how many deliveries.
    None: the settings' back-off (``listener.retry_delay_s``) and ``poison.max_dequeue_count``."""
    keep_results: ClassVar[bool] = False
    """Keep what ``handle`` returns under the message's key, for ``send``'s handle to fetch
    (``result(timeout_s)``) and a group's ``results()`` (``cloudqueue.workers.api.results``)."""
    results_ttl_s: ClassVar[float] = DEFAULT_RESULTS_TTL_S
    """How long a kept result can be fetched (seconds; a day by default)."""
    then: ClassVar[type[QueueWorker[Any]] | None] = None
    """The next step of a chain: what ``handle`` returns (an item of its type, a list of them, or
    None for nothing) is sent to its queue before this message is deleted, effect-once, with
    the message's key, trace and group membership (``cloudqueue.listener.workflows.chains``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "item_type" not in cls.__dict__:
            inferred = _item_type_from_bases(cls)
            if inferred is not None:
                cls.item_type = inferred

    def startup(self) -> Awaitable[None] | None:
        """Open what the handler shares (a client session, a pool) once, before the first
        message; may be an ``async def``, run on the event loop the async handlers run on.
        Raising stops the process before it takes a message (exit code 4)."""

    def shutdown(self) -> Awaitable[None] | None:
        """Close what ``startup`` opened, after the drain (SIGTERM and Ctrl-C too), on the same
        loop; an exception is logged, not raised. Runs only when ``startup`` returned."""

    def on_start(self, listener: CloudQueueListener[T]) -> None:
        """Called once before the first dequeue thread starts, after ``startup``; subscribe extra
        observers here. A plain ``def``: async set-up belongs in ``startup``."""

    def handle(self, item: T) -> Awaitable[Any] | Any:
        """Handle one item; return to have it deleted, raise to have it retried. What it
        returns is kept as the message's result when the worker has ``keep_results``, and sent
        on when ``then`` names a next step (the items to send it).

        A plain ``def handle`` runs on several threads at once: up to ``listener.concurrency``
        messages (8 by default) per dequeue thread, and up to ``scaling.max_threads`` dequeue
        threads (16), so it must be thread-safe, and what it prints may interleave.
        ``settings = {"listener": {"concurrency": 1}}`` handles one message at a time per dequeue
        thread; add ``"scaling": {"max_threads": 1}`` for one at a time in all. An
        ``async def handle`` runs as coroutines on one event loop per worker instead.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement handle(item)")

    def handle_batch(self, items: list[T]) -> Awaitable[None] | None:
        """Define instead of ``handle`` to get many items in one call (``[batch] max_items``,
        waiting at most ``[batch] max_wait_s`` for them): return to have them all deleted, raise
        ``BatchFailed([positions])`` to retry only those, anything else to retry all.
        Each item's message still settles on its own; may be an ``async def``."""
        raise NotImplementedError(f"{type(self).__name__} must implement handle_batch(items)")

    @classmethod
    def batches(cls) -> bool:
        """True when the worker handles items in batches (defines ``handle_batch``)."""
        return cls.handle_batch is not QueueWorker.handle_batch

    @classmethod
    def check(cls, name: str | None = None) -> None:
        """Refuse at start what would fail on every message or be silently ignored: no handler,
        or both, or one that cannot take one item (one list); no item type; a ``retry`` that is
        no ``Retry``; a misspelt ``settings`` name; a hook never called (``class_checks``).
        ConfigurationError names the worker."""
        name = name or cls.__qualname__
        has_handle = cls.handle is not QueueWorker.handle
        if has_handle == cls.batches():
            which = "defines both handle and handle_batch" if has_handle else "does not define"
            detail = "" if has_handle else " handle(self, item) or handle_batch(self, items)"
            raise ConfigurationError(f"{name!r} {which}{detail}")
        if has_handle:
            check_takes(cls, name, "handle", "one item", "handle(self, item)")
        else:
            check_takes(cls, name, "handle_batch", "one list of items", "handle_batch(self, items)")
        check_item_type(cls, name)
        check_worker_overrides(cls.settings, f"settings of {name}")
        check_hooks(cls, QueueWorker, name)
        check_chain(cls, QueueWorker, name)
        check_key_methods(name, cls)
        check_results(cls, name)
        if cls.retry is not None and not isinstance(cls.retry, Retry):
            raise ConfigurationError(
                f"{name!r}: retry must be a workers.Retry(...), got {cls.retry!r}"
            )

    @classmethod
    def send(
        cls,
        item: T | Mapping[str, Any],
        *,
        key: str | None = None,
        delay_s: int = 0,
        delay: timedelta | None = None,
        time_to_live_s: int | None = None,
        queue: str | None = None,
    ) -> ResultHandle:
        """Put one item on this worker's queue, where ``cloudqueue run`` of this worker reads.

        The item is checked first: a dict becomes the item type's model, and an invalid item
        raises pydantic's ValidationError naming the field, with nothing opened or sent. The
        store, partitions and trigger channel are the ones the worker's settings name (the
        environment's ``CLOUDQUEUE_*``, ``.env``, the TOML file, this class's ``settings``),
        read at the first send and kept for the process (``close_senders`` forgets them).
        ``key``, ``delay_s`` (or ``delay``) and ``time_to_live_s`` are ``Publisher.publish``'s;
        ``queue`` picks one of several ``queue_name``s.

        Returns a handle: its ``key``, and ``result(timeout_s)`` for a worker that keeps results
        (``keep_results``; a key is made for an item sent without one). Ignored, it costs nothing.
        """
        from cloudqueue.workers.api import sending  # imported on the first send: it opens stores

        return sending.send(
            cls,
            item,
            key=key,
            delay_s=delay_s,
            delay=delay,
            time_to_live_s=time_to_live_s,
            queue=queue,
        )

    @classmethod
    def send_many(
        cls,
        items: Iterable[T | Mapping[str, Any]],
        *,
        delay_s: int = 0,
        delay: timedelta | None = None,
        time_to_live_s: int | None = None,
        queue: str | None = None,
    ) -> int:
        """Put many items on this worker's queue, as ``send`` does, and return how many
        messages that took. Every item is checked before the first is sent: one invalid item
        raises and none is sent."""
        from cloudqueue.workers.api import sending

        return sending.send_many(
            cls, items, delay_s=delay_s, delay=delay, time_to_live_s=time_to_live_s, queue=queue
        )

    @classmethod
    def send_group(
        cls,
        items: Iterable[T | Mapping[str, Any]],
        *,
        on_complete: type[QueueWorker[Any]],
        queue: str | None = None,
    ) -> GroupHandle:
        """Send the items as the members of a new group, each in a message of its own on this
        worker's queue, as ``send_many`` sends (every item checked first); when every member
        settled, handled or poisoned, ``on_complete`` (a worker class) receives one ``GroupDone``
        (``cloudqueue.listener.workflows``). Returns the group's handle (``id``, ``status()``,
        ``wait(timeout_s)``). GroupError for no items or an ``on_complete`` that is no worker."""
        if not (isinstance(on_complete, type) and issubclass(on_complete, QueueWorker)):
            raise GroupError(
                "on_complete must be the worker class that receives the GroupDone (a "
                f"QueueWorker subclass), got {on_complete!r}"
            )
        from cloudqueue.workers.api import sending

        return sending.send_group(cls, items, on_complete=on_complete, queue=queue)

    def on_stop(self) -> None:
        """Called once after the listener has stopped and in-flight items have finished, before
        ``shutdown``."""

    def key(self, item: T) -> str | None:
        """The key of an item whose message carries none (``Publisher(key=...)``, ``enqueue
        --key`` carry one); None for none. Define it to deduplicate or cancel messages from
        producers that send plain items. A message whose items give different keys has none;
        a key that raises poisons the message (``key_failed``)."""
        return None

    def concurrency_key(self, item: T) -> str | None:
        """The key ``[limits] per_key`` counts, where it is not the message's key (e.g. the
        customer of an invoice keyed by its number). Not defined: the message's key."""
        return None

    @classmethod
    def gives_keys(cls) -> bool:
        """True when the worker defines ``key(item)``: its messages carry the keys it gives."""
        return _defines(cls, "key")

    def key_function(self) -> Callable[[T], object] | None:
        """``key`` when this worker defines it, else None (so no call is made per message)."""
        return self.key if _defines(type(self), "key") else None

    def concurrency_key_function(self) -> Callable[[T], object] | None:
        """``concurrency_key`` when this worker defines it, else None."""
        return self.concurrency_key if _defines(type(self), "concurrency_key") else None

    @classmethod
    def own_middleware(cls) -> list[Middleware]:
        """This worker's ``middleware``, each made (classes and factories called once)."""
        return [make_middleware(each, f"{cls.__qualname__}.middleware") for each in cls.middleware]

    @classmethod
    def location(cls, visibility_timeout_s: int, priority: Priority = STRICT) -> CloudQueueLocation:
        """The queue (or queues, highest priority first) this worker listens on, validated."""
        names = getattr(cls, "queue_name", None)
        if not isinstance(names, str | tuple) or not names:
            raise ConfigurationError(
                f"{cls.__qualname__} must set queue_name = '<queue>' or a tuple of queues in "
                "priority order"
            )
        try:
            return CloudQueueLocation.of(names, visibility_timeout_s, priority=priority)
        except ConfigurationError as error:
            raise ConfigurationError(f"{cls.__qualname__}: {error}") from None


def _defines(cls: type[QueueWorker[Any]], name: str) -> bool:
    return defines(cls, QueueWorker, name)


def check_key_methods(target: str, worker: type[QueueWorker[Any]]) -> None:
    """A ``key`` or ``concurrency_key`` that is not a method of one item is refused at start."""
    for name in ("key", "concurrency_key"):
        if not _defines(worker, name):
            continue
        check_takes(worker, target, name, "one item", f"{name}(self, item)")


def _item_type_from_bases(cls: type) -> Any:
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        if isinstance(origin, type) and issubclass(origin, QueueWorker):
            (argument,) = typing.get_args(base)
            # Anything pydantic validates: a class (Invoice, str), a parametrized generic
            # (dict[str, int]), a union of models; a type variable leaves it to a subclass.
            return item_type_argument(argument)
    return None


def load_worker(target: str) -> type[QueueWorker[Any]]:
    """Import ``package.module:ClassName`` and check it is a QueueWorker subclass."""
    worker = import_object(target, what="worker")
    if not (isinstance(worker, type) and issubclass(worker, QueueWorker)):
        raise ConfigurationError(f"{target!r} is not a QueueWorker subclass")
    # Refused at start, not on the first message (which would fail and be retried forever).
    worker.check(target)
    return worker
