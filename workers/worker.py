"""The worker entry point users subclass: a queue name, an item type and a handler."""

from __future__ import annotations

import typing
from typing import Any, ClassVar, Generic, TypeVar

from listener.errors import ConfigurationError
from listener.imports import import_object
from listener.location import CloudQueueLocation

T = TypeVar("T")


class QueueWorker(Generic[T]):
    """Subclass with ``queue_name`` and ``handle``; the item type comes from ``QueueWorker[T]``.

    Example::

        class InvoiceWorker(QueueWorker[Invoice]):
            queue_name = "invoices"

            def handle(self, item: Invoice) -> None:
                bill(item)

    ``handle`` runs on a dequeue thread and may run on several threads at once. Raising an
    exception leaves the message in the queue for another try; returning deletes it.
    """

    queue_name: ClassVar[str]
    item_type: ClassVar[type[Any]] = str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "item_type" not in cls.__dict__:
            inferred = _item_type_from_bases(cls)
            if inferred is not None:
                cls.item_type = inferred

    def handle(self, item: T) -> None:
        """Handle one item; raise to have it retried."""
        raise NotImplementedError(f"{type(self).__name__} must implement handle(item)")

    @classmethod
    def location(cls, visibility_timeout_s: int) -> CloudQueueLocation:
        """The queue this worker listens on, validated."""
        name = getattr(cls, "queue_name", None)
        if not isinstance(name, str):
            raise ConfigurationError(f"{cls.__qualname__} must set queue_name = '<queue>'")
        return CloudQueueLocation(name, visibility_timeout_s=visibility_timeout_s)


def _item_type_from_bases(cls: type) -> type[Any] | None:
    for base in getattr(cls, "__orig_bases__", ()):
        if typing.get_origin(base) is QueueWorker:
            (argument,) = typing.get_args(base)
            if isinstance(argument, type):
                return argument
    return None


def load_worker(target: str) -> type[QueueWorker[Any]]:
    """Import ``package.module:ClassName`` and check it is a QueueWorker subclass."""
    worker = import_object(target, what="worker")
    if not (isinstance(worker, type) and issubclass(worker, QueueWorker)):
        raise ConfigurationError(f"{target!r} is not a QueueWorker subclass")
    return worker
