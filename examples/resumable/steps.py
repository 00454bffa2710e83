"""The three steps of closing an account; each is idempotent, target by target."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from examples.resumable.accounts import AccountsDb
from examples.resumable.intent import CloseAccount

log = structlog.get_logger(__name__)

Step = Callable[[AccountsDb, CloseAccount, float], int]
"""(accounts, intent, delay per target in s) -> how many targets this run changed."""


def cancel_subscriptions(accounts: AccountsDb, intent: CloseAccount, delay_s: float) -> int:
    return _each(
        accounts.active_subscriptions(intent.account_id),
        lambda target: accounts.cancel_subscription(intent.job_id, target),
        delay_s,
    )


def archive_invoices(accounts: AccountsDb, intent: CloseAccount, delay_s: float) -> int:
    return _each(
        accounts.open_invoices(intent.account_id),
        lambda target: accounts.archive_invoice(intent.job_id, target),
        delay_s,
    )


def delete_profile(accounts: AccountsDb, intent: CloseAccount, delay_s: float) -> int:
    targets = [intent.account_id] if accounts.has_profile(intent.account_id) else []
    return _each(targets, lambda target: accounts.delete_profile(intent.job_id, target), delay_s)


STEP_FUNCTIONS: dict[str, Step] = {
    "cancel_subscriptions": cancel_subscriptions,
    "archive_invoices": archive_invoices,
    "delete_profile": delete_profile,
}


def _each(targets: list[str], act: Callable[[str], bool], delay_s: float) -> int:
    """Act on each target still pending; a target already handled is skipped by ``act`` itself."""
    changed = 0
    for target in targets:
        if delay_s:
            time.sleep(delay_s)  # stands in for a slow call to another system
        changed += act(target)
    return changed
