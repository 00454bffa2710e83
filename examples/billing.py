"""The design's scenario in miniature: a billing worker that prices invoice work items.

Run it as a long-lived process with ``cloudqueue run examples.billing:InvoiceWorker`` and feed it
with ``cloudqueue enqueue invoices '{"invoice_id": 1, "customer": "acme", "lines": [...]}'``.
"""

from __future__ import annotations

import logging
import time
from typing import ClassVar

import structlog
from pydantic import BaseModel, Field

from cloudqueue import QueueWorker, current_envelope

log = structlog.get_logger(__name__)


class InvoiceLine(BaseModel):
    """One billable line: a quantity at a unit price in cents."""

    sku: str
    quantity: int = Field(gt=0)
    unit_price_cents: int = Field(ge=0)


class Invoice(BaseModel):
    """A unit of billing work: price one customer's lines."""

    invoice_id: int
    customer: str
    lines: list[InvoiceLine]
    tax_rate: float = Field(default=0.2, ge=0, le=1)


def total_cents(invoice: Invoice) -> int:
    """Net of all lines plus tax, rounded to the cent."""
    net = sum(line.quantity * line.unit_price_cents for line in invoice.lines)
    return round(net * (1 + invoice.tax_rate))


class InvoiceWorker(QueueWorker[Invoice]):
    """Prices each invoice and logs the result (a real worker would persist it)."""

    queue_name = "invoices"
    simulated_io_s: ClassVar[float] = 0.0
    """Time each invoice spends "saving" (the demo sets it to show scaling on I/O-bound work)."""
    billed_log_level: ClassVar[int] = logging.INFO
    """The level of the per-invoice line (the demo lowers it to debug: 400 lines bury the story)."""

    def handle(self, item: Invoice) -> None:
        if self.simulated_io_s:
            time.sleep(self.simulated_io_s)  # stands in for a database write
        envelope = current_envelope()
        log.log(
            self.billed_log_level,
            "invoice_billed",
            invoice_id=item.invoice_id,
            customer=item.customer,
            total_cents=total_cents(item),
            attempt=envelope.dequeue_count,
        )
