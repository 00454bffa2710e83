"""Scale to zero with push triggers: wake on WorkDetected, and a watchdog for lost triggers.

``TriggerWaker`` subscribes a listener to a trigger channel: an event for its own account and
queue (any of its queues, when it reads several), or the wildcard a channel sends after a
reconnect, asks the scaler to make sure threads run -- at most once per back-off floor, however
many triggers come. ``Watchdog`` is the safety net: while the pool is at zero threads it checks
the queue depth once every ``interval_s`` (300 s by default: 12 storage transactions an hour, one
count per queue for a listener on several), so a trigger lost to an outage, a producer that sends
none, or a message reappearing after a crash or a retry delay waits at most that long.
"""

from __future__ import annotations

import threading
from typing import Protocol

import structlog
from reactivex.abc import DisposableBase

from cloudqueue.listener.clock import EVENT_SLEEPER, Clock, Sleeper
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.periodic import PeriodicThread
from cloudqueue.listener.push.triggers import TriggerChannel, WorkDetected
from cloudqueue.listener.scaling.scaler import ElasticScaler, idle_delay_floor_s
from cloudqueue.listener.stores.storage import QueueStorage

log = structlog.get_logger(__name__)

DEFAULT_WATCHDOG_INTERVAL_S = 300.0


class Wakeable(Protocol):
    """What waking needs of a listener (``CloudQueueListener`` is one): its queue, whether it
    stopped, its threads, and its storage for the watchdog's depth check."""

    @property
    def queue_name(self) -> str: ...

    @property
    def queue_names(self) -> tuple[str, ...]:
        """Every queue it reads (a trigger for any of them wakes it)."""
        ...

    @property
    def stopped(self) -> bool: ...

    @property
    def active_dequeue_tasks(self) -> int: ...

    @property
    def storage(self) -> QueueStorage: ...


class TriggerWaker:
    """Turns matching WorkDetected events into scale-up decisions for one listener, debounced.

    A listener that woke less than ``floor_s`` ago (the shortest idle wait its scaling policy
    uses) is not woken again at once: the triggers of a burst are held back, and one wake when
    the floor has passed covers them all. Its threads poll within that floor anyway, so held
    back is never lost, and a flood of triggers costs at most one wake per floor.
    """

    def __init__(
        self,
        listener: Wakeable,
        scaler: ElasticScaler,
        channel: TriggerChannel,
        *,
        account: str,
        clock: Clock | None = None,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        """``clock`` times the floor (default: the scaler's); ``sleeper`` waits it out."""
        self.listener = listener
        self.scaler = scaler
        self.account = account
        self.clock = clock or scaler.clock
        self.sleeper = sleeper
        self.floor_s = idle_delay_floor_s(scaler.policy)
        self.triggers_seen = 0
        self.wakes = 0
        self.debounced = 0
        """Triggers held back because the listener had just woken."""
        self._lock = threading.Lock()
        self._woke_at: float | None = None
        self._held_back = threading.Event()
        self._closed = threading.Event()
        self._deferred: threading.Thread | None = None
        self._subscription: DisposableBase = channel.events.subscribe(self._on_event)

    def _on_event(self, event: WorkDetected) -> None:
        listener = self.listener
        if listener.stopped or not any(
            event.matches(self.account, queue) for queue in listener.queue_names
        ):
            return
        self.triggers_seen += 1
        log.debug(
            "trigger_received",
            queue=self.listener.queue_name,
            messages=event.message_count,
            payload_size=event.payload_size,
        )
        if self._admit():
            self._wake()

    def _admit(self) -> bool:
        """Wake now, or hold the trigger back for the wake at the end of the floor."""
        with self._lock:
            now = self.clock.monotonic()
            if self._woke_at is None or now - self._woke_at >= self.floor_s:
                self._woke_at = now
                return True
            self.debounced += 1
            self._held_back.set()
            if self._deferred is None:
                self._deferred = threading.Thread(
                    target=self._wake_when_floor_passes,
                    name=f"cloudqueue:{self.listener.queue_name}:trigger-debounce",
                    daemon=True,
                )
                self._deferred.start()
            return False

    def _wake_when_floor_passes(self) -> None:
        """One wake at the end of each floor in which triggers were held back."""
        while self._held_back.wait() and not self._closed.is_set():
            with self._lock:
                woke_at = self.clock.monotonic() if self._woke_at is None else self._woke_at
                remaining_s = woke_at + self.floor_s - self.clock.monotonic()
            if self.sleeper.wait(self._closed, remaining_s):
                return
            with self._lock:
                self._held_back.clear()
                self._woke_at = self.clock.monotonic()
            self._wake()

    def _wake(self) -> None:
        if self.listener.stopped:
            return
        self.wakes += 1
        try:
            self.scaler.on_trigger()
        except Exception:
            log.exception("trigger_handling_failed", queue=self.listener.queue_name)

    def close(self) -> None:
        self._closed.set()
        self._held_back.set()  # ends the deferred wake's wait
        self._subscription.dispose()
        if self._deferred is not None and self._deferred is not threading.current_thread():
            self._deferred.join(5)


class Watchdog(PeriodicThread):
    """While a listener has no threads, checks its depth every ``interval_s``."""

    def __init__(
        self,
        listener: Wakeable,
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
