"""The "Testing your workers" example of the docs, kept as a real test so that it cannot rot.

The docs page includes everything between the ``--8<--`` section markers from this file when the
site is built (pymdownx.snippets), so the page shows exactly the code that runs here.
"""

from __future__ import annotations

# --8<-- [start:example]
import pytest
from pydantic import BaseModel

from cloudqueue import QueueWorker
from cloudqueue.testing import run_until_drained


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


# --8<-- [end:example]


DOCS_PAGE = "docs/getting-started/testing.md"


def test_the_docs_page_shows_this_example() -> None:
    """The testing page pulls the code above from this file, between its section markers."""
    from pathlib import Path

    from tests.support.paths import REPO_ROOT  # the suite's own, not in the section users copy

    source = Path(__file__).read_text(encoding="utf-8")
    assert source.count("# --8<-- [start:example]\n") == 1
    assert source.count("# --8<-- [end:example]\n") == 1
    page = (REPO_ROOT / DOCS_PAGE).read_text(encoding="utf-8")
    assert '--8<-- "tests/workers/test_user_testing_example.py:example"' in page
