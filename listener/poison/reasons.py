"""Why a message goes to the poison queue: every reason cloudqueue itself gives, explained.

A middleware may give up a message with a reason of its own (``MessageContext.give_up``); these
are the ones the listener and the shipped middleware use.
"""

from __future__ import annotations

from typing import Literal

PoisonReason = Literal[
    "undecodable",
    "over_limit",
    "payload_missing",
    "payload_foreign",
    "permanent_failure",
    "give_up",
    "time_limit",
    "retry_later",
    "max_dequeue_count_exceeded",
    "key_failed",
    "key_ledger_unavailable",
    "chain_item_invalid",
]
"""Why a message was given up on: the ``reason`` of its poison record."""

POISON_REASONS: dict[PoisonReason, str] = {
    "undecodable": "the text cannot become an item of the worker's type (bad base64 or JSON, "
    "an item the model rejects, an empty message): poisoned on its first delivery",
    "over_limit": "the message is over a decoding limit (items, inflated bytes, stored payload "
    "bytes or JSON depth; the error names the limit and its [decoding] setting): poisoned on its "
    "first delivery, before its items are built",
    "payload_missing": "the message refers to a stored payload (a large item's blob) that is "
    "gone: deleted, expired or never written",
    "payload_foreign": "the message refers to a stored payload written for another queue: "
    "poisoned on its first delivery, and the payload is left alone for its own message",
    "permanent_failure": "a handler raised PermanentFailure: retrying is pointless",
    "give_up": "the worker's Retry gives up on what the handler raised (in give_up_on, or not in "
    "retry_on): poisoned at its first failure; the reason reads give_up: <Type>: <message>",
    "time_limit": "the handler ran past listener.time_limit_s on the last delivery allowed (each "
    "earlier one was released for a retry at the limit)",
    "retry_later": "the handler raised RetryLater on the last delivery allowed (each one counts, "
    "as any failed delivery): it kept asking for later; the error holds its last delay and reason",
    "max_dequeue_count_exceeded": "delivered poison.max_dequeue_count times without success: "
    "the handler kept raising, or workers crashed on it",
    "key_failed": "the worker's key(item) raised for the message's item: it would on every "
    "delivery, so the message is poisoned on its first (the error says what was raised)",
    "key_ledger_unavailable": "the key's record (idempotency, cancel) could not be read from the "
    "queue's store on any of poison.max_dequeue_count deliveries",
    "chain_item_invalid": "the handler of a worker with then returned what cannot go on: not an "
    "item of the next worker's type (nor a list of them, nor None), or in a group another number "
    "of items than on an earlier delivery; nothing was sent on (the error says which)",
}
"""Every poison reason and what it means (the reference pages are generated from this)."""


__all__ = ["POISON_REASONS", "PoisonReason"]
