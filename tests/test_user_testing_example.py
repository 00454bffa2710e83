"""The "Testing your workers" example of the README, kept as a real test so that it cannot rot.

Everything between the ``README example`` markers is copied verbatim into README.md.
"""

from __future__ import annotations

# --- README example: begin
import pytest
from pydantic import BaseModel

from workers import QueueWorker
from workers.testing import run_until_drained


class Invoice(BaseModel):
    invoice_id: int
    amount_cents: int


class InvoiceWorker(QueueWorker[Invoice]):
    queue_name = "invoices"

    def __init__(self) -> None:
        self.billed: list[int] = []

    def handle(self, item: Invoice) -> None:
        if item.amount_cents < 0:
            raise ValueError(f"invoice {item.invoice_id} has a negative amount")
        self.billed.append(item.invoice_id)


def test_every_invoice_is_billed() -> None:
    worker = InvoiceWorker()
    handled = run_until_drained(worker, [Invoice(invoice_id=n, amount_cents=100) for n in range(3)])
    assert sorted(worker.billed) == [0, 1, 2]
    assert len(handled) == 3


def test_a_bad_invoice_fails_the_test_with_the_handlers_error() -> None:
    with pytest.raises(ValueError, match="negative amount"):
        run_until_drained(InvoiceWorker(), [Invoice(invoice_id=7, amount_cents=-1)])


# --- README example: end


def test_the_readme_shows_this_example_verbatim() -> None:
    """README.md's "Testing your workers" section holds the code above, unchanged."""
    from pathlib import Path

    source = Path(__file__).read_text(encoding="utf-8")
    example = source.split("# --- README example: begin\n")[1].split("# --- README example: end")[0]
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert example.strip() in readme
