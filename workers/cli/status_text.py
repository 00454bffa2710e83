"""How ``cloudqueue status QUEUE`` reads on a terminal: the headline, the queue's facts and a line
per worker. What the lines say is computed in ``cloudqueue.workers.views`` (``snapshot``, ``fleet``,
``queue_facts``); this module only words it.
"""

from __future__ import annotations

from datetime import datetime

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.workers.host.cost_meter import WINDOW_S
from cloudqueue.workers.host.live_state import QueueLiveState, utc_now
from cloudqueue.workers.progress import processed_text
from cloudqueue.workers.views.fleet import WorkerView, totals
from cloudqueue.workers.views.queue_facts import QueueFacts
from cloudqueue.workers.views.snapshot import Snapshot

MIN_MESSAGES_FOR_RATE = 20
"""A worker's per-thread rate is shown once it has handled this many messages. The first
messages carry the process's warm-up (imports, connections, a cold cache) or catch a handler at
its fastest, and the meter weighs each new sample by 0.2 (about ten shape it): after two
messages it printed "106.9 msg/s per thread", a figure that meant nothing yet."""


def headline(snapshot: Snapshot, *, rates: bool) -> str:
    """The queue's depths; with ``rates``, the time and the fleet's totals too."""
    line = f"{snapshot.queue}: {snapshot.depth} message(s), poison: {snapshot.poison_depth}"
    if not rates:
        return line
    fleet = totals(snapshot.workers)
    at = utc_now().strftime("%H:%M:%S")
    return (
        f"{line} ({at} UTC); {len(snapshot.workers)} worker(s), {fleet['threads']} thread(s), "
        f"{_rate(fleet['rate_per_s'])}, {_per_hour(fleet['transactions_per_hour'])}"
    )


def describe_facts(facts: QueueFacts) -> str:
    """One line for people: ``  3 visible, 1 in flight or delayed; oldest waiting 12 s``
    (``3 visible (1 not due yet)`` when the peek saw messages delayed beyond 7 days)."""
    visible = str(facts.visible) if facts.visible_exact else f"~{facts.visible}"
    not_due = f" ({facts.delayed} not due yet)" if facts.delayed else ""
    waiting = (
        "none waiting"
        if facts.oldest_age_s is None
        else f"oldest waiting {describe_age(facts.oldest_age_s)}"
    )
    return f"  {visible} visible{not_due}, {facts.in_flight} in flight or delayed; {waiting}"


def describe_age(seconds: float) -> str:
    """A duration at the precision a person reads: 45 s, 12 min, 5 h, 3 d."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def worker_line(view: WorkerView, *, rates: bool) -> str:
    """One worker: its threads, counters, speed and estimates; with ``rates``, its measured rate."""
    state, listener = view.state, view.listener
    speed = _speed(listener)
    age_s = (utc_now() - state.updated_at).total_seconds()
    line = (
        f"  {state.host}-{state.pid} ({state.worker}): {listener.active_threads} thread(s), "
        f"peak {listener.peak_threads}; "
        f"processed {processed_text(listener.items_processed, listener.processed)}, "
        f"failed {listener.failed}, "
        f"poisoned {listener.poisoned}, dequeue errors {listener.dequeue_errors}, "
        f"in flight {listener.in_flight}; {speed}; updated {age_s:.0f} s ago"
    )
    if listener.stuck_threads:
        line += f"; {listener.stuck_threads} thread(s) stuck past the time limit"
    line += _estimates(listener)
    if listener.priority_set:
        line += f"; threads shared by {' > '.join(listener.priority_set)} (priority order)"
    if rates:
        line += f"; now {_rate(view.rate_per_s)}, {_per_hour(view.transactions_per_hour)}"
    return line


def progress_line(report: HandlerProgress) -> str:
    """One held message's last progress report, under its worker's line."""
    where = f"message {report.message_id}"
    if report.key is not None:
        where += f" (key {report.key})"
    if report.group is not None:
        where += f", member {report.member} of group {report.group}"
    detail = f": {report.detail}" if report.detail else ""
    reported = datetime.fromisoformat(report.reported_at)
    age_s = max(0.0, (utc_now() - reported).total_seconds())
    return f"    {where} {report.fraction:.0%}{detail} (reported {describe_age(age_s)} ago)"


def _estimates(listener: QueueLiveState) -> str:
    """The worker's own estimates of its storage transactions and their cost, when it made any."""
    per_hour, cost = listener.storage_transactions_per_hour, listener.projected_cost_per_month_usd
    if per_hour is None or cost is None:
        window = describe_age(WINDOW_S)
        counted_s = listener.cost_counted_s
        if counted_s is None:
            return f"; cost estimated once it has counted its calls for {window}"
        left = describe_age(max(0.0, WINDOW_S - counted_s))
        return f"; cost estimated in about {left} (once it has counted its calls for {window})"
    return f"; {per_hour:,.0f} transactions/h (its estimate); ${cost:,.2f}/month projected"


def _speed(listener: QueueLiveState) -> str:
    """The per-thread rate once it means something (``MIN_MESSAGES_FOR_RATE``)."""
    rate, handled = listener.per_thread_rate_per_s, listener.processed
    if rate is None or handled < MIN_MESSAGES_FOR_RATE:
        return f"rate shown after {MIN_MESSAGES_FOR_RATE} messages ({handled} so far)"
    return f"{rate:.1f} msg/s per thread"


def _rate(rate_per_s: object) -> str:
    return "measuring msg/s" if rate_per_s is None else f"{rate_per_s:.1f} msg/s"


def _per_hour(transactions_per_hour: object) -> str:
    if transactions_per_hour is None:
        return "measuring transactions/h"
    return f"{transactions_per_hour:,.0f} transactions/h"
