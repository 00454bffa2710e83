"""Held messages on the event loop: their newest pop receipts, renewed at half their timeout.

The event-loop consumer's ``leases``: a message fetched and not yet settled (waiting for a slot,
or being handled) is held here; one renewal task extends each held message's visibility when half
of its timeout has passed, so a slow handler never lets it reappear to another consumer. A
renewal that finds the message gone or its receipt stale drops it (someone else owns it now); a
transient failure is tried again at the next round. Times are the loop's (``loop.time()``), so a
test's virtual-time loop moves them.

As on threads (``leases``), a renewal also carries what the handler wrote into its message since
the last one (its progress: ``pending_content``), in the same update-message call, so reporting
costs no transaction of its own; a checkpoint is written at once (``rewrite``), and that call
renews too (``event_loop.reporting``). The reports are kept here for the host's live state
(``progress_reports``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.errors import MessageNotFoundError, MessageTooLargeError, StorageError
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class HeldMessage:
    """One held message: its newest receipt and when its visibility next needs extending."""

    message: QueueMessage
    pop_receipt: str
    renew_at: float
    settling: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a renewal or the settlement uses the receipt: a delete never goes out with the
    receipt a renewal on its way is about to replace."""
    progress: HandlerProgress | None = None
    """What its handler last reported (published with the host's live state)."""
    pending_content: str | None = None
    """The message's new text, written with its next renewal (a progress report)."""
    checkpoint_payload: str | None = None
    """The stored payload holding its handler's checkpoint, if it outgrew the message: removed
    once the message is deleted."""


class AsyncLeases:
    """The held messages of one queue, and the task renewing them."""

    def __init__(
        self,
        storage: AsyncQueueStorage,
        queue_name: str,
        *,
        visibility_timeout_s: int,
        renew: bool = True,
    ) -> None:
        self.storage, self.queue_name = storage, queue_name
        self.visibility_timeout_s = visibility_timeout_s
        self.renew = renew
        self.renewals = 0
        self._held: dict[str, HeldMessage] = {}
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, message: QueueMessage) -> HeldMessage:
        held = HeldMessage(message, message.pop_receipt, self._due())
        self._held[message.id] = held
        return held

    def end(self, held: HeldMessage) -> None:
        self._held.pop(held.message.id, None)

    def progress_reports(self) -> list[HandlerProgress]:
        """The last progress report of each held message that has one; safe to call from
        another thread (the host's live state): the copy of the held messages is one step of
        the interpreter, which the loop's thread cannot change in the middle of."""
        return [held.progress for held in list(self._held.values()) if held.progress]

    async def rewrite(
        self,
        held: HeldMessage,
        content: str,
        first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Write ``content`` as the message's text now, renewing its visibility in the same call
        (a checkpoint), after ``first()`` (what the text names: a stored checkpoint), with no
        renewal in between; MessageNotFoundError when the message is no longer held, and what
        storage raises."""
        async with held.settling:
            if self._held.get(held.message.id) is not held:
                raise MessageNotFoundError(
                    f"message {held.message.id} is no longer held: its checkpoint was not saved"
                )
            if first is not None:
                await first()
            await self._update(held, content)

    async def release(self, held: HeldMessage) -> None:
        """Make an unstarted message visible again now (a failure: it reappears after its
        timeout anyway)."""
        self.end(held)
        with contextlib.suppress(StorageError):
            await self.storage.update_visibility(
                self.queue_name, held.message.id, held.pop_receipt, 0
            )

    async def keep_renewed(self, stopping: asyncio.Event) -> None:
        """Renew what is due until ``stopping`` is set; then the caller ends what is held."""
        while self.renew and not stopping.is_set():
            loop = asyncio.get_running_loop()
            next_due = min((held.renew_at for held in self._held.values()), default=None)
            wait_s = self.visibility_timeout_s / 2 if next_due is None else next_due - loop.time()
            if wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), wait_s)
                continue
            for held in [h for h in self._held.values() if h.renew_at <= loop.time()]:
                await self._renew(held)

    async def _renew(self, held: HeldMessage) -> None:
        async with held.settling:
            if held.message.id in self._held:  # else settled while this renewal waited
                await self._renew_held(held)

    async def _renew_held(self, held: HeldMessage) -> None:
        message_id = held.message.id
        try:
            await self._update(held, held.pending_content)
        except MessageNotFoundError:
            log.warning("lease_lost", queue=self.queue_name, message_id=message_id)
            self.end(held)
            return
        except MessageTooLargeError:
            # The reports are sized to fit; should one not, renew without it at once rather
            # than let the message reappear (the report still shows in status).
            held.pending_content, held.renew_at = None, asyncio.get_running_loop().time()
            log.warning("progress_not_written", queue=self.queue_name, reason="too_large")
            return
        except StorageError as failure:
            log.warning("lease_renewal_failed", queue=self.queue_name, error=str(failure))
            held.renew_at = self._due(retry=True)
            return
        self.renewals += 1

    async def _update(self, held: HeldMessage, content: str | None) -> None:
        """One update-message call (holding ``held.settling``): visibility, and text if
        given."""
        held.pop_receipt = await self.storage.update_visibility(
            self.queue_name,
            held.message.id,
            held.pop_receipt,
            self.visibility_timeout_s,
            content=content,
        )
        if content is not None and held.pending_content is content:
            held.pending_content = None  # written (a report made meanwhile waits its turn)
        held.renew_at = self._due()

    def _due(self, *, retry: bool = False) -> float:
        fraction = 0.1 if retry else 0.5
        return asyncio.get_running_loop().time() + self.visibility_timeout_s * fraction
