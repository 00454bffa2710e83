"""The quick-start demo: a burst of invoices drained by a worker on the embedded store.

``python -m examples.demo`` enqueues a burst of invoices (plus one malformed message) into the
embedded SQLite store, runs ``InvoiceWorker`` in a host with three dequeue threads, logs every
step, and stops once the queue is drained. The malformed message ends in ``invoices-poison``.
"""

from __future__ import annotations

import random
import sys
import time

import structlog

from examples.billing import Invoice, InvoiceLine, InvoiceWorker
from listener.codec import MessageCodec
from listener.poison import poison_queue_name
from workers.host import WorkerHost
from workers.logging import configure_logging
from workers.settings import CloudQueueSettings, ListenerSettings

BURST = 200

log = structlog.get_logger("examples.demo")


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


def main() -> int:
    settings = CloudQueueSettings(listener=ListenerSettings(threads=3, dequeue_interval_s=0.2))
    configure_logging(settings.logging)
    host = WorkerHost([InvoiceWorker], settings)
    queue = InvoiceWorker.queue_name
    storage = host.storage
    storage.create_queue(queue)
    codec = MessageCodec(Invoice)
    rng = random.Random(7)
    for invoice_id in range(1, BURST + 1):
        storage.put_message(queue, codec.encode(sample_invoice(invoice_id, rng)))
    storage.put_message(queue, "this is not base64 JSON")  # shows the poison path
    log.info(
        "demo_enqueued",
        queue=queue,
        invoices=BURST,
        malformed=1,
        depth=storage.approximate_message_count(queue),
    )
    host.start()
    deadline = time.monotonic() + 120
    while storage.approximate_message_count(queue) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)  # the demo watches the queue the way an operator would
    drained = storage.approximate_message_count(queue) == 0
    listener = host.listeners[0]
    log.info(
        "demo_drained" if drained else "demo_timed_out",
        queue=queue,
        processed=listener.messages_processed,
        poisoned=listener.messages_poisoned,
        poison_depth=storage.approximate_message_count(poison_queue_name(queue)),
    )
    host.stop()
    return 0 if drained else 1


if __name__ == "__main__":
    sys.exit(main())
