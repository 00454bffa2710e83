"""Testing your workers without Azure and without waiting (``run_until_drained``), and the clocks
that make time in a test virtual.

Example::

    from cloudqueue.testing import run_until_drained

    def test_invoices_are_billed() -> None:
        handled = run_until_drained(InvoiceWorker(), [Invoice(invoice_id=1)])
        assert [invoice.invoice_id for invoice in handled] == [1]
"""

from cloudqueue.workers.testing import (
    DrainResult,
    DrainTimeoutError,
    HandlerFailedError,
    ManualClock,
    PoisonedItem,
    VirtualClock,
    run_until_drained,
)

__all__ = [
    "DrainResult",
    "DrainTimeoutError",
    "HandlerFailedError",
    "ManualClock",
    "PoisonedItem",
    "VirtualClock",
    "run_until_drained",
]
