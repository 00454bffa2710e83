"""Idle cost and burst response of cloudqueue's elastic scaling, next to two fixed pollers.

Run ``.venv/bin/python -m tests.benchmarks.bench_scaling [--quick] [--write] [--json PATH]``
(``--rounds 2`` took about 5 minutes on 2 cores, the default 4 rounds take longer; ``--write``
saves tests/benchmarks/results/bench_scaling.json for the README).

One workload -- idle, a burst, idle again -- for three variants, each run against its own fresh
Azurite, its storage wrapped in ``MeteredStorage`` (one counted call = one billed transaction):

(a) ``fixed16``: a ``CloudQueueListener`` without a scaler, ``dequeue_interval_s=1.0``, 16 threads
    (cloudqueue's default ``max_threads``);
(b) ``fixed1``: the same with 1 thread;
(c) ``cloudqueue``: the defaults (an ``ElasticScaler`` with ``ScalingPolicy()``), 1 thread.

The observer is a no-op unless ``--handler-ms`` gives it a fixed sleep (simulated I/O); all
variants get the same one. The burst of N messages is put *before* the listener starts, by an
unmetered client, each with an initial visibility delay that makes it visible at one instant T.
Azure's delay is whole seconds, so a message is put only while T - now is at most
``REVEAL_WINDOW_S`` above a whole number of seconds: every message turns visible within
[T - window, T + put latency]. The put bounds of every message give the moment the *whole* burst
is visible (the latest upper bound); drain time runs from there until the listener has processed
(handled and deleted) all N. Queue depth: N invisible messages while the listener idles before
the reveal, N at the reveal, 0 at the end. The listener starts ``--pre-idle-s`` plus a per-round
phase offset before the reveal, so that over the rounds the burst meets the idle pollers at
phases spread evenly over their poll period (see ``phase_offset_s``).

Round 1 measures the idle cost as well: after the drain each variant settles for ``--settle-s``
and its transactions are counted over ``--idle-window-s``, then extrapolated to an hour; the raw
count of the whole post-burst period (scale-down included) is reported too. Later rounds measure
only the drain, with the order of the variants reversed every round; drain figures are medians.
Wall-clock figures on a 2-core machine shared with Azurite: compare the variants of one
invocation, not invocations.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from tests.benchmarks.results_file import header_line, run_header, write_results
from tests.support.azurite import REPO_ROOT, AzuriteProcess

BENCH = "bench_scaling"
QUEUE = "scaling-bench"
VISIBILITY_TIMEOUT_S = 30
FIXED_POLL_INTERVAL_S = 1.0
MAX_THREADS = ScalingPolicy().max_threads
REVEAL_WINDOW_S = 0.25
"""Messages turn visible within this long before the reveal instant (plus the put latency)."""
PUT_THREADS = 16
FILL_RATE_ESTIMATE_PER_S = 70.0
"""Windowed puts per second seen here (16 threads, a quarter of each second): sizes the budget."""
FILL_MARGIN_S = 1.0
"""Slack on top of the estimate; the pre-burst idle time absorbs a later finish (by whole
phase spans)."""
QUICK_FILL_MARGIN_S = 2.5
"""--quick idles only MIN_PRE_IDLE_S before the burst, so nothing absorbs a late fill."""
MAX_IDLE_S = ScalingPolicy().max_idle_s
PHASE_SPAN_S = math.lcm(2, round(2 * MAX_IDLE_S)) / 2
"""A whole number of both idle poll periods (cloudqueue's max_idle_s and the fixed pollers' 1 s):
3 s for the default 1.5 s."""
MIN_PRE_IDLE_S = 2 * PHASE_SPAN_S
"""cloudqueue's idle back-off reaches its cap after a few seconds: idle at least this long."""
SAMPLE_S = 0.02
"""How often the main thread samples the listener during the drain."""
STOP_TIMEOUT_S = 30.0
MAX_BURST = 3000
IDLE_RATIO_TARGET = 1.0 / MAX_THREADS
DRAIN_RATIO_TARGET = 1.2
CODEC = MessageCodec(str)
SCALING_EVENTS = frozenset({"scaled_up", "scaled_down", "scaling_capped"})


class BenchmarkError(RuntimeError):
    """A run did not finish as it should (deadline passed, messages lost, threads left)."""


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    threads: int
    elastic: bool


VARIANTS = (
    Variant("fixed16", f"(a) {MAX_THREADS} threads, 1 s poll", MAX_THREADS, elastic=False),
    Variant("fixed1", "(b) 1 thread, 1 s poll", 1, elastic=False),
    Variant("cloudqueue", "(c) cloudqueue defaults", 1, elastic=True),
)
FIXED_MAX, FIXED_ONE, ELASTIC = (variant.name for variant in VARIANTS)


@dataclass(frozen=True)
class Config:
    burst: int
    rounds: int
    pre_idle_s: float
    settle_s: float
    idle_window_s: float
    fill_budget_s: float
    handler_ms: float
    drain_timeout_s: float
    json_path: Path | None
    write: bool


# -- logging: keep the scaler's decisions, print only warnings --------------------------------


class ScalingLog:
    """A structlog processor that records scaling events with their monotonic time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []

    def __call__(
        self, _logger: object, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if event_dict.get("event") in SCALING_EVENTS:
            with self._lock:
                self._records.append({"at": time.monotonic(), **event_dict})
        if method_name in ("debug", "info"):
            raise structlog.DropEvent
        return event_dict

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            records, self._records = self._records, []
        return records


SCALING_LOG = ScalingLog()


def configure_logging() -> None:
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(
        processors=[
            SCALING_LOG,
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


# -- the burst ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Burst:
    """When the burst's messages turn visible (monotonic seconds) and how long putting took."""

    target: float
    first_visible: float
    """A lower bound on the instant the first message turned visible."""
    all_visible: float
    """An upper bound on the instant the last message turned visible."""
    fill_s: float


def reveal_delay_s(target: float, abort: threading.Event) -> tuple[int, float]:
    """Wait for the next reveal window; return (whole-second delay, the time it was computed).

    A message put now with that delay turns visible within REVEAL_WINDOW_S before ``target``.
    """
    while True:
        now = time.monotonic()
        ahead = target - now
        whole = math.floor(ahead)
        if whole < 1:
            raise BenchmarkError("the burst was not put in time: raise --fill-budget-s")
        past_whole = ahead - whole
        if past_whole <= REVEAL_WINDOW_S:
            return whole, now
        if abort.wait(past_whole - REVEAL_WINDOW_S):
            raise BenchmarkError("putting the burst was aborted")


def put_chunk(
    storage: QueueStorage, texts: Sequence[str], target: float, abort: threading.Event
) -> tuple[float, float]:
    """Put the texts in reveal windows; return (earliest, latest) possible visible instants."""
    earliest, latest = math.inf, -math.inf
    for text in texts:
        delay_s, before = reveal_delay_s(target, abort)
        storage.put_message(QUEUE, text, visibility_delay_s=delay_s)
        after = time.monotonic()
        earliest, latest = min(earliest, before + delay_s), max(latest, after + delay_s)
    return earliest, latest


def put_burst(storage: QueueStorage, texts: Sequence[str], target: float) -> Burst:
    """Put every text so that all turn visible together at ``target``; the first failure wins."""
    started = time.monotonic()
    abort = threading.Event()
    chunks = [texts[start::PUT_THREADS] for start in range(PUT_THREADS)]
    with ThreadPoolExecutor(PUT_THREADS, thread_name_prefix="burst-put") as pool:
        futures = [pool.submit(put_chunk, storage, chunk, target, abort) for chunk in chunks]
        try:
            bounds = [future.result() for future in futures]
        except BaseException:
            abort.set()
            raise
    return Burst(
        target=target,
        first_visible=min(low for low, _ in bounds),
        all_visible=max(high for _, high in bounds),
        fill_s=time.monotonic() - started,
    )


# -- one run -----------------------------------------------------------------------------------


class DrainProbe:
    """The observer: counts deliveries, notes the first, and optionally simulates I/O."""

    def __init__(self, handler_s: float) -> None:
        self.handler_s = handler_s
        self._lock = threading.Lock()
        self.delivered = 0
        self.first_at: float | None = None

    def __call__(self, _item: str) -> None:
        with self._lock:
            self.delivered += 1
            if self.first_at is None:
                self.first_at = time.monotonic()
        if self.handler_s > 0:
            time.sleep(self.handler_s)


@dataclass
class Run:
    """One variant through the workload on a fresh Azurite (times in s from the reveal)."""

    variant: str
    round: int
    burst: int
    fill_s: float
    reveal_spread_s: float
    pre_idle_s: float
    pre_idle_transactions: int
    pickup_s: float
    drain_s: float
    drain_transactions: int
    peak_threads: int
    time_to_peak_s: float
    delivered: int
    dequeue_errors: int
    remaining: int
    post_burst_s: float | None = None
    post_burst_transactions: int | None = None
    idle_window_s: float | None = None
    idle_window_transactions: int | None = None
    idle_window_counts: dict[str, int] | None = None
    active_at_window: tuple[int, int] | None = None
    scaling_events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def idle_per_hour(self) -> float | None:
        if self.idle_window_s is None or self.idle_window_transactions is None:
            return None
        return self.idle_window_transactions / self.idle_window_s * 3600.0


def sleep_until(instant: float) -> None:
    time.sleep(max(0.0, instant - time.monotonic()))


def billed(storage: MeteredStorage) -> int:
    """Transactions so far, leaving out the one-off create_queue calls of start-up."""
    counts = storage.counts()
    return sum(counts.values()) - counts.get("create_queue", 0)


def build_listener(variant: Variant, storage: QueueStorage) -> CloudQueueListener[str]:
    listener = CloudQueueListener(
        storage,
        CloudQueueLocation(QUEUE, visibility_timeout_s=VISIBILITY_TIMEOUT_S),
        str,
        dequeue_interval_s=FIXED_POLL_INTERVAL_S,
    )
    if variant.elastic:
        ElasticScaler(listener.pool_control, ScalingPolicy())
    return listener


def follow_drain(
    listener: CloudQueueListener[str], count: int, deadline: float
) -> tuple[float, list[tuple[float, int]]]:
    """Sample the active threads until ``count`` are processed; return (done, samples)."""
    samples: list[tuple[float, int]] = []
    while listener.messages_processed < count:
        now = time.monotonic()
        if now > deadline:
            raise BenchmarkError(
                f"drain not done by its deadline: {listener.messages_processed}/{count} processed"
            )
        samples.append((now, listener.active_dequeue_tasks))
        time.sleep(SAMPLE_S)
    return time.monotonic(), samples


def first_peak_at(samples: Sequence[tuple[float, int]], peak: int) -> float:
    """When the sampled active thread count first reached ``peak`` (or its sampled maximum)."""
    top = min(peak, max((active for _, active in samples), default=0))
    return next((at for at, active in samples if active >= top), math.nan)


def measure_idle(
    run: Run, listener: CloudQueueListener[str], storage: MeteredStorage, config: Config
) -> None:
    """After the drain: settle, then count the transactions of a steady idle window."""
    done = time.monotonic()
    at_done = billed(storage)
    sleep_until(done + config.settle_s)
    start_counts, start_active = storage.counts(), listener.active_dequeue_tasks
    window_start = time.monotonic()
    sleep_until(window_start + config.idle_window_s)
    end_counts, end_active = storage.counts(), listener.active_dequeue_tasks
    window_end = time.monotonic()
    window = {op: end_counts[op] - start_counts.get(op, 0) for op in end_counts}
    run.idle_window_counts = {op: n for op, n in window.items() if n}
    run.idle_window_transactions = sum(window.values())
    run.idle_window_s = window_end - window_start
    run.post_burst_transactions = billed(storage) - at_done
    run.post_burst_s = window_end - done
    run.active_at_window = (start_active, end_active)


def drive(
    variant: Variant,
    round_no: int,
    storage: MeteredStorage,
    burst: Burst,
    config: Config,
    *,
    idle: bool,
) -> Run:
    """Run the listener from its idle start through the burst (and the idle window, if asked)."""
    listener = build_listener(variant, storage)
    probe = DrainProbe(config.handler_ms / 1000.0)
    listener.subscribe(probe)
    SCALING_LOG.take()
    try:
        started = time.monotonic()
        listener.start_listener(variant.threads)
        sleep_until(burst.first_visible)
        before_burst = billed(storage)
        deadline = burst.all_visible + config.drain_timeout_s
        done, samples = follow_drain(listener, config.burst, deadline)
        at_done = billed(storage)
        peak = listener.query_state().total_dequeue_tasks  # one transaction: counted later
        reference = burst.all_visible
        run = Run(
            variant=variant.name,
            round=round_no,
            burst=config.burst,
            fill_s=burst.fill_s,
            reveal_spread_s=burst.all_visible - burst.first_visible,
            pre_idle_s=burst.first_visible - started,
            pre_idle_transactions=before_burst,
            pickup_s=(probe.first_at or math.nan) - reference,
            drain_s=done - reference,
            drain_transactions=at_done - before_burst,
            peak_threads=peak,
            time_to_peak_s=first_peak_at(samples, peak) - reference,
            delivered=0,
            dequeue_errors=0,
            remaining=-1,
        )
        if idle:
            measure_idle(run, listener, storage, config)
    finally:
        stopped = listener.stop(timeout_s=STOP_TIMEOUT_S)
    if not stopped:
        raise BenchmarkError(f"listener threads still running {STOP_TIMEOUT_S} s after stop")
    run.delivered = probe.delivered
    run.dequeue_errors = listener.dequeue_errors
    run.scaling_events = [
        {**record, "at": round(record["at"] - reference, 3)} for record in SCALING_LOG.take()
    ]
    return run


def phase_offset_s(round_no: int, rounds: int) -> float:
    """The fraction of a poll period the listener starts before the reveal, in this round.

    A listener started a whole number of seconds before the burst would have its 1 s polls land
    just after it, every time. The offsets spread the rounds evenly over PHASE_SPAN_S, so that
    every variant's pollers meet the burst at phases spread over their period; every variant
    gets the same offset in a round.
    """
    return PHASE_SPAN_S * (2 * round_no - 1) / (2 * rounds)


def listener_start_at(burst: Burst, offset_s: float, pre_idle_s: float) -> float:
    """``pre_idle_s`` + ``offset_s`` before the first messages show (fewer whole periods if the
    fill ran late: the phase is kept, only the idle time shrinks, by whole phase spans)."""
    reveal_starts = burst.target - REVEAL_WINDOW_S
    room_s = reveal_starts - offset_s - time.monotonic()
    idle_s = pre_idle_s
    while idle_s > room_s:
        idle_s -= PHASE_SPAN_S
    if idle_s < MIN_PRE_IDLE_S:
        raise BenchmarkError("putting the burst left too little idle time: raise --fill-budget-s")
    return reveal_starts - offset_s - idle_s


def measure(variant: Variant, round_no: int, config: Config, *, idle: bool) -> Run:
    """Fresh Azurite; put the burst (unmetered); run the variant on metered storage."""
    texts = [f"burst-{index:05d}" for index in range(config.burst)]
    with AzuriteProcess(REPO_ROOT) as azurite:
        producer = AzureQueueStorage.from_connection_string(azurite.connection_string)
        try:
            producer.create_queue(QUEUE)
            offset_s = phase_offset_s(round_no, config.rounds)
            ahead_s = config.fill_budget_s + config.pre_idle_s + offset_s + REVEAL_WINDOW_S
            target = time.monotonic() + ahead_s
            burst = put_burst(producer, encode_all(texts), target)
            sleep_until(listener_start_at(burst, offset_s, config.pre_idle_s))
            inner = AzureQueueStorage.from_connection_string(azurite.connection_string)
            storage = MeteredStorage(inner)
            try:
                run = drive(variant, round_no, storage, burst, config, idle=idle)
            finally:
                storage.close()
            run.remaining = producer.approximate_message_count(QUEUE)
        finally:
            producer.close()
    if run.remaining != 0:
        raise BenchmarkError(f"{variant.name}: {run.remaining} messages left in the queue")
    return run


def encode_all(texts: Sequence[str]) -> list[str]:
    """The texts as the listener's default codec (base64) expects them."""
    return [CODEC.encode(text) for text in texts]


# -- the plan and its summary ------------------------------------------------------------------


def run_all(config: Config) -> list[Run]:
    """Round 1 with idle windows, later rounds drain only; the variant order flips every round."""
    runs: list[Run] = []
    for round_no in range(1, config.rounds + 1):
        order = VARIANTS if round_no % 2 == 1 else tuple(reversed(VARIANTS))
        for variant in order:
            progress(f"round {round_no}/{config.rounds}: {variant.label} ...")
            run = measure(variant, round_no, config, idle=round_no == 1)
            progress(f"  {describe_run(run)}")
            runs.append(run)
    return runs


def describe_run(run: Run) -> str:
    line = (
        f"drain {run.drain_s:.2f} s (pickup {run.pickup_s:+.2f} s), peak {run.peak_threads} "
        f"threads, {run.drain_transactions} tx in the drain, fill {run.fill_s:.1f} s"
    )
    if run.idle_per_hour is not None:
        line += f", idle {run.idle_per_hour:,.0f} tx/h"
    return line


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def summarize(runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    """Per variant: the idle figures of round 1 and the medians of the drain figures."""
    summary: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        mine = [run for run in runs if run.variant == variant.name]
        idle = next(run for run in mine if run.idle_per_hour is not None)
        summary[variant.name] = {
            "label": variant.label,
            "idle_per_hour": idle.idle_per_hour,
            "idle_window_transactions": idle.idle_window_transactions,
            "idle_window_s": idle.idle_window_s,
            "idle_window_counts": idle.idle_window_counts,
            "active_at_window": idle.active_at_window,
            "post_burst_transactions": idle.post_burst_transactions,
            "post_burst_s": idle.post_burst_s,
            "pre_idle_per_hour": _median(
                [run.pre_idle_transactions / run.pre_idle_s * 3600.0 for run in mine]
            ),
            "drain_s": [run.drain_s for run in mine],
            "drain_s_median": _median([run.drain_s for run in mine]),
            "pickup_s_median": _median([run.pickup_s for run in mine]),
            "after_pickup_s_median": _median([run.drain_s - run.pickup_s for run in mine]),
            "time_to_peak_s_median": _median([run.time_to_peak_s for run in mine]),
            "peak_threads": max(run.peak_threads for run in mine),
            "drain_transactions_median": _median([run.drain_transactions for run in mine]),
        }
    return summary


@dataclass(frozen=True)
class Target:
    name: str
    ratio: float
    limit: float

    @property
    def passed(self) -> bool:
        return self.ratio <= self.limit


def targets(summary: dict[str, dict[str, Any]]) -> list[Target]:
    fixed_max, fixed_one, elastic = summary[FIXED_MAX], summary[FIXED_ONE], summary[ELASTIC]
    return [
        Target(
            f"idle tx/h (c)/(a) <= 1/{MAX_THREADS}",
            elastic["idle_per_hour"] / fixed_max["idle_per_hour"],
            IDLE_RATIO_TARGET,
        ),
        Target(
            "idle tx/h (c)/(b) <= 1", elastic["idle_per_hour"] / fixed_one["idle_per_hour"], 1.0
        ),
        Target(
            f"drain time (c)/(a) <= {DRAIN_RATIO_TARGET}",
            elastic["drain_s_median"] / fixed_max["drain_s_median"],
            DRAIN_RATIO_TARGET,
        ),
    ]


def paired_drain_ratios(runs: Sequence[Run]) -> list[float]:
    """(c)/(a) drain time within each round (the two ran minutes apart, on the same machine)."""
    by_key = {(run.variant, run.round): run.drain_s for run in runs}
    rounds = sorted({run.round for run in runs})
    return [by_key[(ELASTIC, r)] / by_key[(FIXED_MAX, r)] for r in rounds]


# -- the report --------------------------------------------------------------------------------


def report_lines(
    config: Config, runs: Sequence[Run], summary: dict[str, dict[str, Any]]
) -> list[str]:
    spread = max(run.reveal_spread_s for run in runs)
    handler = (
        "no-op" if config.handler_ms <= 0 else f"sleep {config.handler_ms:g} ms (simulated I/O)"
    )
    lines = [
        f"Workload: idle, a burst of {config.burst} messages revealed at once (all within "
        f"{spread:.2f} s; queue depth {config.burst} at the reveal, 0 at the end), idle again.",
        f"Observer: {handler}, the same for every variant. A fresh Azurite per run; "
        f"{config.rounds} round(s), variant order reversed every round; idle figures from round 1.",
        "",
        f"Idle cost (round 1; settled {config.settle_s:g} s after the drain, then a "
        f"{config.idle_window_s:g} s window):",
        f"  {'variant':<28}{'tx/idle hour':>13}{'window tx':>11}{'threads':>9}"
        f"{'post-burst raw':>22}{'pre-burst tx/h':>16}  window ops",
    ]
    for variant in VARIANTS:
        row = summary[variant.name]
        start_active, end_active = row["active_at_window"]
        ops = ", ".join(f"{op} {n}" for op, n in sorted(row["idle_window_counts"].items()))
        post = f"{row['post_burst_transactions']} tx / {row['post_burst_s']:.1f} s"
        lines.append(
            f"  {row['label']:<28}{row['idle_per_hour']:>13,.0f}"
            f"{row['idle_window_transactions']:>11}"
            f"{f'{start_active}->{end_active}':>9}{post:>22}{row['pre_idle_per_hour']:>16,.0f}"
            f"  {ops}"
        )
    lines += ["", "Burst (medians over rounds; times from the moment the whole burst is visible):"]
    lines.append(
        f"  {'variant':<28}{'drain s':>9}  {'per round':<22}{'pickup s':>9}{'after pickup':>13}"
        f"{'peak thr':>9}{'to peak s':>10}{'drain tx':>9}"
    )
    for variant in VARIANTS:
        row = summary[variant.name]
        per_round = ", ".join(f"{value:.2f}" for value in row["drain_s"])
        lines.append(
            f"  {row['label']:<28}{row['drain_s_median']:>9.2f}  {per_round:<22}"
            f"{row['pickup_s_median']:>9.2f}{row['after_pickup_s_median']:>13.2f}"
            f"{row['peak_threads']:>9}{row['time_to_peak_s_median']:>10.2f}"
            f"{row['drain_transactions_median']:>9.0f}"
        )
    lines += ["", *scaling_lines(runs), "", *breakdown_lines(summary)]
    lines += ["", *target_lines(runs, summary)]
    return lines


def scaling_lines(runs: Sequence[Run]) -> list[str]:
    """What cloudqueue's scaler did during each burst (times from the whole burst visible)."""
    lines = ["cloudqueue scaling decisions during the burst:"]
    for run in runs:
        if run.variant != ELASTIC:
            continue
        ups = [event for event in run.scaling_events if event["event"] != "scaled_down"]
        steps = "; ".join(
            f"{event['event']} at {event['at']:+.2f} s to {event.get('target')} "
            f"(depth {event.get('depth')}, {event.get('reason')})"
            for event in ups[:6]
        )
        downs = sum(1 for event in run.scaling_events if event["event"] == "scaled_down")
        lines.append(f"  round {run.round}: {steps or 'none'}; {downs} scaled_down event(s)")
    return lines


def breakdown_lines(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Drain time = pickup delay + processing after pickup, for (c) next to (a)."""
    fixed_max, elastic = summary[FIXED_MAX], summary[ELASTIC]
    ramp = elastic["time_to_peak_s_median"] - elastic["pickup_s_median"]
    return [
        "Where the drain time goes, (c) vs (a) (medians):",
        f"  pickup delay {elastic['pickup_s_median']:.2f} s vs {fixed_max['pickup_s_median']:.2f} s"
        f" (an idle poller meets new work after half its period on average: "
        f"{MAX_IDLE_S / 2:.2f} s at max_idle_s={MAX_IDLE_S:g} s, "
        f"{FIXED_POLL_INTERVAL_S / 2:.1f} s at a 1 s poll)",
        f"  after pickup {elastic['after_pickup_s_median']:.2f} s vs "
        f"{fixed_max['after_pickup_s_median']:.2f} s; (c) reached its peak of "
        f"{elastic['peak_threads']} threads {ramp:.2f} s after its pickup",
    ]


def target_lines(runs: Sequence[Run], summary: dict[str, dict[str, Any]]) -> list[str]:
    fixed_max, fixed_one = summary[FIXED_MAX], summary[FIXED_ONE]
    lines = [
        "Ratios and targets:",
        f"  drain time (b)/(a) = {fixed_one['drain_s_median'] / fixed_max['drain_s_median']:.2f} "
        "(for reference)",
    ]
    for target in targets(summary):
        verdict = "PASS" if target.passed else "FAIL"
        lines.append(f"  {target.name}: {target.ratio:.4f} (limit {target.limit:.4f}) {verdict}")
    pairs = ", ".join(f"{ratio:.2f}" for ratio in paired_drain_ratios(runs))
    lines.append(f"  drain time (c)/(a) per round: {pairs}")
    odd = [
        f"{run.variant} round {run.round}: {run.delivered} deliveries, "
        f"{run.dequeue_errors} dequeue errors"
        for run in runs
        if run.delivered != run.burst or run.dequeue_errors
    ]
    lines.append(f"  anomalies: {'; '.join(odd) if odd else 'none (every message delivered once)'}")
    return lines


# -- the README block --------------------------------------------------------------------------


def render_markdown(results: dict[str, Any]) -> str:
    """The README block for these results: idle cost and drain per variant, then the targets."""
    config, constants, summary = results["config"], results["constants"], results["summary"]
    threads, poll_s = constants["max_threads"], constants["fixed_poll_interval_s"]
    readme_labels = {
        FIXED_MAX: f"(a) {threads} threads polling every {poll_s:g} s",
        FIXED_ONE: f"(b) 1 thread polling every {poll_s:g} s",
        ELASTIC: "(c) cloudqueue defaults",
    }
    handler = (
        "no-op handler"
        if config["handler_ms"] <= 0
        else f"a handler sleeping {config['handler_ms']:g} ms"
    )
    lines = [
        f"**Idle cost and burst drain** — idle, a burst of {config['burst']:,} messages revealed "
        f"at once (queue depth {config['burst']:,} at the reveal, 0 at the end), idle again; "
        f"{handler}; a fresh Azurite per run; {config['rounds']} round(s), variant order "
        f"reversed every round; idle cost from round 1, a {config['idle_window_s']:g} s window "
        f"{config['settle_s']:g} s after the drain, extrapolated to an hour; drain time from the "
        "moment the whole burst is visible:",
        "",
        "| variant | storage transactions per idle hour | drain time, median (per round) "
        "| peak threads |",
        "|---|---|---|---|",
    ]
    for name, label in readme_labels.items():
        row = summary[name]
        per_round = ", ".join(f"{value:.2f}" for value in row["drain_s"])
        lines.append(
            f"| {label} | {row['idle_per_hour']:,.0f} | {row['drain_s_median']:.2f} s "
            f"({per_round}) | {row['peak_threads']} |"
        )
    lines += ["", _targets_markdown(results), "", header_line(results)]
    return "\n".join(lines) + "\n"


def _targets_markdown(results: dict[str, Any]) -> str:
    """The verdicts, then where the drain time of (c) went next to (a)."""
    fixed_max, elastic = results["summary"][FIXED_MAX], results["summary"][ELASTIC]
    verdicts = "; ".join(
        f"{_symbols(t['name'])}: {t['ratio']:.3f}, {'met' if t['passed'] else '**not met**'}"
        for t in results["targets"]
    )
    per_round = ", ".join(f"{ratio:.2f}" for ratio in results["drain_ratio_per_round"])
    max_idle_s = results["constants"]["max_idle_s"]
    ramp_s = elastic["time_to_peak_s_median"] - elastic["pickup_s_median"]
    return (
        f"Targets (on the medians): {verdicts}. Drain time (c)/(a) per round: {per_round}. "
        f"Pickup delay, median: (c) {elastic['pickup_s_median']:.2f} s vs (a) "
        f"{fixed_max['pickup_s_median']:.2f} s (an idle poller meets new work after half its "
        f"period on average; cloudqueue's idle period is up to `max_idle_s` = {max_idle_s:g} s); "
        f"after pickup: (c) {elastic['after_pickup_s_median']:.2f} s vs (a) "
        f"{fixed_max['after_pickup_s_median']:.2f} s; (c) reached its peak of "
        f"{elastic['peak_threads']} threads {ramp_s:.2f} s after its pickup."
    )


def _symbols(text: str) -> str:
    return text.replace("<=", "≤")


# -- the command line --------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.bench_scaling", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--burst", "-n", type=int, help="messages in the burst (default 1000)")
    parser.add_argument("--rounds", "-r", type=int, help="rounds of all variants (default 4)")
    parser.add_argument(
        "--pre-idle-s", type=float, help="listener idle before the burst (a multiple of 3 s)"
    )
    parser.add_argument("--settle-s", type=float, help="after the drain, before the idle window")
    parser.add_argument("--idle-window-s", type=float, help="the counted idle window (round 1)")
    parser.add_argument("--fill-budget-s", type=float, help="time allowed to put the burst")
    parser.add_argument("--handler-ms", type=float, default=0.0, help="observer sleep (0: no-op)")
    parser.add_argument("--drain-timeout-s", type=float, default=120.0, help="per-drain deadline")
    parser.add_argument("--quick", action="store_true", help="a smoke run (< 2 minutes)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this path")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    burst = args.burst or (150 if quick else 1000)
    config = Config(
        burst=burst,
        rounds=args.rounds or (2 if quick else 4),
        pre_idle_s=args.pre_idle_s or (MIN_PRE_IDLE_S if quick else 3 * PHASE_SPAN_S),
        settle_s=_or(args.settle_s, 3.0 if quick else 10.0),
        idle_window_s=_or(args.idle_window_s, 8.0 if quick else 30.0),
        fill_budget_s=_or(
            args.fill_budget_s,
            burst / FILL_RATE_ESTIMATE_PER_S + (QUICK_FILL_MARGIN_S if quick else FILL_MARGIN_S),
        ),
        handler_ms=args.handler_ms,
        drain_timeout_s=args.drain_timeout_s,
        json_path=args.json,
        write=bool(args.write),
    )
    if not 1 <= config.burst <= MAX_BURST:
        parser.error(f"--burst must be 1..{MAX_BURST} (Azurite slows with depth and deletes)")
    if config.rounds < 1 or config.idle_window_s <= 0 or config.drain_timeout_s <= 0:
        parser.error("--rounds, --idle-window-s and --drain-timeout-s must be positive")
    if min(config.pre_idle_s, config.settle_s, config.fill_budget_s, config.handler_ms) < 0:
        parser.error("durations must not be negative")
    if config.pre_idle_s < MIN_PRE_IDLE_S or config.pre_idle_s % PHASE_SPAN_S:
        parser.error(f"--pre-idle-s must be a multiple of {PHASE_SPAN_S}, >= {MIN_PRE_IDLE_S}")
    return config


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def to_json(config: Config, runs: Sequence[Run], summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "config": {**asdict(config), "json_path": str(config.json_path or "")},
        "constants": {
            "max_threads": MAX_THREADS,
            "max_idle_s": MAX_IDLE_S,
            "fixed_poll_interval_s": FIXED_POLL_INTERVAL_S,
            "reveal_window_s": REVEAL_WINDOW_S,
            "visibility_timeout_s": VISIBILITY_TIMEOUT_S,
        },
        "runs": [{**asdict(run), "idle_per_hour": run.idle_per_hour} for run in runs],
        "summary": summary,
        "targets": [{**asdict(t), "passed": t.passed} for t in targets(summary)],
        "drain_ratio_per_round": paired_drain_ratios(runs),
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    config = parse_args(argv)
    results = run_header(BENCH, argv)
    configure_logging()
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    try:
        runs = run_all(config)
    except BenchmarkError as failure:
        progress(f"benchmark failed: {failure}")
        return 1
    summary = summarize(runs)
    lines = report_lines(config, runs, summary)
    lines.append(
        f"{os.cpu_count()} CPUs; load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; {time.monotonic() - started:.0f} s in all"
    )
    print("\n".join(lines))
    results.update(to_json(config, runs, summary))
    if config.json_path is not None:
        config.json_path.write_text(json.dumps(results, indent=2) + "\n")
    if config.write:
        progress(f"wrote {write_results(BENCH, results)}")
    print(render_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
