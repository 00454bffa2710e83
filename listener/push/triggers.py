"""Push triggers: a producer tells listeners "work detected" so idle ones need not poll.

The design's ``WorkDetected`` event names the storage account, the queue and the payload size. A
``TriggerChannel`` carries events between producers and listeners: in one process (a reactivex
Subject) or across processes and machines (Redis pub/sub,
``cloudqueue.listener.push.redis_triggers``). A listener subscribes to ``channel.events`` and reacts
only to events for its own account and queue.

Triggers are an accelerator, never the only path: publishing never fails a put (a lost trigger
is logged), and a watchdog's occasional depth check catches anything a lost trigger would strand.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

import structlog

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.push.wire import parse_trigger
from cloudqueue.listener.stores.connection import parse_connection_string

if TYPE_CHECKING:  # reactivex is imported by the channels that make events, not by producers
    from reactivex import Observable
    from reactivex.subject import Subject

log = structlog.get_logger(__name__)

ANY = "*"
"""Matches every account or queue: sent after a reconnect, when triggers may have been missed."""


@dataclass(frozen=True, slots=True)
class WorkDetected:
    """Work was enqueued: ``message_count`` messages, ``payload_size`` bytes, on one queue."""

    account: str
    queue_name: str
    payload_size: int = 0
    message_count: int = 1

    def matches(self, account: str, queue_name: str) -> bool:
        """Is this event about that account's queue (or about every queue)?"""
        return self.account in (account, ANY) and self.queue_name in (queue_name, ANY)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @property
    def is_wildcard(self) -> bool:
        """Does it name every account or every queue?"""
        return ANY in (self.account, self.queue_name)

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkDetected:
        """Parse a trigger from the wire; ``MalformedTriggerError`` when it is not a valid one."""
        return cls(**parse_trigger(text))


class TriggerChannel(Protocol):
    """Carries WorkDetected events from producers to listeners."""

    @property
    def events(self) -> Observable[WorkDetected]:
        """Every event published on the channel (listeners filter their own)."""

    def publish(self, event: WorkDetected) -> bool:
        """Send an event; False (logged, never raised) when it could not be sent."""

    def close(self) -> None:
        """Stop delivering events and release connections."""


class InProcessTriggerChannel:
    """Producer and listeners in one process: a thread-safe reactivex Subject."""

    def __init__(self) -> None:
        from reactivex.subject import Subject

        self._subject: Subject[WorkDetected] = Subject()
        self._lock = threading.Lock()

    @property
    def events(self) -> Observable[WorkDetected]:
        return self._subject

    def publish(self, event: WorkDetected) -> bool:
        with self._lock:  # Rx observers expect serialized notifications
            try:
                self._subject.on_next(event)
            except Exception:
                log.exception("trigger_delivery_failed", queue=event.queue_name)
                return False
        return True

    def close(self) -> None:
        self._subject.on_completed()


def account_of(connection_string: str | None) -> str:
    """The identity triggers use for a store: Azure's account name, or the embedded file's path.

    A trigger names the store and the queue that has work, and a worker wakes only for its own
    store. A producer that announces work therefore gives its ``WorkAnnouncer`` the account the
    workers use: ``WorkAnnouncer(channel, account=account_of(connection_string))``, with the
    connection string the workers have (the ``connection_string`` setting). The result holds no
    secret: for a key or shared access signature it is the account name (``azure`` when the
    string names none), for a Microsoft Entra ID sign-in the account in the queue service URL,
    for the embedded store ``sqlite:`` and the file's absolute path, and ``memory`` in memory.
    """
    text = (connection_string or "").strip()
    if text.lower().startswith(("https://", "http://")):
        # A token sign-in's queue service URL: https://ACCOUNT.queue.core.windows.net/...
        host = text.split("//", 1)[1].split("/", 1)[0]
        return host.split(".", 1)[0] if ".queue." in host else host
    try:
        return parse_connection_string(connection_string).account
    except ConfigurationError:
        return "azure"  # endpoints without a key: a token sign-in, checked when storage opens
