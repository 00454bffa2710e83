"""Pickup latency and idle cost of push-triggered scale-to-zero, next to default polling.

Run ``.venv/bin/python -m tests.benchmarks.bench_push [--quick] [--write] [--json PATH]`` (about
4 minutes; ``--write`` saves tests/benchmarks/results/bench_push.json for the README).

Two modes, each against its own fresh Azurite, the listener's storage wrapped in ``MeteredStorage``
(one counted call = one billed transaction; the one-off ``create_queue`` calls of start-up are left
out), a no-op handler that notes the time on its first line:

* ``poll``: the defaults (an ``ElasticScaler`` with ``ScalingPolicy()``), one thread: an idle
  poller backs off from 0.1 s to ``max_idle_s`` (the current default, read at run time) and keeps
  polling at that period;
* ``push``: ``ScalingPolicy(min_threads=0)``, a ``TriggerWaker`` on a ``RedisTriggerChannel`` (a
  real redis-server) and ``Watchdog(interval_s=300)``: the last thread stops at max idle. The
  producer publishes a ``WorkDetected`` after each put, over its own ``RedisTriggerChannel``.

Each mode: start the listener on an empty queue and let it settle (poll: its back-off reaches the
cap; push: zero threads) -- the transactions until then are the scale-down transient. Then an idle
window of ``--idle-s`` (60 s): its transactions, extrapolated to an hour, are the idle cost. Then
the first pickup sample, so the first message meets a listener idle for the whole window; then
more samples, each after the listener has settled again (poll: the next poll at the cap, then a
random wait within its period, so samples meet the poller at evenly spread phases; push: zero
threads, then ``--push-gap-s``, 0.5 s). Pickup latency runs from just before ``put_message`` to the
handler's first line (``time.perf_counter`` in this process; the producer's put and publish are
inside it). The queue holds at most one message (depth 0 or 1) throughout.

The watchdog checks once per 300 s, so a 60 s window mostly sees no check at all: the report gives
the window's own extrapolation *and* the rate by construction (3600 / interval x the transactions
of one check, verified by one extra check at the end), labelled as such.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from cloudqueue.listener.consumer.events import QueueEmptyDecision
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.consumer.pool_control import PoolControl
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel
from cloudqueue.listener.push.triggers import WorkDetected, account_of
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.scaling.waker import DEFAULT_WATCHDOG_INTERVAL_S, TriggerWaker, Watchdog
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.wire.codec import MessageCodec
from tests.benchmarks.results_file import header_line, run_header, write_results
from tests.support.azurite import REPO_ROOT, AzuriteProcess
from tests.support.redis_server import RedisServer

BENCH = "bench_push"
QUEUE = "push-bench"
VISIBILITY_TIMEOUT_S = 30
WATCHDOG_INTERVAL_S = DEFAULT_WATCHDOG_INTERVAL_S
MAX_IDLE_S = ScalingPolicy().max_idle_s
PUSH_GAP_S = 0.5
"""Push mode: after the pool reached zero threads, wait this long before the next put (default)."""
AZURITE_KEEP_ALIVE_S = 5.0
"""Azurite's queue server closes idle HTTP connections after this long (its default)."""
SETTLE_TIMEOUT_S = 30.0
PICKUP_TIMEOUT_S = 20.0
"""Far above either mode's expected pickup, far below the watchdog's 300 s: a lost trigger fails."""
CONNECT_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 30.0
CHECK_S = 0.02
"""How often the main thread looks for zero threads (the listener is idle then)."""
SECONDS_PER_HOUR = 3600.0
PUSH_MEDIAN_TARGET_S = 0.050
PUSH_IDLE_TARGET_PER_HOUR = 12.0
CODEC = MessageCodec(str)


class BenchmarkError(RuntimeError):
    """A run did not finish as it should (a deadline passed, a trigger got lost, threads left)."""


@dataclass(frozen=True)
class Mode:
    name: str
    label: str
    push: bool


POLL = Mode("poll", f"poll: ScalingPolicy() defaults, 1 poller, cap {MAX_IDLE_S:g} s", push=False)
PUSH = Mode(
    "push",
    f"push: min_threads=0 + Redis triggers + watchdog {WATCHDOG_INTERVAL_S:g} s",
    push=True,
)
MODES = (POLL, PUSH)


@dataclass(frozen=True)
class Config:
    idle_s: float
    samples: int
    push_gap_s: float
    seed: int
    quick: bool
    json_path: Path | None
    write: bool


# -- logging: only warnings reach the terminal -------------------------------------------------


def drop_chatter(
    _logger: object, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    if method_name in ("debug", "info"):
        raise structlog.DropEvent
    return event_dict


def configure_logging() -> None:
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(
        processors=[
            drop_chatter,
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


# -- probes ------------------------------------------------------------------------------------


class PickupProbe:
    """The handler: its first line notes the time; the main thread waits for one item at a time."""

    def __init__(self) -> None:
        self._arrived = threading.Condition()
        self._at: dict[str, float] = {}
        self.deliveries = 0

    def __call__(self, item: str) -> None:
        at = time.perf_counter()
        with self._arrived:
            self.deliveries += 1
            self._at.setdefault(item, at)
            self._arrived.notify_all()

    def wait_for(self, item: str, timeout_s: float) -> float | None:
        """When the handler started on ``item``, or None if it did not within the timeout."""
        with self._arrived:
            self._arrived.wait_for(lambda: item in self._at, timeout_s)
            return self._at.get(item)


class CapProbedScaler(ElasticScaler):
    """The default scaler, noting when an idle poller's back-off has reached its cap."""

    def __init__(self, pool: PoolControl, policy: ScalingPolicy, max_idle_s: float) -> None:
        self.max_idle_s = max_idle_s
        self.at_cap = threading.Event()
        super().__init__(pool, policy)

    def on_queue_empty(self, idle_count: int) -> QueueEmptyDecision:
        decision = super().on_queue_empty(idle_count)
        if not decision.stop and decision.delay_s >= self.max_idle_s:
            self.at_cap.set()  # the poller waits max_idle_s from (about) now
        return decision

    def wait_next_poll_at_cap(self) -> None:
        self.at_cap.clear()
        if not self.at_cap.wait(SETTLE_TIMEOUT_S):
            raise BenchmarkError(f"the poller did not reach its cap within {SETTLE_TIMEOUT_S} s")


# -- one mode ----------------------------------------------------------------------------------


@dataclass
class Sample:
    """One message: where its time went (seconds) and what the listener had been doing."""

    index: int
    idle_before_s: float
    """From the previous handler start (or the listener's start) to this put."""
    latency_s: float
    put_s: float
    publish_s: float | None
    """The producer's PUBLISH (push mode), counted inside latency_s."""
    cycle_transactions: int | None = None
    """Push mode: transactions from this put until the pool was back at zero threads."""


@dataclass
class Run:
    """One mode on a fresh Azurite."""

    mode: str
    transient_s: float
    transient_transactions: int
    transient_counts: dict[str, int]
    window_s: float
    window_transactions: int
    window_counts: dict[str, int]
    threads_at_window: tuple[int, int]
    samples: list[Sample] = field(default_factory=list)
    deliveries: int = 0
    dequeue_errors: int = 0
    watchdog_checks_in_window: int | None = None
    transactions_per_watchdog_check: int | None = None
    triggers_seen: int | None = None
    failed_publishes: int = 0

    @property
    def window_per_hour(self) -> float:
        return self.window_transactions / self.window_s * SECONDS_PER_HOUR


def billed(storage: MeteredStorage) -> int:
    """Transactions so far, leaving out the one-off create_queue calls of start-up."""
    counts = storage.counts()
    return sum(counts.values()) - counts.get("create_queue", 0)


def counts_since(storage: MeteredStorage, before: dict[str, int]) -> dict[str, int]:
    after = storage.counts()
    return {
        op: n - before.get(op, 0)
        for op, n in sorted(after.items())
        if op != "create_queue" and n - before.get(op, 0)
    }


def live_threads(listener: CloudQueueListener[str]) -> int:
    """Dequeue threads that still exist (leaving ones included), as
    tests/listener/scaling/test_push.py counts."""
    return listener.threads_alive


def wait_for_zero_threads(listener: CloudQueueListener[str]) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while live_threads(listener) > 0:
        if time.monotonic() > deadline:
            raise BenchmarkError(f"the pool did not reach zero threads in {SETTLE_TIMEOUT_S} s")
        time.sleep(CHECK_S)


class Bench:
    """One mode's listener, producer and (push mode) trigger plumbing, for one run."""

    def __init__(
        self,
        mode: Mode,
        listener: CloudQueueListener[str],
        scaler: CapProbedScaler,
        storage: MeteredStorage,
        producer: AzureQueueStorage,
        publish: Callable[[WorkDetected], bool] | None,
        account: str,
        rng: random.Random,
        push_gap_s: float,
    ) -> None:
        self.mode = mode
        self.push_gap_s = push_gap_s
        self.listener = listener
        self.storage = storage
        self.producer = producer
        self.publish = publish
        self.account = account
        self.rng = rng
        self.probe = PickupProbe()
        listener.subscribe(self.probe)
        self.scaler = scaler
        self.failed_publishes = 0

    def settle(self) -> None:
        """Wait until the listener idles as it will for good, then (poll) pick a random phase."""
        if self.mode.push:
            wait_for_zero_threads(self.listener)
        else:
            self.scaler.wait_next_poll_at_cap()

    def phase_wait(self) -> None:
        """Before a put: push waits a fixed gap; poll a uniform share of its current period."""
        time.sleep(self.push_gap_s if self.mode.push else self.rng.uniform(0.0, MAX_IDLE_S))

    def sample(self, index: int, since: float) -> tuple[Sample, float]:
        """Put one message (and its trigger); return the sample and the handler's start time."""
        item = f"sample-{index:03d}"
        content = CODEC.encode(item)
        event = WorkDetected(self.account, QUEUE, payload_size=len(content))
        started = time.perf_counter()
        self.producer.put_message(QUEUE, content)
        put_done = time.perf_counter()
        publish_s: float | None = None
        if self.publish is not None:
            if not self.publish(event):
                self.failed_publishes += 1
            publish_s = time.perf_counter() - put_done
        handled = self.probe.wait_for(item, PICKUP_TIMEOUT_S)
        if handled is None:
            raise BenchmarkError(f"{self.mode.name}: {item} not handled in {PICKUP_TIMEOUT_S} s")
        sample = Sample(
            index=index,
            idle_before_s=started - since,
            latency_s=handled - started,
            put_s=put_done - started,
            publish_s=publish_s,
        )
        return sample, handled


def measure_idle(bench: Bench, config: Config, started: float) -> Run:
    """Settle after start (the transient), then count one idle window."""
    storage, listener = bench.storage, bench.listener
    bench.settle()
    transient_counts = counts_since(storage, {})
    settled = time.perf_counter()
    if not bench.mode.push:
        bench.phase_wait()  # start the window at a random phase of the poll period (no bias)
    before, threads_before = storage.counts(), live_threads(listener)
    window_start = time.perf_counter()
    time.sleep(config.idle_s)
    window_counts = counts_since(storage, before)
    window_end = time.perf_counter()
    return Run(
        mode=bench.mode.name,
        transient_s=settled - started,
        transient_transactions=sum(transient_counts.values()),
        transient_counts=transient_counts,
        window_s=window_end - window_start,
        window_transactions=sum(window_counts.values()),
        window_counts=window_counts,
        threads_at_window=(threads_before, live_threads(listener)),
    )


def measure_pickups(bench: Bench, run: Run, config: Config, started: float) -> None:
    """The first sample right after the idle window; the others after settling again each time."""
    since = started
    for index in range(config.samples):
        bench.settle()  # poll: wait for its next poll at the cap; push: at zero already
        bench.phase_wait()
        put_tx = billed(bench.storage)
        sample, since = bench.sample(index, since)
        run.samples.append(sample)
        progress(f"  {bench.mode.name} sample {index}: {sample.latency_s * 1000:.1f} ms")
        if bench.mode.push:
            bench.settle()  # so the next turn's settle() returns at once
            sample.cycle_transactions = billed(bench.storage) - put_tx


@contextmanager
def trigger_plumbing(
    mode: Mode,
    redis_url: str | None,
    listener: CloudQueueListener[str],
    scaler: ElasticScaler,
    account: str,
) -> Iterator[tuple[Callable[[WorkDetected], bool] | None, TriggerWaker | None, Watchdog | None]]:
    """Push mode: the listener's channel, waker and watchdog, and the producer's channel."""
    if not mode.push or redis_url is None:
        yield None, None, None
        return
    listening = RedisTriggerChannel(redis_url)
    producing = RedisTriggerChannel(redis_url)
    waker = TriggerWaker(listener, scaler, listening, account=account)
    watchdog: Watchdog | None = None
    try:
        if not listening.connected.wait(CONNECT_TIMEOUT_S):
            raise BenchmarkError("the listener's trigger channel did not connect to Redis")
        watchdog = Watchdog(listener, scaler, interval_s=WATCHDOG_INTERVAL_S)
        yield producing.publish, waker, watchdog
    finally:
        if watchdog is not None:
            watchdog.close()
        waker.close()
        listening.close()
        producing.close()


def build_listener(
    mode: Mode, storage: MeteredStorage
) -> tuple[CloudQueueListener[str], CapProbedScaler]:
    listener = CloudQueueListener(
        storage, CloudQueueLocation(QUEUE, visibility_timeout_s=VISIBILITY_TIMEOUT_S), str
    )
    scaler = CapProbedScaler(
        listener.pool_control,
        ScalingPolicy(min_threads=0) if mode.push else ScalingPolicy(),
        MAX_IDLE_S,
    )
    return listener, scaler


def measure(mode: Mode, config: Config, redis_url: str | None, rng: random.Random) -> Run:
    """Fresh Azurite; an unmetered producer; the listener on metered storage; always clean up."""
    with AzuriteProcess(REPO_ROOT) as azurite:
        account = account_of(azurite.connection_string)
        producer = AzureQueueStorage.from_connection_string(azurite.connection_string)
        storage = MeteredStorage(
            AzureQueueStorage.from_connection_string(azurite.connection_string)
        )
        try:
            producer.create_queue(QUEUE)
            listener, scaler = build_listener(mode, storage)
            with trigger_plumbing(mode, redis_url, listener, scaler, account) as plumbing:
                publish, waker, watchdog = plumbing
                bench = Bench(
                    mode,
                    listener,
                    scaler,
                    storage,
                    producer,
                    publish,
                    account,
                    rng,
                    config.push_gap_s,
                )
                try:
                    run = drive(bench, config, watchdog)
                finally:
                    if not listener.stop(timeout_s=STOP_TIMEOUT_S):
                        raise BenchmarkError(f"{mode.name}: threads still running after stop")
                run.triggers_seen = None if waker is None else waker.triggers_seen
            run.deliveries = bench.probe.deliveries
            run.dequeue_errors = listener.dequeue_errors
            run.failed_publishes = bench.failed_publishes
            remaining = producer.approximate_message_count(QUEUE)
        finally:
            storage.close()
            producer.close()
    if remaining:
        raise BenchmarkError(f"{mode.name}: {remaining} message(s) left in the queue")
    return run


def drive(bench: Bench, config: Config, watchdog: Watchdog | None) -> Run:
    started = time.perf_counter()
    if watchdog is not None:
        watchdog.start()
    bench.listener.start_listener(1)
    checks_before = watchdog.checks if watchdog is not None else 0
    run = measure_idle(bench, config, started)
    if watchdog is not None:
        run.watchdog_checks_in_window = watchdog.checks - checks_before
    measure_pickups(bench, run, config, started)
    if watchdog is not None:
        before = billed(bench.storage)
        watchdog.check()  # one extra check at zero threads: what one costs, measured
        run.transactions_per_watchdog_check = billed(bench.storage) - before
    return run


# -- the summary -------------------------------------------------------------------------------


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (p90 of 15 samples = the 14th smallest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def latency_summary(run: Run) -> dict[str, float]:
    latencies = [sample.latency_s for sample in run.samples]
    later = latencies[1:] or latencies
    summary = {
        "first_s": latencies[0],
        "median_s": statistics.median(latencies),
        "median_after_first_s": statistics.median(later),
        "p90_s": nearest_rank(latencies, 0.9),
        "max_s": max(latencies),
        "min_s": min(latencies),
        "put_median_s": statistics.median(sample.put_s for sample in run.samples),
    }
    publishes = [s.publish_s for s in run.samples if s.publish_s is not None]
    if publishes:
        summary["publish_median_s"] = statistics.median(publishes)
        summary["after_publish_median_s"] = statistics.median(
            s.latency_s - s.put_s - (s.publish_s or 0.0) for s in run.samples
        )
    return summary


def push_idle_by_construction(run: Run) -> float:
    """Watchdog checks per hour at zero threads times the transactions one check costs."""
    per_check = run.transactions_per_watchdog_check or 0
    return SECONDS_PER_HOUR / WATCHDOG_INTERVAL_S * per_check


def push_window_consistent(run: Run) -> bool:
    """The window saw nothing but watchdog checks, at most as many as its interval allows."""
    allowed = math.ceil(run.window_s / WATCHDOG_INTERVAL_S)
    checks = run.window_counts.get("approximate_message_count", 0)
    only_checks = set(run.window_counts) <= {"approximate_message_count"}
    return only_checks and checks <= allowed * (run.transactions_per_watchdog_check or 0)


@dataclass(frozen=True)
class Target:
    name: str
    value: str
    passed: bool


def targets(runs: dict[str, Run]) -> list[Target]:
    push = runs[PUSH.name]
    median = latency_summary(push)["median_s"]
    by_construction = push_idle_by_construction(push)
    consistent = push_window_consistent(push) and push.threads_at_window == (0, 0)
    return [
        Target(
            f"push median pickup <= {PUSH_MEDIAN_TARGET_S * 1000:g} ms",
            f"{median * 1000:.1f} ms",
            median <= PUSH_MEDIAN_TARGET_S,
        ),
        Target(
            f"push idle tx/hour <= {PUSH_IDLE_TARGET_PER_HOUR:g}",
            f"{by_construction:g}/h by construction; window {push.window_transactions} tx in "
            f"{push.window_s:.0f} s ({'consistent' if consistent else 'NOT consistent'} with it)",
            by_construction <= PUSH_IDLE_TARGET_PER_HOUR and consistent,
        ),
    ]


# -- the report --------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def ops(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items()) or "none"


def report_lines(config: Config, runs: dict[str, Run]) -> list[str]:
    idle_note = "" if config.idle_s >= 60 else f" (--quick/--idle-s: {config.idle_s:g} s, not 60)"
    lines = [
        f"Idle window {config.idle_s:g} s{idle_note}; {config.samples} pickup samples per mode; "
        "fresh Azurite per mode; queue depth 0 or 1; no-op handler.",
        "",
        "Pickup latency, ms (just before put_message -> handler's first line; the producer's put "
        "and, in push mode, its PUBLISH are inside it):",
        f"  {'mode':<6}{'first':>8}{'median':>8}{'p90':>8}{'max':>8}{'min':>8}"
        f"{'med w/o 1st':>12}{'put':>7}{'publish':>8}{'rest':>7}",
    ]
    for mode in MODES:
        row = latency_summary(runs[mode.name])
        publish = ms(row["publish_median_s"]) if "publish_median_s" in row else "-"
        rest = ms(row["after_publish_median_s"]) if "after_publish_median_s" in row else "-"
        lines.append(
            f"  {mode.name:<6}{ms(row['first_s']):>8}{ms(row['median_s']):>8}"
            f"{ms(row['p90_s']):>8}{ms(row['max_s']):>8}{ms(row['min_s']):>8}"
            f"{ms(row['median_after_first_s']):>12}{ms(row['put_median_s']):>7}"
            f"{publish:>8}{rest:>7}"
        )
    lines += [*first_sample_lines(config, runs)]
    lines += [
        "  p90 = nearest rank. rest = push latency after the PUBLISH returned (Redis delivery, "
        "the scaler's depth check, thread start, get, decode).",
        f"  poll pickup is bounded by max_idle_s = {MAX_IDLE_S:g} s (+ one get and the "
        "work-detected depth check): samples meet the poller at uniformly spread phases.",
        "",
        "Idle storage transactions per listener:",
    ]
    lines += idle_lines(runs)
    lines += ["", "Targets:"]
    lines += [f"  {t.name}: {t.value} {'PASS' if t.passed else 'FAIL'}" for t in targets(runs)]
    lines.append(f"  anomalies: {anomalies(config, runs)}")
    return lines


def first_sample_lines(config: Config, runs: dict[str, Run]) -> list[str]:
    """Where the first sample's time went, next to the later samples' medians."""
    lines = []
    for mode in MODES:
        run = runs[mode.name]
        first, later = run.samples[0], run.samples[1:] or run.samples
        rest = first.latency_s - first.put_s - (first.publish_s or 0.0)
        later_rest = statistics.median(s.latency_s - s.put_s - (s.publish_s or 0.0) for s in later)
        lines.append(
            f"  {mode.name} first sample: put {first.idle_before_s:.1f} s after the listener "
            f"started (settled, then the {run.window_s:.0f} s window); put {ms(first.put_s)} ms "
            f"vs {ms(statistics.median(s.put_s for s in later))} later, after the put "
            f"{ms(rest)} ms vs {ms(later_rest)} later"
        )
    gap = config.push_gap_s
    warm = "warm" if gap < AZURITE_KEEP_ALIVE_S else "closed"
    lines.append(
        f"  later push samples: put {gap:g} s after zero threads; Azurite closes idle HTTP "
        f"connections after {AZURITE_KEEP_ALIVE_S:g} s, so they meet {warm} connections, the "
        "first sample closed ones (--push-gap-s 6 measures every sample cold)"
    )
    return lines


def wake_cycles(push: Run) -> list[int]:
    return [s.cycle_transactions for s in push.samples if s.cycle_transactions is not None]


def push_wake_transactions_median(push: Run) -> float:
    """Transactions from a put until the pool is back at zero threads, median over the samples."""
    cycles = wake_cycles(push)
    return statistics.median(cycles) if cycles else math.nan


def idle_lines(runs: dict[str, Run]) -> list[str]:
    poll, push = runs[POLL.name], runs[PUSH.name]
    cycles = wake_cycles(push)
    wake_median = push_wake_transactions_median(push)
    return [
        f"  poll, measured: {poll.window_transactions} tx in {poll.window_s:.1f} s "
        f"({ops(poll.window_counts)}) -> {poll.window_per_hour:,.0f}/h extrapolated; "
        f"by construction one get per {MAX_IDLE_S:g} s (+ the get's own time) = at most "
        f"{SECONDS_PER_HOUR / MAX_IDLE_S:,.0f}/h; threads {poll.threads_at_window}",
        f"  push, measured in window: {push.window_transactions} tx in {push.window_s:.1f} s "
        f"({ops(push.window_counts)}; watchdog checks {push.watchdog_checks_in_window}) -> "
        f"{push.window_per_hour:,.0f}/h extrapolated; threads {push.threads_at_window}",
        f"  push, by construction: {SECONDS_PER_HOUR:g} s / {WATCHDOG_INTERVAL_S:g} s x "
        f"{push.transactions_per_watchdog_check} tx per watchdog check (measured by one extra "
        f"check) = {push_idle_by_construction(push):g}/h",
        f"  scale-down transient (start -> settled, before the window): poll "
        f"{poll.transient_transactions} tx in {poll.transient_s:.1f} s "
        f"({ops(poll.transient_counts)}); push {push.transient_transactions} tx in "
        f"{push.transient_s:.1f} s ({ops(push.transient_counts)})",
        f"  push, per wake (put -> back at zero threads): median {wake_median:g} tx, "
        f"min {min(cycles, default=0)}, max {max(cycles, default=0)} "
        "(the trigger's depth check, gets, the delete, back-off gets)",
    ]


def anomalies(config: Config, runs: dict[str, Run]) -> str:
    odd = [
        f"{run.mode}: {run.deliveries} deliveries, {run.dequeue_errors} dequeue errors, "
        f"{run.failed_publishes} failed publishes"
        for run in runs.values()
        if run.deliveries != config.samples or run.dequeue_errors or run.failed_publishes
    ]
    push = runs[PUSH.name]
    if push.triggers_seen is not None and push.triggers_seen != config.samples:
        odd.append(f"push: {push.triggers_seen} triggers seen for {config.samples} published")
    return "; ".join(odd) if odd else "none (every message delivered once, every trigger seen)"


# -- the README block --------------------------------------------------------------------------


def render_markdown(results: dict[str, Any]) -> str:
    """The README block for these results: the pickup and idle-cost table, then the targets."""
    config, constants, runs = results["config"], results["constants"], results["runs"]
    poll, push = runs[POLL.name], runs[PUSH.name]
    idle_s = config["idle_s"]
    lines = [
        f"**Push triggers vs polling** — Azurite and a real Redis, {idle_s:g} s idle before the "
        f"first sample, {config['samples']} samples per mode, a fresh Azurite per mode, queue "
        "depth 0 or 1, no-op handler; pickup runs from just before `put_message` to the "
        "handler's first line:",
        "",
        f"| mode | pickup median | p90 | first after {idle_s:g} s idle "
        "| idle transactions per hour per listener |",
        "|---|---|---|---|---|",
        _latency_row(f"poll (one poller, `max_idle_s` {constants['max_idle_s']:g} s)", poll)
        + f"{poll['window_per_hour']:,.0f} measured "
        f"({SECONDS_PER_HOUR / constants['max_idle_s']:,.0f} by construction) |",
        _latency_row(
            f"push (`min_threads = 0`, Redis triggers, watchdog "
            f"{constants['watchdog_interval_s']:g} s)",
            push,
        )
        + f"{push['window_per_hour']:,.0f} measured in {push['window_s']:.0f} s; "
        f"{results['push_idle_per_hour_by_construction']:g} by construction (the watchdog) |",
        "",
        "Targets: "
        + "; ".join(
            f"{_symbols(t['name'])}: {t['value']}, {'met' if t['passed'] else '**not met**'}"
            for t in results["targets"]
        )
        + f". A push wake-up costs {results['push_wake_transactions_median']:g} transactions "
        "per message, median (the trigger's depth check, gets, the delete, back-off gets).",
        "",
        header_line(results),
    ]
    return "\n".join(lines) + "\n"


def _latency_row(label: str, run: dict[str, Any]) -> str:
    latency = run["latency"]
    cells = [_ms(latency[key]) for key in ("median_s", "p90_s", "first_s")]
    return f"| {label} | {' | '.join(cells)} | "


def _ms(seconds: float) -> str:
    """Milliseconds, with a decimal only below 100 ms."""
    millis = seconds * 1000
    return f"{millis:,.0f} ms" if millis >= 100 else f"{millis:.1f} ms"


def _symbols(text: str) -> str:
    return text.replace("<=", "≤")


# -- the command line --------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> Config:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.bench_push", description=doc.split("\n")[0]
    )
    parser.add_argument("--idle-s", type=float, help="idle window before the first sample (60)")
    parser.add_argument("--samples", "-n", type=int, help="pickup samples per mode (15)")
    parser.add_argument(
        "--push-gap-s", type=float, default=PUSH_GAP_S, help="push: zero threads -> put (0.5)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seeds the poll phases")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 s idle, 5 samples")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this path")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    config = Config(
        idle_s=args.idle_s if args.idle_s is not None else (10.0 if quick else 60.0),
        samples=args.samples or (5 if quick else 15),
        push_gap_s=args.push_gap_s,
        seed=args.seed,
        quick=quick,
        json_path=args.json,
        write=bool(args.write),
    )
    if config.idle_s <= 0 or config.push_gap_s < 0 or not 1 <= config.samples <= 200:
        parser.error("--idle-s must be positive, --push-gap-s >= 0 and --samples 1..200")
    return config


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def to_json(config: Config, runs: dict[str, Run]) -> dict[str, Any]:
    return {
        "config": {**asdict(config), "json_path": str(config.json_path or "")},
        "constants": {
            "max_idle_s": MAX_IDLE_S,
            "watchdog_interval_s": WATCHDOG_INTERVAL_S,
            "azurite_keep_alive_s": AZURITE_KEEP_ALIVE_S,
            "visibility_timeout_s": VISIBILITY_TIMEOUT_S,
        },
        "runs": {
            name: {
                **asdict(run),
                "window_per_hour": run.window_per_hour,
                "latency": latency_summary(run),
            }
            for name, run in runs.items()
        },
        "push_idle_per_hour_by_construction": push_idle_by_construction(runs[PUSH.name]),
        "push_wake_transactions_median": push_wake_transactions_median(runs[PUSH.name]),
        "targets": [asdict(target) for target in targets(runs)],
    }


def run_all(config: Config) -> dict[str, Run]:
    rng = random.Random(config.seed)
    runs: dict[str, Run] = {}
    with tempfile.TemporaryDirectory(prefix="bench-push-redis-") as workdir:
        redis_server = RedisServer(Path(workdir)).start()
        try:
            for mode in MODES:
                progress(f"{mode.label} ...")
                runs[mode.name] = measure(mode, config, redis_server.url, rng)
        finally:
            redis_server.stop()
    return runs


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
    lines = report_lines(config, runs)
    lines.append(
        f"{os.cpu_count()} CPUs; load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; {time.monotonic() - started:.0f} s in all"
    )
    print("\n".join(lines))
    results.update(to_json(config, runs))
    if config.json_path is not None:
        config.json_path.write_text(json.dumps(results, indent=2) + "\n")
    if config.write:
        progress(f"wrote {write_results(BENCH, results)}")
    print(render_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
