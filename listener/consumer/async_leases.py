"""Held messages on the event loop: their newest pop receipts, renewed at half their timeout.

The event-loop consumer's ``leases``: a message fetched and not yet settled (waiting for a slot,
or being handled) is held here; one renewal task extends each held message's visibility when half
of its timeout has passed, so a slow handler never lets it reappear to another consumer. A
renewal that finds the message gone or its receipt stale drops it (someone else owns it now); a
transient failure is tried again at the next round. Times are the loop's (``loop.time()``), so a
test's virtual-time loop moves them.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import structlog

from cloudqueue.listener.errors import MessageNotFoundError, StorageError
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
            receipt = await self.storage.update_visibility(
                self.queue_name, message_id, held.pop_receipt, self.visibility_timeout_s
            )
        except MessageNotFoundError:
            log.warning("lease_lost", queue=self.queue_name, message_id=message_id)
            self.end(held)
            return
        except StorageError as failure:
            log.warning("lease_renewal_failed", queue=self.queue_name, error=str(failure))
            held.renew_at = self._due(retry=True)
            return
        held.pop_receipt = receipt
        held.renew_at = self._due()
        self.renewals += 1

    def _due(self, *, retry: bool = False) -> float:
        fraction = 0.1 if retry else 0.5
        return asyncio.get_running_loop().time() + self.visibility_timeout_s * fraction
