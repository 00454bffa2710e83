"""Telling a waiting producer "your result is stored", on the push-trigger channel.

A worker that stores a result publishes one trigger whose queue name is ``result:`` and the key
(``result_topic``): no queue can be named so (a queue name has no colon), so every listener on the
channel ignores it as work for another queue, and a listener of an older version parses it as any
trigger. A producer waiting for that key subscribes and reads the store once when it arrives.

As for work, a trigger is an accelerator and never the only path: a lost one (Redis down, a
publish failed) is caught by the waiter's slow check (``PUSH_CHECK_S``), and a wildcard trigger
(sent after the channel reconnected, when triggers may have been missed) makes every waiter look.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cloudqueue.listener.push.triggers import TriggerChannel, WorkDetected

if TYPE_CHECKING:
    from reactivex.abc import DisposableBase

TOPIC_PREFIX = "result:"

SUBSCRIBE_WAIT_S = 2.0
"""How long a waiter lets a channel that connects on first use subscribe before its first read
(a result announced before the subscription holds would otherwise wait for the slow check)."""


def result_topic(key: str) -> str:
    """The queue name of the trigger announcing the result of ``key``."""
    return TOPIC_PREFIX + key


class ResultSignals:
    """Announcing and awaiting stored results on one account's trigger channel."""

    def __init__(self, channel: TriggerChannel, *, account: str) -> None:
        self.channel = channel
        self.account = account

    def announce(self, key: str) -> bool:
        """Tell waiters the result of ``key`` is stored; False (logged) when it was not sent."""
        return self.channel.publish(WorkDetected(self.account, result_topic(key)))

    def subscribe(self, key: str, stored: threading.Event) -> DisposableBase:
        """Set ``stored`` when the result of ``key`` is announced (or every waiter should look);
        dispose of the answer to stop. Waits up to ``SUBSCRIBE_WAIT_S`` for a channel that
        reports its subscription (Redis) to hold."""
        topic = result_topic(key)

        def on_event(event: WorkDetected) -> None:
            if event.matches(self.account, topic):
                stored.set()

        subscription = self.channel.events.subscribe(on_event)
        connected = getattr(self.channel, "connected", None)
        if isinstance(connected, threading.Event):
            connected.wait(SUBSCRIBE_WAIT_S)
        return subscription

    def __repr__(self) -> str:
        return f"ResultSignals({self.channel!r})"


__all__ = ["SUBSCRIBE_WAIT_S", "TOPIC_PREFIX", "ResultSignals", "result_topic"]
