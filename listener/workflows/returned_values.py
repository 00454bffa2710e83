"""What a handler returned, set aside per delivery for the middleware that wait for it.

Results (``keep_results``) and chains (``then``) need the value a handler returned, but the seam
hands items to the handler without keeping it. So their middleware wrap the handler
(``ReturnedValues.wrap``): each value is noted for the delivery being handled
(``current_message()``, set by whichever path delivers it, in the context that runs the handler),
and the middleware ``expect`` the delivery before its handling and ``take`` its values after.

The delivery is told apart by its ``QueueMessage`` object, not its id: a redelivery of the same
message while a stale handler still runs (its lease was lost) is another object, so neither takes
the other's values. Keying by object rather than by a context variable lets a middleware run its
steps on a worker thread (the event loop's seam, ``event_loop.stack``), whose context the handler's
task does not share. A handler that returns after its delivery was taken (its time limit settled
the message) has nowhere to put its value: it is dropped.

An ``async def`` handler is wrapped in an ``async def`` (the single event loop awaits it); any
other callable in a plain function (the threaded path's, or its ``AsyncHandlerRunner``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from cloudqueue.listener.consumer.current import current_message
from cloudqueue.listener.stores.storage import QueueMessage

FAILED = object()
"""Noted for an item whose handler raised: nothing it returned."""


class ReturnedValues:
    """The values handlers returned, one list per delivery a middleware expects."""

    def __init__(self) -> None:
        self._expected: dict[int, list[object]] = {}
        self._lock = threading.Lock()

    def expect(self, message: QueueMessage) -> None:
        """Note the values returned for ``message`` from now until ``take``."""
        with self._lock:
            self._expected[id(message)] = []

    def take(self, message: QueueMessage) -> list[object]:
        """What was returned for ``message``'s items, in order (``FAILED`` where one raised)."""
        with self._lock:
            return self._expected.pop(id(message), [])

    def note(self, value: object) -> None:
        """Note ``value`` for the delivery being handled, when it is expected."""
        message = current_message()
        if message is None:
            return
        with self._lock:
            values = self._expected.get(id(message))
            if values is not None:
                values.append(value)

    def wrap(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``handler``, noting what it returns for each item (``FAILED`` when it raises)."""
        if inspect.iscoroutinefunction(handler):
            return self._wrap_async(handler)

        def handle(item: Any) -> Any:
            with self._noting() as returned:
                returned.append(handler(item))
            return returned[0]

        return handle

    def _wrap_async(self, handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Any]:
        async def handle(item: Any) -> Any:
            with self._noting() as returned:
                returned.append(await handler(item))
            return returned[0]

        return handle

    @contextmanager
    def _noting(self) -> Iterator[list[object]]:
        """Notes the value put in the list it gives, or ``FAILED`` when the block raises."""
        returned: list[object] = []
        try:
            yield returned
        except BaseException:
            self.note(FAILED)
            raise
        self.note(returned[0])


__all__ = ["FAILED", "ReturnedValues"]
