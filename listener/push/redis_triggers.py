"""Push triggers across processes and machines over Redis pub/sub (redis-py).

Publishing is one PUBLISH per event and never raises: when Redis is down the failure is logged
and the put that preceded it stands. Receiving runs on one background thread that subscribes,
delivers events to ``events`` observers, and re-establishes a dropped connection with randomized
exponential back-off. Pub/sub keeps nothing for absent subscribers, so after every reconnect the
channel emits a wildcard event (``ANY`` account and queue): listeners then check their queue once
instead of trusting that no trigger was missed.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
import structlog
from reactivex import Observable
from reactivex.subject import Subject

from listener.policies.backoff import RandomSource, default_rng, randomized_exponential_backoff
from listener.push.triggers import ANY, WorkDetected
from listener.redaction import redact

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
    ) -> None:
        self.channel = channel
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
        self.reconnects = 0

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
                self._thread = threading.Thread(
                    target=self._receive_forever, name="cloudqueue:triggers", daemon=True
                )
                self._thread.start()

    def _receive_forever(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._receive(first=failures == 0 and self.reconnects == 0)
                failures = 0
            except (redis.RedisError, OSError) as failure:
                self._connected.clear()
                failures += 1
                delay = randomized_exponential_backoff(
                    failures,
                    delta_s=0.2,
                    min_s=0.0,
                    max_s=self.max_reconnect_delay_s,
                    rng=self.rng,
                )
                log.warning(
                    "trigger_channel_down", error=redact(str(failure)), retry_in_s=round(delay, 2)
                )
                if self._stop.wait(delay):
                    return

    def _receive(self, *, first: bool) -> None:
        """Subscribe and deliver until the connection drops (raises) or the channel closes."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(self.channel)
            self._connected.set()
            if not first:
                self.reconnects += 1
                log.info("trigger_channel_reconnected", reconnects=self.reconnects)
                self._emit(WorkDetected(account=ANY, queue_name=ANY))
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    self._deliver(message)
        finally:
            self._connected.clear()
            pubsub.close()

    def _deliver(self, message: dict[str, Any]) -> None:
        try:
            event = WorkDetected.from_json(message["data"])
        except (ValueError, KeyError, TypeError):
            log.warning("trigger_ignored", reason="malformed event")
            return
        self._emit(event)

    def _emit(self, event: WorkDetected) -> None:
        with self._emit_lock:
            try:
                self._subject.on_next(event)
            except Exception:
                log.exception("trigger_delivery_failed", queue=event.queue_name)
