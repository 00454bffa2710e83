"""The quick-start demo: a burst of invoices drained by an auto-scaling worker (embedded store).

``python -m examples.demo`` starts ``InvoiceWorker`` with one idle poller on the embedded SQLite
store, enqueues a burst of invoices (plus one malformed message), and logs what happens: the idle
thread finds work and the pool scales up, the burst drains, the malformed message goes to
``invoices-poison``, the surplus threads stop one by one back to a single poller, and the demo
stops the host.
"""

from __future__ import annotations

import random
import sys
import time
from typing import ClassVar

import structlog

from examples.billing import Invoice, InvoiceLine, InvoiceWorker
from listener.messages.codec import MessageCodec
from listener.messages.poison import poison_queue_name
from workers.host import WorkerHost
from workers.logging import configure_logging
from workers.settings import BackoffSettings, CloudQueueSettings, ScalingSettings

BURST = 400
DEADLINE_S = 120.0

log = structlog.get_logger("examples.demo")


class DemoInvoiceWorker(InvoiceWorker):
    """The billing worker with 20 ms of simulated I/O per invoice, so that threads pay off."""

    simulated_io_s: ClassVar[float] = 0.02


def sample_invoice(invoice_id: int, rng: random.Random) -> Invoice:
    lines = [
        InvoiceLine(
            sku=f"sku-{rng.randint(1, 50)}",
            quantity=rng.randint(1, 5),
            unit_price_cents=rng.randint(100, 10_000),
        )
        for _ in range(rng.randint(1, 4))
    ]
    return Invoice(invoice_id=invoice_id, customer=f"customer-{invoice_id % 17}", lines=lines)


def wait_for(condition: str, check: object) -> bool:
    """Watch the host the way an operator would, until ``check()`` holds or the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.1)
    log.error("demo_timed_out", waiting_for=condition)
    return False


def main() -> int:
    settings = CloudQueueSettings(
        backoff=BackoffSettings(max_idle_s=0.5),
        scaling=ScalingSettings(max_threads=8, messages_per_thread=32, scale_in_delay_s=1.0),
    )
    configure_logging(settings.logging)
    host = WorkerHost([DemoInvoiceWorker], settings)
    storage, listener = host.storage, host.listeners[0]
    queue = DemoInvoiceWorker.queue_name
    for name in (queue, poison_queue_name(queue)):
        # A clean start: leftovers of an earlier run would be mixed into this run's figures.
        storage.create_queue(name)
        storage.clear_queue(name)
    host.start()
    codec = MessageCodec(Invoice)
    rng = random.Random(7)
    for invoice_id in range(1, BURST + 1):
        storage.put_message(queue, codec.encode(sample_invoice(invoice_id, rng)))
    storage.put_message(queue, "this is not base64 JSON")  # shows the poison path
    log.info("demo_enqueued", queue=queue, invoices=BURST, malformed=1)
    drained = wait_for("drain", lambda: storage.approximate_message_count(queue) == 0)
    settled = drained and wait_for("one poller", lambda: listener.active_dequeue_tasks == 1)
    log.info(
        "demo_finished",
        queue=queue,
        processed=listener.messages_processed,
        poisoned=listener.messages_poisoned,
        peak_threads=listener.query_state().total_dequeue_tasks,
        poison_depth=storage.approximate_message_count(poison_queue_name(queue)),
    )
    host.stop()
    return 0 if settled else 1


if __name__ == "__main__":
    sys.exit(main())
