"""One periodic job in a host process: wait for its ticks, claim each, run the ones it wins.

A thread per job sleeps until the next tick (on the stop event, through the injected sleeper),
claims the tick in the store's ledger and, when the claim fires, runs the job on a thread of its
own, so that while it runs the scheduler renews the lease, watches the time limit and skips the
ticks that come meanwhile (a run never overlaps the previous one). Claims that another process
won are the normal case in a fleet: they are logged at debug level only.

A tick refused because another holder's lease was live is tried once more when that lease ends
(a handover claim): a holder killed after a renewal had carried its lease past the tick leaves
it expired and unreleased, and the tick fires here then, late by less than the lease -- under
either missed-tick policy, since a process was up when it was due. A holder still running has
renewed by then, and one that finished has released: the tick stays skipped (no overlap).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime

import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.stores.tick_ledger import JobRecord, TickLedger
from cloudqueue.workers.api.periodic_job import JobSpec, PeriodicJob
from cloudqueue.workers.host.async_handler import AsyncHandlerRunner
from cloudqueue.workers.host.lifecycle import start_up, wind_down

log = structlog.get_logger(__name__)

OUTCOMES = ("succeeded", "failed", "timed_out", "skipped")
"""The ``outcome`` of a counted tick: a run's end, or ``skipped`` while the last run went on."""

RENEWALS_PER_LEASE = 3


@dataclass(slots=True)
class _Run:
    """The run in progress in this process."""

    tick: datetime
    started_s: float
    thread: threading.Thread
    reported_late: bool = False
    lease_lost: bool = False
    renew_at_s: float = 0.0
    finished: bool = False
    """Set before its lease is released, so that a renewal racing the release is not taken
    for a lost lease."""


@dataclass(frozen=True, slots=True)
class _Handover:
    """A tick refused by another holder's live lease, to claim again when the lease ends."""

    tick: datetime
    lease_until: datetime


class JobScheduler:
    """Fires one job's ticks that this process wins; ``start`` it, ``request_stop``, ``stop``."""

    def __init__(
        self,
        job: PeriodicJob,
        spec: JobSpec,
        ledger: TickLedger,
        *,
        holder: str,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        self.job = job
        self.spec = spec
        self.ledger = ledger
        self.holder = holder
        self.clock = clock
        self.sleeper = sleeper
        self.runs: Counter[str] = Counter()
        self.next_tick: datetime | None = None
        self.last_fired: datetime | None = None
        """The last tick fired anywhere, as this process last saw the ledger."""
        self.last_fired_here: datetime | None = None
        self._is_async = inspect.iscoroutinefunction(type(job).run)
        self._runner = AsyncHandlerRunner(self._call)
        self._started_up = False
        self._run: _Run | None = None
        self._handover: _Handover | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"cloudqueue:job:{spec.name}", daemon=True
        )

    @property
    def running(self) -> bool:
        return self._run is not None

    @property
    def stopping(self) -> bool:
        """Whether stop was requested: no further tick fires."""
        return self._stop.is_set()

    def start_up(self) -> None:
        """Run the job's ``startup`` on the loop its async runs use (``StartupFailedError``,
        logged, when it raises)."""
        start_up(self.job, self._runner.loop, job=self.spec.name)
        self._started_up = True

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Fire no further tick (the run in progress goes on)."""
        self._stop.set()

    def stop(self, timeout_s: float) -> bool:
        """Stop firing, wait for the run in progress up to ``timeout_s``; True if it finished.

        An ``async`` run still going is cancelled; then ``on_stop`` and ``shutdown`` are called
        (their errors logged, not raised)."""
        self.request_stop()
        deadline = self.clock.monotonic() + timeout_s
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - self.clock.monotonic()))
        finished = self.wait_for_run(max(0.0, deadline - self.clock.monotonic()))
        wind_down(
            self.job,
            self._runner.loop,
            started_up=self._started_up,
            on_stop_failed="job_on_stop_failed",
            job=self.spec.name,
        )
        self._runner.close()
        return finished

    def wait_for_run(self, timeout_s: float) -> bool:
        """Wait until no run is in progress; False if one still is after ``timeout_s``."""
        run = self._run
        if run is not None:
            run.thread.join(timeout_s)
        return self._run is None

    def begin(self) -> None:
        """Choose the first tick: the next one, or with ``missed = "run_once"`` the latest one
        missed while no process ran the job (fired at once)."""
        now = self.clock.now()
        self.next_tick = self.spec.schedule.next_after(now)
        try:
            self.last_fired = self.ledger.record(self.spec.name).last_tick
        except StorageError as error:
            log.warning("job_ledger_unreadable", job=self.spec.name, error=str(error))
            return
        due = self.spec.schedule.latest_at_or_before(now)
        if self.last_fired is None or self.last_fired >= due:
            return
        log.info(
            "job_missed_ticks",
            job=self.spec.name,
            last_fired=self.last_fired.isoformat(),
            missed=self.spec.missed,
        )
        if self.spec.missed == "run_once":
            self.next_tick = due

    def step(self) -> float:
        """Renew and watch a run in progress, fire the tick when due; seconds until the next
        thing to do."""
        if self.next_tick is None:
            self.begin()
            assert self.next_tick is not None  # begin() always sets it
        self._watch_run()
        now = self.clock.now()
        if now >= self.next_tick:
            # Late (a stalled thread, a long run), the latest due tick fires, not a stale one.
            self._handover = None  # a later tick is due: its claim decides
            self._fire_or_skip(max(self.next_tick, self.spec.schedule.latest_at_or_before(now)))
            self.next_tick = self.spec.schedule.next_after(now)
        elif self._handover is not None and now >= self._handover.lease_until:
            handover, self._handover = self._handover, None
            if self._run is None:
                self._claim(handover.tick, handover=True)
        return max(0.0, self._wait_s())

    def _wait_s(self) -> float:
        """Seconds until the next tick, handover claim, renewal or time limit."""
        assert self.next_tick is not None
        wait_s = (self.next_tick - self.clock.now()).total_seconds()
        if self._handover is not None:
            wait_s = min(wait_s, (self._handover.lease_until - self.clock.now()).total_seconds())
        run = self._run
        if run is not None:
            wait_s = min(wait_s, run.renew_at_s - self.clock.monotonic())
            if self.spec.time_limit_s and not run.reported_late and not self._is_async:
                late_s = run.started_s + self.spec.time_limit_s - self.clock.monotonic()
                wait_s = min(wait_s, late_s)
        return wait_s

    def _loop(self) -> None:
        self.begin()
        while not self._stop.is_set():
            try:
                wait_s = self.step()
            except Exception:
                log.exception("job_scheduler_error", job=self.spec.name)
                wait_s = self.spec.lease_s
            if self.sleeper.wait(self._stop, wait_s):
                return

    def _fire_or_skip(self, tick: datetime) -> None:
        if self._run is not None:
            self.runs["skipped"] += 1
            log.warning(
                "job_tick_skipped",
                job=self.spec.name,
                tick=tick.isoformat(),
                reason="still_running",
                running_tick=self._run.tick.isoformat(),
            )
            return
        self._claim(tick)

    def _claim(self, tick: datetime, *, handover: bool = False) -> None:
        """Claim ``tick`` and run it when the claim fires; remember a tick that a live lease of
        another holder refused, for a handover claim when that lease ends."""
        try:
            claim = self.ledger.claim(
                self.spec.name,
                tick,
                holder=self.holder,
                lease_s=self.spec.lease_s,
                handover=handover,
            )
        except StorageError as error:
            log.warning(
                "job_claim_failed", job=self.spec.name, tick=tick.isoformat(), error=str(error)
            )
            return
        self.last_fired = claim.record.last_tick
        if not claim.fired:
            log.debug(
                "job_tick_taken",
                job=self.spec.name,
                tick=tick.isoformat(),
                holder=claim.record.holder,
                handover=handover,
            )
            self._await_lease_end(tick, claim.record, handover)
            return
        self.last_fired_here = tick
        thread = threading.Thread(
            target=self._execute,
            args=(tick,),
            name=f"cloudqueue:job-run:{self.spec.name}",
            daemon=True,  # a sync run still going when the grace period ends does not hold exit
        )
        started_s = self.clock.monotonic()
        self._run = _Run(tick, started_s, thread, renew_at_s=started_s + self._renew_every_s)
        log.info(
            "job_fired",
            job=self.spec.name,
            tick=tick.isoformat(),
            holder=self.holder,
            handover=handover,
        )
        thread.start()

    def _await_lease_end(self, tick: datetime, record: JobRecord, handover: bool) -> None:
        """After a first refusal by another holder's live lease (not by the tick being fired
        already), claim the tick once more when that lease ends."""
        fired_already = record.last_tick is not None and record.last_tick >= tick
        if handover or fired_already or record.holder is None or record.lease_until is None:
            return
        self._handover = _Handover(tick, record.lease_until)

    @property
    def _renew_every_s(self) -> float:
        return self.spec.lease_s / RENEWALS_PER_LEASE

    def _watch_run(self) -> None:
        run = self._run
        if run is None:
            return
        now_s = self.clock.monotonic()
        if now_s >= run.renew_at_s:
            run.renew_at_s = now_s + self._renew_every_s
            self._renew(run)
        limit_s = self.spec.time_limit_s
        sync_late = limit_s and not self._is_async and now_s - run.started_s > limit_s
        if sync_late and not run.reported_late:
            run.reported_late = True
            self.runs["timed_out"] += 1
            log.error(
                "job_time_limit_exceeded",
                job=self.spec.name,
                tick=run.tick.isoformat(),
                time_limit_s=limit_s,
                cancelled=False,
            )

    def _renew(self, run: _Run) -> None:
        try:
            kept = self.ledger.renew(self.spec.name, holder=self.holder, lease_s=self.spec.lease_s)
        except StorageError as error:
            log.warning("job_lease_not_renewed", job=self.spec.name, error=str(error))
            return
        if not kept and not run.lease_lost and not run.finished:
            run.lease_lost = True
            # Its tick is recorded: no one fires it again, but a later tick may now start
            # elsewhere while this run goes on.
            log.error("job_lease_lost", job=self.spec.name, tick=run.tick.isoformat())

    def _call(self, tick: datetime) -> Awaitable[None] | None:
        result = self.job.run(tick)
        if inspect.isawaitable(result) and self.spec.time_limit_s:
            return asyncio.wait_for(result, self.spec.time_limit_s)
        return result

    def _execute(self, tick: datetime) -> None:
        run = self._run
        outcome = "succeeded"
        try:
            self._runner(tick)
        except TimeoutError:
            outcome = "timed_out"
            log.error(
                "job_time_limit_exceeded",
                job=self.spec.name,
                tick=tick.isoformat(),
                time_limit_s=self.spec.time_limit_s,
                cancelled=True,
            )
        except BaseException:
            outcome = "failed"
            log.exception("job_failed", job=self.spec.name, tick=tick.isoformat())
        finally:
            self._finish(tick, outcome, run)

    def _finish(self, tick: datetime, outcome: str, run: _Run | None) -> None:
        if run is not None:
            run.finished = True
        try:
            self.ledger.release(self.spec.name, holder=self.holder)
        except StorageError as error:
            log.warning("job_lease_not_released", job=self.spec.name, error=str(error))
        duration_s = 0.0 if run is None else self.clock.monotonic() - run.started_s
        if not (run is not None and run.reported_late):
            self.runs[outcome] += 1  # a sync run reported late was counted timed_out then
        log.info(
            "job_finished",
            job=self.spec.name,
            tick=tick.isoformat(),
            outcome=outcome,
            duration_s=round(duration_s, 3),
        )
        self._run = None

    def __repr__(self) -> str:
        return (
            f"JobScheduler({self.spec.name!r}, {self.spec.schedule}, "
            f"running={self.running}, runs={dict(self.runs)})"
        )
