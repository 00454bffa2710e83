"""Periodic jobs on an injected clock: each tick fires once across schedulers sharing a ledger,
missed ticks follow the job's policy, runs never overlap, and time limits are reported."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import ClassVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import InMemoryQueueStorage
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.tick_ledger import (
    InMemoryTickLedger,
    JobRecord,
    SqliteTickLedger,
    TickLedger,
    claimed,
)
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import CloudQueueSettings, WorkerHost
from cloudqueue.workers.api.job_schedules import CronSchedule, EverySchedule
from cloudqueue.workers.api.periodic_job import PeriodicJob, job_spec
from cloudqueue.workers.host.job_scheduler import JobScheduler
from tests.support.polling import eventually

START = datetime(2026, 3, 1, 12, 0, 0, 500_000, tzinfo=UTC)
"""Half a second past a whole minute, so the first two-second tick is 1.5 s away."""


class Recording(PeriodicJob):
    """Records each tick it runs; blocks while ``gate`` is cleared."""

    every_s = 2
    fired: ClassVar[list[datetime]]
    gate: ClassVar[threading.Event]

    def run(self, tick: datetime) -> None:
        type(self).fired.append(tick)
        type(self).gate.wait(10)


@pytest.fixture
def job() -> Iterator[type[Recording]]:
    """A fresh recording job class whose runs return at once until its gate is cleared."""

    class Job(Recording):
        fired: ClassVar[list[datetime]] = []
        gate: ClassVar[threading.Event] = threading.Event()

    Job.gate.set()
    yield Job
    Job.gate.set()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture(params=["memory", "sqlite"])
def ledger(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> Iterator[TickLedger]:
    """The in-memory ledger, or the SQLite one on the queues' file, both on the manual clock."""
    opened: TickLedger
    if request.param == "memory":
        opened = InMemoryTickLedger(clock=clock)
    else:
        opened = SqliteTickLedger(
            SqliteQueueStorage(tmp_path / "queues.db", clock=clock), clock=clock
        )
    yield opened
    opened.close()


def scheduler(
    job: type[PeriodicJob], ledger: TickLedger, clock: ManualClock, holder: str
) -> JobScheduler:
    made = JobScheduler(job(), job_spec(job), ledger, holder=holder, clock=clock)
    made.begin()
    return made


def run_for(clock: ManualClock, schedulers: list[JobScheduler], seconds: float) -> None:
    """Step every scheduler every 0.25 s of clock time, letting each run finish in between."""
    for _ in range(int(seconds / 0.25)):
        clock.advance(0.25)
        for each in schedulers:
            each.step()
            each.wait_for_run(5)


def test_two_schedulers_on_one_ledger_fire_each_tick_exactly_once(
    job: type[Recording], ledger: TickLedger, clock: ManualClock
) -> None:
    """Over 60 s at every 2 s, two processes' schedulers fire 30 ticks in all, none twice."""
    fleet = [scheduler(job, ledger, clock, holder) for holder in ("a", "b")]
    run_for(clock, fleet, 60)
    assert len(job.fired) == 30
    assert len(set(job.fired)) == 30
    assert all((later - earlier) == timedelta(seconds=2) for earlier, later in pairwise(job.fired))
    assert sum(each.runs["succeeded"] for each in fleet) == 30


def test_a_dead_holder_frees_the_job_and_the_next_tick_fires_elsewhere_within_one_interval(
    job: type[Recording], ledger: TickLedger, clock: ManualClock
) -> None:
    """A holder that stops mid-run (killed: no renewal, no release) holds the next tick up no
    longer than its lease, which is shorter than the interval."""
    dead, alive = scheduler(job, ledger, clock, "dead"), scheduler(job, ledger, clock, "alive")
    job.gate.clear()  # the dead one's run never returns
    clock.advance(1.5)
    dead.step()  # fires the first tick, then is never stepped again
    first = job.fired[-1]
    for _ in range(8):  # 2 s: the dead one's run neither returns nor releases its lease
        clock.advance(0.25)
        alive.step()
    assert job.fired == [first, first + timedelta(seconds=2)]
    assert alive.last_fired_here == first + timedelta(seconds=2)
    job.gate.set()


def killed_holder(job: type[Recording], ledger: TickLedger, clock: ManualClock) -> JobScheduler:
    """A holder of ``job``'s ticks whose run hangs until the test ends: once the test stops
    stepping it, it is a process killed with kill -9 (no renewal, no release)."""

    class Hangs(job):  # type: ignore[valid-type,misc]
        def run(self, tick: datetime) -> None:
            type(self).fired.append(tick)
            hung.wait(30)

    hung = threading.Event()
    holder = JobScheduler(Hangs(), job_spec(job), ledger, holder="killed", clock=clock)
    holder.begin()
    holder.hung = hung  # type: ignore[attr-defined]  # set at teardown, the thread ends
    return holder


def step_all(
    clock: ManualClock, schedulers: list[JobScheduler], seconds: float, by_s: float
) -> None:
    """Step the schedulers every ``by_s`` of clock time for ``seconds``, runs finishing between."""
    for _ in range(round(seconds / by_s)):
        clock.advance(by_s)
        for each in schedulers:
            each.step()
            if each.holder != "killed":
                each.wait_for_run(5)


@pytest.mark.parametrize(("killed_after_s", "lease_past_next_tick"), [(0.25, False), (1.25, True)])
def test_a_holder_killed_mid_run_loses_no_tick_even_after_a_renewal(
    job: type[Recording],
    ledger: TickLedger,
    clock: ManualClock,
    killed_after_s: float,
    lease_past_next_tick: bool,
) -> None:
    """Every 2 s, a holder killed mid-run before its first renewal or after one (which carried
    its lease past the next tick): the next tick fires on the other process -- on time, or when
    the dead lease ends -- and every later one too, none twice."""
    killed = killed_holder(job, ledger, clock)
    alive = scheduler(job, ledger, clock, "alive")
    try:
        step_all(clock, [killed, alive], 1.5 + killed_after_s, 0.25)  # fires at 1.5 s
        first = job.fired[0]
        lease_until = ledger.record(alive.spec.name).lease_until
        assert lease_until is not None
        assert (lease_until > first + timedelta(seconds=2)) is lease_past_next_tick
        step_all(clock, [alive], 8.0, 0.25)
        assert job.fired == [first + timedelta(seconds=2 * n) for n in range(5)]
        assert alive.runs["succeeded"] == 4
    finally:
        killed.hung.set()  # type: ignore[attr-defined]


@pytest.mark.parametrize("missed", ["skip", "run_once"])
def test_an_hourly_job_whose_holder_is_killed_late_in_a_long_run_loses_no_hour(
    job: type[Recording], ledger: TickLedger, clock: ManualClock, missed: str
) -> None:
    """Hourly (a 5-minute lease renewed every 100 s), the holder killed 59 minutes into a run:
    its last renewal holds the lease past the next hour, which fires elsewhere when the lease
    ends, whatever the missed-tick policy (a process was up when it was due); the hour after
    fires on time."""
    job.every_s = 3600
    job.missed = missed
    clock.advance(3600 - START.timestamp() % 3600 - 1)  # a second before a whole hour
    killed = killed_holder(job, ledger, clock)
    alive = scheduler(job, ledger, clock, "alive")
    try:
        step_all(clock, [killed, alive], 59 * 60 + 1, 1)
        hour = job.fired[0]
        lease_until = ledger.record(alive.spec.name).lease_until
        assert lease_until is not None
        assert lease_until > hour + timedelta(hours=1)
        with capture_logs() as logs:
            step_all(clock, [alive], 2 * 3600, 20)
        assert job.fired == [hour, hour + timedelta(hours=1), hour + timedelta(hours=2)]
        late = [e for e in logs if e["event"] == "job_fired"]
        assert [e["handover"] for e in late] == [True, False]
    finally:
        killed.hung.set()  # type: ignore[attr-defined]


def test_a_handover_claim_fires_only_a_lease_left_behind_by_another_holder() -> None:
    """Expired and unreleased (its holder died): fired. Released (the run ended), still live
    (the holder runs on), or the tick fired already: refused, so runs never overlap."""
    tick, now = START + timedelta(seconds=1.5), START + timedelta(seconds=3)
    earlier, gone, live = tick - timedelta(seconds=2), now - timedelta(seconds=0.1), now
    cases = {
        "left behind": (JobRecord(earlier, "dead", gone), True),
        "released": (JobRecord(earlier), False),
        "live": (JobRecord(earlier, "running", live + timedelta(seconds=1)), False),
        "fired already": (JobRecord(tick, "dead", gone), False),
    }
    fired = {
        name: claimed(record, tick, "me", 1.5, now, handover=True).fired
        for name, (record, _) in cases.items()
    }
    assert fired == {name: expected for name, (_, expected) in cases.items()}


def test_a_holder_that_lost_its_lease_mid_run_never_sees_its_tick_fired_again(
    job: type[Recording], ledger: TickLedger, clock: ManualClock
) -> None:
    """The tick is recorded with the claim: after the lease passed on, only later ticks fire,
    and the slow holder's renewal says so (logged at error)."""
    slow, other = scheduler(job, ledger, clock, "slow"), scheduler(job, ledger, clock, "other")
    job.gate.clear()
    clock.advance(1.5)
    slow.step()
    clock.advance(4.0)  # the slow holder's thread stalls: no renewal within its 1.5 s lease
    other.step()  # fires the tick due now
    with capture_logs() as logs:
        slow.step()  # renews too late
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["job_lease_lost"]
    job.gate.set()
    other.wait_for_run(5)
    slow.wait_for_run(5)
    assert len(job.fired) == len(set(job.fired)) == 2
    assert ledger.claim(slow.spec.name, job.fired[0], holder="third", lease_s=1).fired is False


def test_a_run_longer_than_its_interval_is_not_overlapped(
    job: type[Recording], ledger: TickLedger, clock: ManualClock
) -> None:
    """Ticks that come while a run goes on are skipped (and counted), in this process and in
    another one sharing the ledger; the next tick after the run fires normally."""
    here, there = scheduler(job, ledger, clock, "here"), scheduler(job, ledger, clock, "there")
    job.gate.clear()
    for _ in range(4 * 6):  # 6 s: the run started at 1.5 s goes on past two more ticks
        clock.advance(0.25)
        here.step()
        there.step()
    assert len(job.fired) == 1
    assert here.runs["skipped"] == 2
    job.gate.set()
    here.wait_for_run(5)
    run_for(clock, [here, there], 2.0)
    assert len(job.fired) == 2
    assert job.fired[1] - job.fired[0] == timedelta(seconds=6)


@pytest.mark.parametrize(("missed", "fires_at_once"), [("skip", False), ("run_once", True)])
def test_missed_ticks_follow_the_jobs_policy(
    job: type[Recording], ledger: TickLedger, clock: ManualClock, missed: str, fires_at_once: bool
) -> None:
    """After everything was down for an hour, "skip" waits for the next tick and "run_once"
    fires the latest missed tick at once -- once, however many processes start."""

    class Policy(job):  # type: ignore[valid-type,misc]
        pass

    Policy.missed = missed
    name = job_spec(Policy).name
    ledger.claim(name, START - timedelta(hours=1), holder="before", lease_s=1)
    ledger.release(name, holder="before")
    fleet = [scheduler(Policy, ledger, clock, holder) for holder in ("a", "b")]
    for each in fleet:
        each.step()
        each.wait_for_run(5)
    latest_missed = EverySchedule(2).latest_at_or_before(START)
    assert job.fired == ([latest_missed] if fires_at_once else [])
    run_for(clock, fleet, 2.0)
    assert job.fired[-1] == latest_missed + timedelta(seconds=2)


def test_a_first_start_fires_nothing_until_the_first_tick(
    job: type[Recording], ledger: TickLedger, clock: ManualClock
) -> None:
    """A job the ledger has never seen has missed nothing, whatever its policy."""
    job.missed = "run_once"
    first = scheduler(job, ledger, clock, "a")
    first.step()
    assert job.fired == []
    assert first.next_tick == START + timedelta(seconds=1.5)


def test_a_sync_job_past_its_time_limit_is_reported_once_and_the_next_tick_waits(
    job: type[Recording], ledger: TickLedger, clock: ManualClock
) -> None:
    """Logged at error and counted timed_out when the limit passes; ticks meanwhile skipped."""
    job.time_limit_s = 1
    job.every_s = 10
    one = scheduler(job, ledger, clock, "a")
    job.gate.clear()
    with capture_logs() as logs:
        run_until = 12.0
        while clock.monotonic() < 1_000 + run_until:
            clock.advance(0.25)
            one.step()
    late = [e for e in logs if e["event"] == "job_time_limit_exceeded"]
    assert [(e["log_level"], e["cancelled"]) for e in late] == [("error", False)]
    assert one.runs == {"timed_out": 1}
    job.gate.set()
    one.wait_for_run(5)
    assert one.runs == {"timed_out": 1}  # counted once, not again when it ends


def test_an_async_job_past_its_time_limit_is_cancelled(
    ledger: TickLedger, clock: ManualClock
) -> None:
    """The coroutine is cancelled at its limit, logged at error and counted timed_out."""
    cancelled = threading.Event()

    class Slow(PeriodicJob):
        every_s = 60
        time_limit_s = 0.05

        async def run(self, tick: datetime) -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    one = scheduler(Slow, ledger, clock, "a")
    clock.advance(60)
    with capture_logs() as logs:
        one.step()
        assert one.wait_for_run(10)
    assert cancelled.is_set()
    assert one.runs == {"timed_out": 1}
    assert [e["cancelled"] for e in logs if e["event"] == "job_time_limit_exceeded"] == [True]
    one.stop(1)


def test_a_failing_run_is_logged_counted_and_the_next_tick_fires(
    ledger: TickLedger, clock: ManualClock
) -> None:
    """An exception is a failed run, not a dead scheduler."""

    class Failing(PeriodicJob):
        every_s = 1

        def run(self, tick: datetime) -> None:
            raise RuntimeError("boom")

    one = scheduler(Failing, ledger, clock, "a")
    with capture_logs() as logs:
        run_for(clock, [one], 3.0)
    assert one.runs == {"failed": 3}
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["job_failed"] * 3


@pytest.mark.parametrize(
    ("cron", "field"),
    [
        ("61 * * * *", "field 1 (minute) '61'"),
        ("* 24 * * *", "field 2 (hour) '24'"),
        ("* * 0 * *", "field 3 (day-of-month) '0'"),
        ("* * * 13 *", "field 4 (month) '13'"),
        ("* * * * 8", "field 5 (day-of-week) '8'"),
        ("* * *", "has 3 field(s); it needs 5"),
        ("*/5 * * * * *", "has 6 field(s); it needs 5"),
    ],
)
def test_an_invalid_cron_expression_names_the_field(cron: str, field: str) -> None:
    """The error says which field is wrong and what it holds."""

    class Bad(PeriodicJob):
        pass

    Bad.cron = cron
    with pytest.raises(ConfigurationError, match=r"Bad: cron .*" + re.escape(field)):
        job_spec(Bad)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({}, "must set exactly one of every_s"),
        ({"every_s": 5, "cron": "* * * * *"}, "must set exactly one of every_s"),
        ({"every_s": 0}, "every_s must be a positive number of seconds, not 0"),
        ({"every_s": -3}, "every_s must be a positive number of seconds, not -3"),
        ({"every_s": "5"}, "every_s must be a positive number of seconds, not '5'"),
        ({"every_s": 5, "missed": "all"}, "missed must be 'skip' or 'run_once', not 'all'"),
        ({"every_s": 5, "time_limit_s": -1}, "time_limit_s (0 for none) must be a positive"),
    ],
)
def test_bad_job_attributes_are_refused_with_one_line(
    attributes: dict[str, object], message: str
) -> None:
    """Both or neither schedule, a non-positive interval, an unknown policy: a clear error."""
    bad = type("Bad", (PeriodicJob,), dict(attributes))
    with pytest.raises(ConfigurationError) as raised:
        job_spec(bad)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_interval_ticks_are_the_same_in_every_process() -> None:
    """Ticks are multiples of the interval since the epoch, whatever the moment asked from."""
    schedule = EverySchedule(2)
    assert schedule.next_after(START) == START.replace(microsecond=0) + timedelta(seconds=2)
    assert schedule.latest_at_or_before(START) == START.replace(microsecond=0)
    assert schedule.next_after(START.replace(microsecond=0)) == START.replace(
        microsecond=0
    ) + timedelta(seconds=2)


def test_cron_ticks_and_their_shortest_gap() -> None:
    """A weekday cron ticks at 09:00 UTC; its lease is sized from its shortest gap, a day."""
    schedule = CronSchedule.parsed("0 9 * * 1-5")  # 2026-03-01 is a Sunday
    assert schedule.next_after(START) == datetime(2026, 3, 2, 9, tzinfo=UTC)
    assert schedule.latest_at_or_before(datetime(2026, 3, 2, 9, tzinfo=UTC)) == datetime(
        2026, 3, 2, 9, tzinfo=UTC
    )
    assert schedule.latest_at_or_before(START) == datetime(2026, 2, 27, 9, tzinfo=UTC)
    assert schedule.interval_s == 86_400


def test_the_lease_is_shorter_than_the_interval_and_bounded() -> None:
    """3/4 of the interval, at least 1 s and at most 5 min."""

    def lease(every_s: float) -> float:
        return job_spec(
            type("J", (PeriodicJob,), {"every_s": every_s, "run": Recording.run})
        ).lease_s

    assert (lease(0.5), lease(2), lease(60), lease(3600)) == (1.0, 1.5, 45.0, 300.0)


def test_a_host_runs_its_jobs_and_lets_a_run_in_progress_finish_at_stop() -> None:
    """WorkerHost hosts jobs beside (here: without) queue workers; stop stops firing, waits for
    the run in progress within the grace period, then calls on_stop."""
    started, release, stopped = threading.Event(), threading.Event(), threading.Event()

    class Hosted(PeriodicJob):
        every_s = 0.2

        def run(self, tick: datetime) -> None:
            started.set()
            release.wait(10)

        def on_stop(self) -> None:
            stopped.set()

    ledger = InMemoryTickLedger()
    host = WorkerHost(
        [],
        CloudQueueSettings(shutdown_grace_s=10),
        storage=InMemoryQueueStorage(),
        jobs=[Hosted],
        tick_ledger=ledger,
    )
    host.start()
    assert started.wait(10)
    drained: list[bool] = []
    stopping = threading.Thread(target=lambda: drained.append(host.stop()))
    stopping.start()
    eventually(lambda: host.jobs.schedulers[0].stopping, timeout_s=5)
    assert drained == []  # the run goes on
    assert not stopped.is_set()
    release.set()
    stopping.join(10)
    assert drained == [True]
    assert stopped.is_set()
    assert ledger.record(job_spec(Hosted).name).holder is None  # the lease was released
