"""``QueueWorker.send``, ``send_many`` and ``send_group``: a worker's items put on its queue from
any process, on the store, the partitions and the trigger channel a ``cloudqueue run`` of that
worker would use.

The process settings are read once, at the first send (``load_settings``: the environment's
``CLOUDQUEUE_*``, ``.env``, the TOML file), as ``cloudqueue run`` reads them once at start; each
worker class adds its own ``settings``. The store, its payload store, the further accounts of
``partition_accounts`` and the trigger channel are opened once per process and shared by every
worker class; each queue's partition layout is read as ``cloudqueue enqueue`` reads it (the
recorded layout, else the worker's ``listener.partitions``) and read again every
``LAYOUT_REFRESH_S``. In a ``cloudqueue run`` process the host's settings are used instead
(``send_with``), ``--config`` and ``--set`` included. ``close_senders`` closes all that (at exit
too); a forked child opens its own rather than share its parent's connections.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol, cast

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.push.triggers import TriggerChannel, account_of
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.stores.layouts import QueueLayout
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import Encoding, MessageCodec
from cloudqueue.listener.workflows.result_handle import ResultHandle
from cloudqueue.listener.workflows.sending import GroupHandle
from cloudqueue.workers.api.class_checks import check_item_type
from cloudqueue.workers.api.result_handles import (
    ResultKeeper,
    key_to_send,
    result_handle,
    result_signals,
)
from cloudqueue.workers.settings import CloudQueueSettings, load_settings
from cloudqueue.workers.settings.connections import (
    open_payload_store_from_settings,
    open_storage_from_settings,
    open_trigger_channel,
)
from cloudqueue.workers.settings.layouts import command_layout, over_accounts

LAYOUT_REFRESH_S = 60.0
"""How long a queue's layout is trusted before it is read again (one metadata read)."""


class WorkerClass(ResultKeeper, Protocol):
    """What sending reads of a ``QueueWorker`` class (typed so, as ``worker.py`` imports this
    module when ``send`` is called: each importing the other would be a circle)."""

    item_type: Any
    settings: Mapping[str, Mapping[str, Any]]

    def location(self, visibility_timeout_s: int) -> CloudQueueLocation: ...


def send(
    worker_type: WorkerClass,
    item: object,
    *,
    key: str | None,
    delay_s: int,
    delay: timedelta | None,
    time_to_live_s: int | None,
    queue: str | None,
) -> ResultHandle:
    """Check ``item`` against the worker's item type, then put it on the worker's queue; the
    handle of its result (``cloudqueue.workers.api.result_handles``)."""
    checked = _codec(_item_type(worker_type)).validated(item)
    key = key_to_send(worker_type, key)
    _SENDERS.publisher(worker_type, queue).publish(
        checked, key=key, delay_s=delay_s, delay=delay, time_to_live_s=time_to_live_s
    )
    return _SENDERS.result_handle(worker_type, key)


def send_many(
    worker_type: WorkerClass,
    items: Iterable[object],
    *,
    delay_s: int,
    delay: timedelta | None,
    time_to_live_s: int | None,
    queue: str | None,
) -> int:
    """Check every item, then put them all; the number of messages that took."""
    codec = _codec(_item_type(worker_type))
    checked = [codec.validated(item) for item in items]
    return _SENDERS.publisher(worker_type, queue).publish_many(
        checked, delay_s=delay_s, delay=delay, time_to_live_s=time_to_live_s
    )


def send_group(
    worker_type: WorkerClass, items: Iterable[object], *, on_complete: object, queue: str | None
) -> GroupHandle:
    """Check every item, then send them as the members of a new group whose ``GroupDone`` goes
    to the worker ``on_complete``'s queue; its handle."""
    codec = _codec(_item_type(worker_type))
    checked = [codec.validated(item) for item in items]
    publisher = _SENDERS.publisher(worker_type, queue)
    return publisher.send_group(checked, on_complete=on_complete)


def send_with(settings: CloudQueueSettings) -> None:
    """Send with these settings rather than ``load_settings()``'s, unless sends have opened a
    store already: a host's own, which ``--config`` and ``--set`` shaped."""
    _SENDERS.adopt(settings)


def close_senders() -> None:
    """Close what ``send`` opened in this process and forget the settings it read: the next
    send reads them again. Registered to run at exit."""
    _SENDERS.close()


def _name(worker_type: WorkerClass) -> str:
    return str(getattr(worker_type, "__qualname__", worker_type))


def _item_type(worker_type: WorkerClass) -> type[Any]:
    """The worker's item type; a worker without one is refused as ``cloudqueue run`` refuses it."""
    check_item_type(cast(type, worker_type), _name(worker_type))  # a class: WorkerClass says so
    item_type: type[Any] = worker_type.item_type
    return item_type


def _codec(item_type: type[Any]) -> MessageCodec[Any]:
    """A codec to check items with (before anything is opened); the encoding plays no part."""
    codec = _CHECKING.get(item_type)
    if codec is None:
        codec = _CHECKING[item_type] = MessageCodec(item_type)
    return codec


_CHECKING: dict[type[Any], MessageCodec[Any]] = {}


@dataclass
class _Route:
    """One worker queue's publisher, over the layout read at ``read_at`` (monotonic)."""

    publisher: Publisher[Any]
    layout: QueueLayout
    read_at: float


@dataclass
class _Opened:
    """What one process's sends share: its settings and the connections they name."""

    settings: CloudQueueSettings
    storage: QueueStorage
    further: list[QueueStorage]
    payloads: PayloadStore | None
    channel: TriggerChannel | None
    routes: dict[tuple[WorkerClass, str], _Route] = field(default_factory=dict)

    @classmethod
    def open(cls, settings: CloudQueueSettings) -> _Opened:
        """All of it, or (when one cannot be opened) none: what was opened is closed again."""
        opened = cls(settings, open_storage_from_settings(settings), [], None, None)
        try:
            opened.further = [
                open_storage(account.get_secret_value(), credential=settings.credential)
                for account in settings.partition_accounts
            ]
            opened.payloads = open_payload_store_from_settings(settings)
            opened.channel = open_trigger_channel(settings)
        except BaseException:
            opened.close()
            raise
        return opened

    def close(self) -> None:
        for closable in (self.storage, *self.further, self.payloads, self.channel):
            if closable is not None:
                closable.close()


class _Senders:
    """This process's opened connections and publishers, built once under a lock."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._opened: _Opened | None = None
        self._adopted: CloudQueueSettings | None = None
        self._pid = os.getpid()

    def publisher(self, worker_type: WorkerClass, queue: str | None) -> Publisher[Any]:
        queue_name = _queue_of(worker_type, queue)
        with self._lock:
            opened = self._process_connections()
            route = opened.routes.get((worker_type, queue_name))
            now = self._clock.monotonic()
            if route is None or now - route.read_at >= LAYOUT_REFRESH_S:
                route = _route(opened, worker_type, queue_name, now, route)
                opened.routes[(worker_type, queue_name)] = route
            return route.publisher

    def result_handle(self, worker_type: WorkerClass, key: str | None) -> ResultHandle:
        with self._lock:
            opened = self._process_connections()
        signals = None
        if worker_type.keep_results:  # a handle nobody can wait on needs no channel
            account = account_of(opened.settings.connection_string_value())
            signals = result_signals(opened.channel, account)
        return result_handle(worker_type, key, opened.storage, signals, self._clock)

    def adopt(self, settings: CloudQueueSettings) -> None:
        with self._lock:
            self._adopted = settings

    def close(self) -> None:
        with self._lock:
            opened, self._opened, self._adopted = self._opened, None, None
            if opened is not None and self._pid == os.getpid():
                opened.close()

    def _process_connections(self) -> _Opened:
        if self._pid != os.getpid():
            # A forked child: the parent's connections are the parent's to use and close.
            self._opened, self._pid = None, os.getpid()
        if self._opened is None:
            self._opened = _Opened.open(self._adopted or load_settings())
        return self._opened


def _route(
    opened: _Opened,
    worker_type: WorkerClass,
    queue_name: str,
    now: float,
    previous: _Route | None,
) -> _Route:
    """The queue's publisher for its current layout: the previous one if that still holds."""
    settings = opened.settings.for_worker(
        worker_type.settings, source=f"settings of {_name(worker_type)}"
    )
    layout = command_layout(opened.storage, settings, queue_name, None)
    if previous is not None and previous.layout == layout:
        return _Route(previous.publisher, layout, now)
    storage = opened.storage
    if opened.further or not layout.plain:
        storage = over_accounts([opened.storage, *opened.further], {queue_name: layout})
    storage.create_queue(queue_name)  # as a worker or `cloudqueue enqueue` would
    publisher: Publisher[Any] = Publisher(
        storage,
        queue_name,
        worker_type.item_type,
        codec=MessageCodec(worker_type.item_type, encoding=written_encoding(settings)),
        payload_store=opened.payloads,
        announcer=_announcer(opened),
    )
    return _Route(publisher, layout, now)


def written_encoding(settings: CloudQueueSettings) -> Encoding:
    """What the worker reads: plain text when it reads only that, else base64 (as Functions)."""
    return "plain" if settings.listener.encoding == "plain" else "base64"


def _announcer(opened: _Opened) -> WorkAnnouncer | None:
    return work_announcer(opened.settings, opened.channel)


def work_announcer(
    settings: CloudQueueSettings, channel: TriggerChannel | None
) -> WorkAnnouncer | None:
    """Announces work on the trigger channel as the workers listen to it (triggers.*)."""
    if channel is None:
        return None
    account = account_of(settings.connection_string_value())
    return WorkAnnouncer(channel, account=account, mode=settings.triggers.publish)


def _queue_of(worker_type: WorkerClass, queue: str | None) -> str:
    """The queue to send to: the worker's one queue, or the one of its queues ``queue`` names."""
    names = worker_type.location(visibility_timeout_s=30).queue_names  # the names checked only
    if queue is None and len(names) == 1:
        return names[0]
    if queue in names:
        return queue
    name = _name(worker_type)
    listed = ", ".join(names)
    if queue is None:
        raise ConfigurationError(f"{name} reads several queues ({listed}): send(..., queue=...)")
    raise ConfigurationError(f"{name} does not read queue {queue!r}; it reads {listed}")


_SENDERS = _Senders()
atexit.register(close_senders)


__all__ = [
    "LAYOUT_REFRESH_S",
    "close_senders",
    "send",
    "send_group",
    "send_many",
    "send_with",
    "work_announcer",
    "written_encoding",
]
