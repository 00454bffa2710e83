"""The quick-start demo: a burst of invoices drained by an auto-scaling worker (embedded store).

``python -m examples.demo`` starts ``InvoiceWorker`` with one idle poller on the embedded SQLite
store, enqueues a burst of invoices (plus one malformed message) and tells what happens: the idle
thread finds work and the pool scales up, the burst drains, the malformed message goes to
``invoices-poison``, the surplus threads stop back to a single poller, and the demo stops the host
and sums up -- messages, drain time, peak threads, storage transactions, and what the same burst
plus an idle hour would have cost with a fixed pool polling every second (simulated by
``cloudqueue.listener.simulation`` with the same policies the worker ran).

On a terminal it narrates (a live status line, one short line per scaling or poison event, a
summary table); otherwise it logs JSON lines, every event kept, the summary in ``demo_finished``.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import structlog
from rich.console import Console
from rich.table import Table

from cloudqueue import CloudQueueSettings
from cloudqueue.listener import (
    CloudQueueListener,
    MessageCodec,
    QueueStorage,
    ScalingPolicy,
    poison_queue_name,
)
from cloudqueue.listener.simulation import (
    DEFAULT_PRICE_PER_10K_USD,
    ServiceModel,
    bursts,
    cloudqueue_defaults,
    cloudqueue_push,
    cost_usd,
    naive_poller,
    simulate,
)
from cloudqueue.workers import (
    ConsoleStream,
    ListenerSettings,
    LiveProgress,
    ScalingSettings,
    WorkerHost,
    configure_logging,
)
from examples.billing import Invoice, InvoiceLine, InvoiceWorker
from examples.narration import Narrator

BURST = 400
MALFORMED = 1
DEADLINE_S = 120.0
WATCH_INTERVAL_S = 0.05
IDLE_HOUR_S = 3600.0
FIXED_POLL_INTERVAL_S = 1.0

OPERATION_NAMES = {
    "get_messages": "gets (up to 32 messages each)",
    "delete_message": "deletes",
    "put_message": "puts (the poison copy)",
    "approximate_message_count": "depth reads (for scaling)",
    "create_queue": "queue creations",
    "update_visibility": "visibility updates",
}

log = structlog.get_logger("examples.demo")


class DemoInvoiceWorker(InvoiceWorker):
    """The billing worker with 20 ms of simulated I/O per invoice, so that threads pay off."""

    simulated_io_s: ClassVar[float] = 0.02
    billed_log_level: ClassVar[int] = logging.DEBUG


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """What the run did and what it cost, in figures a person can check against the store."""

    processed: int
    poisoned: int
    drain_s: float
    peak_threads: int
    transactions_by_operation: dict[str, int]
    burst_and_idle_hour: dict[str, int]
    """Simulated transactions of the same burst plus an idle hour, by way of running it."""

    @property
    def transactions(self) -> int:
        return sum(self.transactions_by_operation.values())


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


def wait_for(condition: str, check: Callable[[], bool]) -> bool:
    """Watch the host the way an operator would, until ``check()`` holds or the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(WATCH_INTERVAL_S)
    log.error("demo_timed_out", waiting_for=condition)
    return False


def burst_and_idle_hour(policy: ScalingPolicy, threads: int) -> dict[str, int]:
    """Transactions of this burst plus an idle hour: this worker, with push, a fixed pool.

    Simulated with the worker's own scaling policy, so a change of settings changes the answer.
    """
    span_s = IDLE_HOUR_S + 60.0  # the drain, then the idle hour
    contenders = [
        cloudqueue_defaults(policy),
        cloudqueue_push(replace(policy, min_threads=0)),
        naive_poller(threads, FIXED_POLL_INTERVAL_S),
    ]
    results = simulate(
        bursts(BURST + MALFORMED, span_s, span_s),
        contenders,
        service=ServiceModel(service_s=DemoInvoiceWorker.simulated_io_s),
    )
    labels = [
        "cloudqueue, as this demo ran",
        "cloudqueue with push triggers (zero pollers when idle)",
        f"fixed pool of {threads} threads polling every second",
    ]
    return {
        label: sum(result.transactions.values())
        for label, result in zip(labels, results, strict=True)
    }


def enqueue_burst(storage: QueueStorage, queue: str) -> None:
    # Logged first: the idle poller may find the first invoices before the last one is put.
    log.info("demo_enqueueing", queue=queue, invoices=BURST, malformed=MALFORMED)
    codec = MessageCodec(Invoice)
    rng = random.Random(7)
    for invoice_id in range(1, BURST + 1):
        storage.put_message(queue, codec.encode(sample_invoice(invoice_id, rng)))
    storage.put_message(queue, "this is not base64 JSON")  # shows the poison path


def settled(listener: CloudQueueListener[Any]) -> int:
    return listener.messages_processed + listener.messages_poisoned


def run_demo(host: WorkerHost, progress: Callable[[], Any] | None) -> tuple[bool, DemoSummary]:
    """Start, enqueue the burst, wait for the drain and for one poller; the figures of the run."""
    storage, listener = host.storage, host.listeners[0]
    queue = DemoInvoiceWorker.queue_name
    for name in (queue, poison_queue_name(queue)):
        # A clean start: leftovers of an earlier run would be mixed into this run's figures.
        storage.inner.create_queue(name)
        storage.inner.clear_queue(name)
    host.start()
    started = time.monotonic()
    # The producer's puts go around the meter: the summary counts what the worker spent.
    enqueue_burst(storage.inner, queue)
    drained = wait_for("drain", lambda: settled(listener) >= BURST + MALFORMED)
    drain_s = time.monotonic() - started
    quiet = drained and wait_for("one poller", lambda: listener.active_dequeue_tasks == 1)
    if progress is not None:
        progress()
    peak = listener.query_state().total_dequeue_tasks  # one depth read, counted below
    spent = storage.counts()
    summary = DemoSummary(
        processed=listener.messages_processed,
        poisoned=listener.messages_poisoned,
        drain_s=round(drain_s, 2),
        peak_threads=peak,
        transactions_by_operation=spent,
        burst_and_idle_hour=burst_and_idle_hour(host.settings.scaling_policy(), peak),
    )
    return quiet, summary


def summary_tables(summary: DemoSummary, queue: str) -> list[Table]:
    run = Table(title="What happened", show_header=False, title_justify="left")
    run.add_column(justify="left")
    run.add_column(justify="right")
    run.add_row("Messages processed", f"{summary.processed:,}")
    run.add_row(f"Poisoned (in {poison_queue_name(queue)})", f"{summary.poisoned:,}")
    run.add_row("Drain time", f"{summary.drain_s:.1f} s")
    run.add_row("Peak dequeue threads", f"{summary.peak_threads}")
    run.add_row("Storage transactions", f"{summary.transactions:,}")
    spent = summary.transactions_by_operation
    for operation, count in sorted(spent.items(), key=lambda item: -item[1]):
        run.add_row(f"  {OPERATION_NAMES.get(operation, operation)}", f"{count:,}")
    cost = Table(
        title="The same burst plus an idle hour (simulated with the same policies), at "
        f"${DEFAULT_PRICE_PER_10K_USD} per 10,000 transactions",
        title_justify="left",
    )
    cost.add_column("")
    cost.add_column("transactions", justify="right")
    cost.add_column("cost (USD)", justify="right")
    for label, transactions in summary.burst_and_idle_hour.items():
        cost.add_row(label, f"{transactions:,}", f"${cost_usd(transactions):.4f}")
    return [run, cost]


def main() -> int:
    settings = CloudQueueSettings(
        # One invoice per thread at a time, as in the design: the pool's growth is the story here.
        # (By default each thread keeps listener.concurrency = 8 in flight; see the README.)
        listener=ListenerSettings(concurrency=1),
        scaling=ScalingSettings(max_threads=8, messages_per_thread=32, scale_in_delay_s=1.0),
    )
    console = Console(stderr=True)
    narrated = settings.logging.format == "auto" and console.is_terminal
    if narrated:
        configure_logging(
            settings.logging, stream=ConsoleStream(console), console_renderer=Narrator()
        )
    else:
        configure_logging(settings.logging)
    host = WorkerHost([DemoInvoiceWorker], settings)
    queue = DemoInvoiceWorker.queue_name
    if narrated:
        live = LiveProgress(
            host.listeners,
            console=console,
            expected={queue: BURST + MALFORMED},
        )
        with live:
            quiet, summary = run_demo(host, live.refresh)
    else:
        quiet, summary = run_demo(host, None)
    poison_depth = host.storage.inner.approximate_message_count(poison_queue_name(queue))
    host.stop()
    log.info(
        "demo_finished",
        queue=queue,
        poison_depth=poison_depth,
        transactions=summary.transactions,
        **asdict(summary),
    )
    if narrated:
        for table in summary_tables(summary, queue):
            console.print(table)
    return 0 if quiet else 1


if __name__ == "__main__":
    sys.exit(main())
