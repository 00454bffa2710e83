"""Scale to zero with push triggers: wake on WorkDetected, and a watchdog for lost triggers.

``TriggerWaker`` subscribes a listener to a trigger channel: an event for its own account and
queue (or the wildcard a channel sends after a reconnect) asks the scaler to make sure threads
run. ``Watchdog`` is the safety net: while the pool is at zero threads it checks the queue depth
once every ``interval_s`` (300 s by default: 12 storage transactions an hour), so a trigger lost
to an outage, a producer that sends none, or a message reappearing after a crash or a retry delay
waits at most that long.
"""

from __future__ import annotations

from typing import Any

import structlog
from reactivex.abc import DisposableBase

from listener.clock import EVENT_SLEEPER, Sleeper
from listener.errors import StorageError
from listener.listener import CloudQueueListener
from listener.periodic import PeriodicThread
from listener.push.triggers import TriggerChannel, WorkDetected
from listener.scaling.scaler import ElasticScaler

log = structlog.get_logger(__name__)

DEFAULT_WATCHDOG_INTERVAL_S = 300.0


class TriggerWaker:
    """Turns matching WorkDetected events into scale-up decisions for one listener."""

    def __init__(
        self,
        listener: CloudQueueListener[Any],
        scaler: ElasticScaler,
        channel: TriggerChannel,
        *,
        account: str,
    ) -> None:
        self.listener = listener
        self.scaler = scaler
        self.account = account
        self.triggers_seen = 0
        self._subscription: DisposableBase = channel.events.subscribe(self._on_event)

    def _on_event(self, event: WorkDetected) -> None:
        if not event.matches(self.account, self.listener.queue_name) or self.listener.stopped:
            return
        self.triggers_seen += 1
        log.debug(
            "trigger_received",
            queue=self.listener.queue_name,
            messages=event.message_count,
            payload_size=event.payload_size,
        )
        try:
            self.scaler.on_trigger()
        except Exception:
            log.exception("trigger_handling_failed", queue=self.listener.queue_name)

    def close(self) -> None:
        self._subscription.dispose()


class Watchdog(PeriodicThread):
    """While a listener has no threads, checks its depth every ``interval_s``."""

    def __init__(
        self,
        listener: CloudQueueListener[Any],
        scaler: ElasticScaler,
        *,
        interval_s: float = DEFAULT_WATCHDOG_INTERVAL_S,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        super().__init__(
            f"cloudqueue:{listener.queue_name}:watchdog", interval_s=interval_s, sleeper=sleeper
        )
        self.listener = listener
        self.scaler = scaler
        self.checks = 0

    def tick(self) -> bool:
        if self.listener.stopped:
            return False
        if self.listener.active_dequeue_tasks == 0:
            self.check()
        return True

    def check(self) -> None:
        """One depth check; threads start when messages are waiting."""
        self.checks += 1
        queue = self.listener.queue_name
        try:
            depth = self.listener.storage.approximate_message_count(queue)
        except StorageError as failure:
            log.warning("watchdog_check_failed", queue=queue, error=str(failure))
            return
        if depth > 0:
            log.info("watchdog_found_work", queue=queue, depth=depth)
            self.scaler.on_trigger(trigger="watchdog")
