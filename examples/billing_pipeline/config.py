"""Where the pipeline's parts meet: queue names and the ledger file, from the environment.

Every part (initiator, processors, controller) runs in its own process and reads the same
variables, so the launcher sets them once and the children inherit them. The queues live in the
store ``CLOUDQUEUE_CONNECTION_STRING`` names (the embedded SQLite file when unset, Azure or Azurite
with a connection string); the ledger is a local SQLite file either way.
"""

from __future__ import annotations

import os
from pathlib import Path

PROCESSOR = "examples.billing_pipeline.workers:PricingWorker"
CONTROLLER = "examples.billing_pipeline.workers:ControllerWorker"
"""The workers as ``cloudqueue run`` names them."""

WORK_QUEUE = "billing-work"
RESULTS_QUEUE = "billing-results"

LEDGER_ENV = "BILLING_LEDGER"
DEFAULT_LEDGER = Path(".cloudqueue/billing-ledger.db")

PRICING_DELAY_ENV = "BILLING_PRICING_DELAY_S"
"""Seconds each work item takes to price (0 by default; tests slow it to kill a worker mid-run)."""


def ledger_path() -> Path:
    return Path(os.environ.get(LEDGER_ENV) or DEFAULT_LEDGER)


def pricing_delay_s() -> float:
    return float(os.environ.get(PRICING_DELAY_ENV) or 0)
