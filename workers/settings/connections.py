"""The stores (and the trigger channel) a settings object names, opened the one way
``cloudqueue run``, the commands and ``QueueWorker.send`` all open them.

The settings are the only place where "no connection string" means the embedded store
(``.cloudqueue/queues.db``): ``open_storage`` itself needs a connection string, so a producer
cannot open a store other than its workers' by leaving one out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudqueue.listener.stores.connection import (
    DEFAULT_CONNECTION_STRING,
    open_payload_store_if_available,
    open_storage,
)
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.settings.model import CloudQueueSettings, load_settings

if TYPE_CHECKING:
    from cloudqueue.listener.push.triggers import TriggerChannel


def store_connection_string(settings: CloudQueueSettings) -> str:
    """The connection string the settings name, the embedded store's when they name none."""
    return settings.connection_string_value() or DEFAULT_CONNECTION_STRING


def open_storage_from_settings(settings: CloudQueueSettings | None = None) -> QueueStorage:
    """The queue storage the workers open: ``settings``, or else ``load_settings()`` (the
    environment's ``CLOUDQUEUE_*``, ``.env``, the TOML file), with its ``credential``.
    Close it when done. ConfigurationError when the store named is malformed."""
    settings = settings or load_settings()
    return open_storage(store_connection_string(settings), credential=settings.credential)


def open_payload_store_from_settings(settings: CloudQueueSettings) -> PayloadStore | None:
    """The store for items too large for a message beside that storage, or None without one."""
    return open_payload_store_if_available(
        store_connection_string(settings), credential=settings.credential
    )


def open_trigger_channel(settings: CloudQueueSettings) -> TriggerChannel | None:
    """The Redis trigger channel the settings name, or None to poll only. Redis is imported
    only when ``triggers.url`` is set: a command that polls need not pay for its client."""
    url = settings.triggers.url_value()
    if url is None:
        return None
    from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel

    return RedisTriggerChannel(
        url, channel=settings.triggers.channel, accept_wildcard=settings.triggers.accept_wildcard
    )


__all__ = [
    "open_payload_store_from_settings",
    "open_storage_from_settings",
    "open_trigger_channel",
    "store_connection_string",
]
