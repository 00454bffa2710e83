"""Keeping fetched messages hidden while they wait or are handled: visibility renewal.

A short visibility timeout (30 s by default) makes a crashed worker's messages come back quickly;
renewal makes long jobs safe with it. Every fetched message gets a ``Lease``. One background
thread per listener extends each live lease's visibility when half of it has passed -- messages
still waiting their turn in a batch included -- always with the newest pop receipt, for as long as
the message is held. A lease ends when the message is settled (deleted, released, retried,
poisoned) or when storage says it is gone or re-taken (404 / pop-receipt mismatch): then someone
else owns it, and renewing would only fail again.

The settling thread and the renewer share each lease's lock, so a delete never races a renewal
with a stale receipt.

A renewal also carries what the handler wrote into its message since the last one (its progress:
``Lease.pending_content``), in the same update-message call, so reporting costs no transaction
of its own; a checkpoint is written at once (``LeaseKeeper.rewrite``), and that call renews too
(``cloudqueue.listener.consumer.reporting``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.errors import MessageNotFoundError, MessageTooLargeError, StorageError
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

log = structlog.get_logger(__name__)

MAX_NAP_S = 1.0
"""The renewer naps in real time (it never moves an injected clock) and looks at the clock at
least this often, so it notices a test's manual clock jumping forward too."""

RENEW_AT_FRACTION = 0.5
"""Renew when this fraction of the visibility timeout has passed (Azure Functions uses half)."""


@dataclass
class Lease:
    """The hold this listener has on one fetched message."""

    message: QueueMessage
    pop_receipt: str
    renew_at: float
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    live: bool = True
    """False once settled or lost: the renewer leaves it alone."""
    lost: bool = False
    """True when storage said the message is gone or re-taken while we held it."""
    abandoned: bool = False
    """True once its handler passed the time limit: the limit settled the message and ended the
    lease (``cloudqueue.listener.consumer.time_limits``); the handler's thread, if it returns, does
    neither."""
    parked: bool = False
    """True while a middleware deferred it (``cloudqueue.listener.consumer.deferrals``): still
    held."""
    progress: HandlerProgress | None = None
    """What its handler last reported (published with the host's live state)."""
    pending_content: str | None = None
    """The message's new text, written with its next renewal (a progress report)."""
    checkpoint_payload: str | None = None
    """The stored payload holding its handler's checkpoint, if it outgrew the message: removed
    once the message is deleted."""

    def settle(self, action: Callable[[str], None]) -> None:
        """Run ``action(current_pop_receipt)`` and end the lease, with no renewal in between."""
        with self.lock:
            self.live = False
            action(self.pop_receipt)


class LeaseKeeper:
    """Renews the visibility of held messages from one background thread."""

    def __init__(
        self,
        storage: QueueStorage,
        queue_name: str,
        visibility_timeout_s: int,
        *,
        clock: Clock,
        renew: bool = True,
    ) -> None:
        self.storage = storage
        self.queue_name = queue_name
        self.visibility_timeout_s = visibility_timeout_s
        self.clock = clock
        self.renew = renew
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    def hold(self, messages: list[QueueMessage]) -> list[Lease]:
        """Start leases for a freshly fetched batch."""
        renew_at = self.clock.monotonic() + self.visibility_timeout_s * RENEW_AT_FRACTION
        leases = [Lease(message, message.pop_receipt, renew_at) for message in messages]
        if not self.renew:
            return leases
        with self._lock:
            for lease in leases:
                self._leases[lease.message.id] = lease
            self._ensure_thread()
        self._wake.set()
        return leases

    def end(self, lease: Lease) -> None:
        """Forget a settled lease."""
        with lease.lock:
            lease.live = False
        with self._lock:
            if self._leases.get(lease.message.id) is lease:
                del self._leases[lease.message.id]

    def rewrite(self, lease: Lease, content: str) -> None:
        """Write ``content`` as the message's text now, renewing its visibility in the same call
        (a checkpoint); raises MessageNotFoundError when the message is no longer held, and what
        storage raises."""
        with lease.lock:
            if not lease.live:
                raise MessageNotFoundError(
                    f"message {lease.message.id} is no longer held: its checkpoint was not saved"
                )
            self._update(lease, content)

    def progress_reports(self) -> list[HandlerProgress]:
        """The last progress report of each held message that has one."""
        with self._lock:
            return [lease.progress for lease in self._leases.values() if lease.progress]

    def close(self) -> None:
        """Stop the renewer thread (call after the dequeue threads have exited)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name=f"cloudqueue:{self.queue_name}:leases", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._renew_due()
            except Exception:
                log.exception("lease_renewal_failed", queue=self.queue_name)
            delay = self._seconds_to_next()
            if delay is None:
                # Nothing held: block until a batch arrives (no polling, no storage calls).
                self._wake.wait()
                self._wake.clear()
            elif self._stop.wait(min(delay, MAX_NAP_S)):
                return

    def _seconds_to_next(self) -> float | None:
        with self._lock:
            due = [lease.renew_at for lease in self._leases.values()]
        if not due:
            return None
        return max(0.05, min(due) - self.clock.monotonic())

    def _renew_due(self) -> None:
        now = self.clock.monotonic()
        with self._lock:
            due = [lease for lease in self._leases.values() if lease.renew_at <= now]
        for lease in due:
            self._renew(lease)

    def _renew(self, lease: Lease) -> None:
        with lease.lock:
            if not lease.live:
                return
            try:
                self._update(lease, lease.pending_content)
            except MessageNotFoundError as failure:
                lease.live, lease.lost = False, True
                log.warning(
                    "lease_lost",
                    queue=self.queue_name,
                    message_id=lease.message.id,
                    reason=type(failure).__name__,
                )
                return
            except MessageTooLargeError:
                # The reports are sized to fit; should one not, renew without it at once rather
                # than let the message reappear (the report still shows in status).
                lease.pending_content, lease.renew_at = None, self.clock.monotonic()
                log.warning("progress_not_written", queue=self.queue_name, reason="too_large")
                return
            except StorageError as failure:
                # Try again soon: the message stays hidden until its current timeout ends.
                lease.renew_at = self.clock.monotonic() + 1.0
                log.warning("lease_renewal_delayed", queue=self.queue_name, error=str(failure))
                return
            self.renewals += 1
        log.debug("lease_renewed", queue=self.queue_name, message_id=lease.message.id)

    def _update(self, lease: Lease, content: str | None) -> None:
        """One update-message call (holding ``lease.lock``): visibility, and text if given."""
        lease.pop_receipt = self.storage.update_visibility(
            self.queue_name,
            lease.message.id,
            lease.pop_receipt,
            self.visibility_timeout_s,
            content=content,
        )
        if content is not None:
            lease.pending_content = None  # written: a checkpoint's text holds the progress too
        lease.renew_at = self.clock.monotonic() + self.visibility_timeout_s * RENEW_AT_FRACTION
