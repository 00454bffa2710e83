"""The message: an intent to close one account, and the steps that carry it out, in order."""

from __future__ import annotations

from pydantic import BaseModel

STEPS = ("cancel_subscriptions", "archive_invoices", "delete_profile")
"""Each step is idempotent; together they are the whole intent. The message is deleted only
after the last one, so a crash at any point brings the intent back."""


class CloseAccount(BaseModel):
    """Close account ``account_id``; ``job_id`` names this request in the state store."""

    job_id: str
    account_id: str
