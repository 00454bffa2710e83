"""Where the pipeline's parts meet: queue names and the workers' pace, from the environment.

Every part (initiator, processors, controller) runs in its own process and reads the same
variables, so the launcher sets them once and the children inherit them. The queues, the run's
group and the kept results all live in the store ``CLOUDQUEUE_CONNECTION_STRING`` names (the
embedded SQLite file when unset, Azure or Azurite with a connection string): no part keeps state
of its own, so each can run on any machine.
"""

from __future__ import annotations

import os

PROCESSOR = "examples.billing_pipeline.workers:PricingWorker"
CONTROLLER = "examples.billing_pipeline.workers:ControllerWorker"
REPORTER = "examples.billing_pipeline.workers:ReportWorker"
"""The workers as ``cloudqueue run`` names them."""

WORK_QUEUE = "billing-work"
DONE_QUEUE = "billing-done"
TOTALS_QUEUE = "billing-totals"

PRICING_DELAY_ENV = "BILLING_PRICING_DELAY_S"
"""Seconds each work item takes to price (0 by default; tests slow it to kill a worker mid-run)."""

TOTALING_DELAY_ENV = "BILLING_TOTALING_DELAY_S"
"""Seconds the controller takes before adding a run up (0 by default; tests slow it to kill the
controller while it handles the run's completion)."""


def pricing_delay_s() -> float:
    return float(os.environ.get(PRICING_DELAY_ENV) or 0)


def totaling_delay_s() -> float:
    return float(os.environ.get(TOTALING_DELAY_ENV) or 0)
