"""What a billing run is made of: customer transactions, the work items they are split into, the
priced results and the run's totals; plus the totals computed straight from the input, to check
the pipeline by.

Amounts are integer cents throughout, so totals add up exactly whatever the grouping.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from pydantic import BaseModel, Field

TAX_PERCENT = 20


class Transaction(BaseModel):
    """One billable event of one customer: a quantity at a unit price."""

    customer: str
    quantity: int = Field(gt=0)
    unit_price_cents: int = Field(ge=0)


class WorkItem(BaseModel):
    """A small slice of a run: some transactions of one customer, priced together."""

    item_id: str
    """``<run>-<n>``: unique across runs, and the deduplication key of the result."""
    run_id: str
    customer: str
    transactions: list[Transaction]


class PricedItem(BaseModel):
    """The result of pricing one work item, kept under the item's id for the controller."""

    item_id: str
    run_id: str
    customer: str
    transactions: int
    amount_cents: int


class RunTotals(BaseModel):
    """What the controller makes of a complete run: each customer's total in cents."""

    run_id: str
    work_items: int
    """Priced items the totals add up (one per work item: a result is kept once per item id)."""
    poisoned: int
    """Work items given up to the poison queue (they are in no total)."""
    transactions: int
    totals: dict[str, int]


def transaction_cents(transaction: Transaction) -> int:
    """Net price plus tax, rounded half up to the cent (integer arithmetic: no float drift)."""
    net = transaction.quantity * transaction.unit_price_cents
    return (net * (100 + TAX_PERCENT) + 50) // 100


def price(item: WorkItem) -> PricedItem:
    """Price every transaction of the item; the same item always gives the same result."""
    return PricedItem(
        item_id=item.item_id,
        run_id=item.run_id,
        customer=item.customer,
        transactions=len(item.transactions),
        amount_cents=sum(transaction_cents(t) for t in item.transactions),
    )


def sample_transactions(count: int, *, customers: int, seed: int) -> list[Transaction]:
    """A reproducible run: ``count`` transactions spread over ``customers`` customers."""
    rng = random.Random(seed)
    return [
        Transaction(
            customer=f"customer-{rng.randrange(customers):03d}",
            quantity=rng.randint(1, 5),
            unit_price_cents=rng.randint(50, 20_000),
        )
        for _ in range(count)
    ]


def split(run_id: str, transactions: Sequence[Transaction], *, per_item: int) -> Iterator[WorkItem]:
    """Group each customer's transactions into work items of at most ``per_item``."""
    by_customer: dict[str, list[Transaction]] = defaultdict(list)
    for transaction in transactions:
        by_customer[transaction.customer].append(transaction)
    number = 0
    for customer in sorted(by_customer):
        own = by_customer[customer]
        for start in range(0, len(own), per_item):
            yield WorkItem(
                item_id=f"{run_id}-{number}",
                run_id=run_id,
                customer=customer,
                transactions=own[start : start + per_item],
            )
            number += 1


def expected_totals(transactions: Sequence[Transaction]) -> dict[str, int]:
    """Each customer's total in cents, computed directly from the input (no queues involved)."""
    totals: dict[str, int] = defaultdict(int)
    for transaction in transactions:
        totals[transaction.customer] += transaction_cents(transaction)
    return dict(totals)


def run_totals(run_id: str, results: Iterable[PricedItem], *, poisoned: int = 0) -> RunTotals:
    """Add the priced items of a run up per customer."""
    totals: dict[str, int] = defaultdict(int)
    items = transactions = 0
    for result in results:
        totals[result.customer] += result.amount_cents
        items += 1
        transactions += result.transactions
    return RunTotals(
        run_id=run_id,
        work_items=items,
        poisoned=poisoned,
        transactions=transactions,
        totals=dict(totals),
    )
