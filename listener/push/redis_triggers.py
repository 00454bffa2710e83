"""Push triggers across processes and machines over Redis pub/sub (redis-py).

Publishing is one PUBLISH per event and never raises: when Redis is down the failure is logged
and the put that preceded it stands. Receiving runs on one background thread that subscribes,
delivers events to ``events`` observers, and re-establishes a dropped connection with randomized
exponential back-off. Pub/sub keeps nothing for absent subscribers, so after every reconnect the
channel emits a wildcard event (``ANY`` account and queue): listeners then check their queue once
instead of trusting that no trigger was missed.

Whoever can publish on the channel may send anything, so every trigger is parsed defensively
(``cloudqueue.listener.push.wire``); a bad one -- and, unless ``accept_wildcard``, one naming ``*``
-- is dropped, counted and logged at most once a minute (``trigger_rejected``). The receiver never
dies of what it receives: an unexpected failure is logged and the channel resubscribes, and should
the thread end anyway (something raised past every guard) a new one takes its place and, as after a
reconnect, re-announces with a wildcard.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
import structlog
from reactivex import Observable
from reactivex.subject import Subject

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.errors import MalformedTriggerError
from cloudqueue.listener.log_throttle import ThrottledWarning
from cloudqueue.listener.policies.backoff import (
    RandomSource,
    default_rng,
    randomized_exponential_backoff,
)
from cloudqueue.listener.push.triggers import ANY, WorkDetected
from cloudqueue.listener.redaction import redact

log = structlog.get_logger(__name__)

DEFAULT_CHANNEL = "cloudqueue:work-detected"
MAX_RECONNECT_DELAY_S = 30.0
SOCKET_TIMEOUT_S = 5.0


class RedisTriggerChannel:
    """WorkDetected events over a Redis pub/sub channel."""

    def __init__(
        self,
        url: str,
        *,
        channel: str = DEFAULT_CHANNEL,
        rng: RandomSource | None = None,
        max_reconnect_delay_s: float = MAX_RECONNECT_DELAY_S,
        accept_wildcard: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``accept_wildcard``: let a received ``*`` trigger wake every listener (off: dropped)."""
        self.channel = channel
        self.accept_wildcard = accept_wildcard
        self.rng = rng or default_rng()
        self.max_reconnect_delay_s = max_reconnect_delay_s
        self._client: redis.Redis = redis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            health_check_interval=30,
        )
        self._subject: Subject[WorkDetected] = Subject()
        self._emit_lock = threading.Lock()
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._subscribed_before = False
        self.reconnects = 0
        self.restarts = 0
        """Receiver threads that ended unexpectedly and were replaced."""
        self._rejections = ThrottledWarning("trigger_rejected", clock=clock)

    @property
    def rejected(self) -> int:
        """Triggers received and dropped: malformed, or wildcards not accepted."""
        return self._rejections.total

    @property
    def events(self) -> Observable[WorkDetected]:
        self._ensure_receiver()
        return self._subject

    @property
    def connected(self) -> threading.Event:
        """Set while the receiver is subscribed (tests and health checks wait on it)."""
        return self._connected

    def publish(self, event: WorkDetected) -> bool:
        try:
            self._client.publish(self.channel, event.to_json())
        except redis.RedisError as failure:
            log.warning(
                "trigger_publish_failed", queue=event.queue_name, error=redact(str(failure))
            )
            return False
        return True

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(SOCKET_TIMEOUT_S + 2)
        self._client.close()
        self._subject.on_completed()

    def _ensure_receiver(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._start_receiver()

    def _start_receiver(self) -> None:
        self._thread = threading.Thread(
            target=self._run_receiver, name="cloudqueue:triggers", daemon=True
        )
        self._thread.start()

    def _run_receiver(self) -> None:
        try:
            self._receive_forever()
        finally:
            self._connected.clear()
            if not self._stop.is_set():
                # Something raised past every guard (a SystemExit in an observer, say): wake-up
                # must not depend on this thread, so another one takes its place.
                self._replace_receiver()

    def _replace_receiver(self) -> None:
        with self._start_lock:
            self.restarts += 1
            log.error("trigger_receiver_restarted", restarts=self.restarts)
            self._start_receiver()

    def _receive_forever(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._receive()  # returns only when the channel closes
                continue
            except (redis.RedisError, OSError) as failure:
                failures += 1
                delay = self._reconnect_delay_s(failures)
                log.warning(
                    "trigger_channel_down", error=redact(str(failure)), retry_in_s=round(delay, 2)
                )
            except Exception:
                failures += 1
                delay = self._reconnect_delay_s(failures)
                # A bug, not bad input (that is rejected in _deliver): log it, resubscribe.
                log.error("trigger_receiver_failed", retry_in_s=round(delay, 2), exc_info=True)
            if self._stop.wait(delay):
                return

    def _reconnect_delay_s(self, failures: int) -> float:
        return randomized_exponential_backoff(
            failures, delta_s=0.2, min_s=0.0, max_s=self.max_reconnect_delay_s, rng=self.rng
        )

    def _receive(self) -> None:
        """Subscribe and deliver until the connection drops (raises) or the channel closes."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(self.channel)
            self._connected.set()
            if self._subscribed_before:
                self.reconnects += 1
                log.info("trigger_channel_reconnected", reconnects=self.reconnects)
                self._emit(WorkDetected(account=ANY, queue_name=ANY))
            self._subscribed_before = True
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    self._deliver(message)
                self._rejections.flush()  # a burst of bad triggers that stopped is summarised
        finally:
            self._connected.clear()
            pubsub.close()

    def _deliver(self, message: dict[str, Any]) -> None:
        try:
            event = WorkDetected.from_json(message.get("data", b""))
        except MalformedTriggerError as malformed:
            self._rejections.record(reason=malformed.reason)
            return
        if event.is_wildcard and not self.accept_wildcard:
            self._rejections.record(reason="wildcard not accepted (triggers.accept_wildcard)")
            return
        self._emit(event)

    def _emit(self, event: WorkDetected) -> None:
        with self._emit_lock:
            try:
                self._subject.on_next(event)
            except Exception:
                log.exception("trigger_delivery_failed", queue=event.queue_name)
