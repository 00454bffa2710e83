"""Hosting workers in a long-lived process: build listeners, run until a signal, drain, exit.

The first SIGTERM/SIGINT stops fetching and lets in-flight items finish within
``shutdown_grace_s``; a second one exits at once. Nothing is lost either way: a message is deleted
only after its handler returned, so anything unfinished reappears after its visibility timeout.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

import structlog

from listener.clock import SYSTEM_CLOCK
from listener.codec import MessageCodec
from listener.connection import open_storage
from listener.listener import CloudQueueListener
from listener.scaling import ElasticScaler
from listener.storage import QueueStorage
from workers.settings import CloudQueueSettings
from workers.worker import QueueWorker

log = structlog.get_logger(__name__)


class WorkerHost:
    """Runs one listener per worker on a shared storage connection."""

    def __init__(
        self,
        worker_types: list[type[QueueWorker[Any]]],
        settings: CloudQueueSettings,
        *,
        storage: QueueStorage | None = None,
    ) -> None:
        self.settings = settings
        self.storage = storage or open_storage(settings.connection_string_value())
        self.workers = [worker_type() for worker_type in worker_types]
        self.listeners = [self._build_listener(worker) for worker in self.workers]
        self._shutdown = threading.Event()
        self._signals = 0

    def _build_listener(self, worker: QueueWorker[Any]) -> CloudQueueListener[Any]:
        options = self.settings.listener
        listener: CloudQueueListener[Any] = CloudQueueListener(
            self.storage,
            worker.location(options.visibility_timeout_s),
            worker.item_type,
            codec=MessageCodec(worker.item_type, base64=options.base64),
            dequeue_batch_size=options.dequeue_batch_size,
            max_error_delay_s=options.max_error_delay_s,
        )
        ElasticScaler(self.settings.scaling_policy()).attach(listener)
        listener.subscribe(worker.handle)
        return listener

    def start(self) -> None:
        """Start every worker's dequeue threads."""
        for listener in self.listeners:
            listener.start_listener(self.settings.listener.threads)
        log.info("host_started", queues=[listener.queue_name for listener in self.listeners])

    def stop(self) -> bool:
        """Stop all listeners against one deadline and close storage; True if all drained."""
        deadline = SYSTEM_CLOCK.monotonic() + self.settings.shutdown_grace_s
        for listener in self.listeners:
            listener.request_stop()  # stop fetching everywhere before waiting on any
        drained = all(
            [
                listener.stop(max(0.0, deadline - SYSTEM_CLOCK.monotonic()))
                for listener in self.listeners
            ]
        )
        self.storage.close()
        log.info("host_stopped", drained=drained)
        return drained

    def request_shutdown(self, signum: int, _: FrameType | None = None) -> None:
        """Signal handler: first call drains, a second exits at once."""
        self._signals += 1
        if self._signals > 1:
            log.warning("forced_exit", signal=signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info(
            "shutdown_requested",
            signal=signal.Signals(signum).name,
            grace_s=self.settings.shutdown_grace_s,
        )
        self._shutdown.set()

    def run(self) -> int:
        """Start, wait for SIGTERM/SIGINT, drain and return the exit code."""
        signal.signal(signal.SIGTERM, self.request_shutdown)
        signal.signal(signal.SIGINT, self.request_shutdown)
        self.start()
        while not self._shutdown.wait(1.0):
            pass  # a timed wait keeps the main thread responsive to signals
        return 0 if self.stop() else 1
