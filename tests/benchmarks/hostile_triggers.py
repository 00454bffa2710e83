"""The trigger flood of ``bench_hostile``: storage calls of forged triggers on one idle listener.

The scenario of ``tests/listener/scaling/test_push.py`` (in-memory store, ``MeteredStorage``
counting every call, a listener idling down to zero threads): 1,000 triggers at once on a virtual
clock, the wake at the end of the back-off floor let through by hand, several runs; and triggers
at the rate issue 26 reported for 10 s of real time. Each beside the same listener with its floor
set to 0, which wakes on every trigger as the code before the debounce did.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from cloudqueue.listener.push.triggers import InProcessTriggerChannel, WorkDetected
from cloudqueue.listener.scaling.scaler import ScalingPolicy, idle_delay_floor_s
from cloudqueue.listener.testing import ManualClock
from tests.listener.scaling.test_push import ACCOUNT, Scenario, TickSleeper
from tests.support.polling import eventually

QUEUE = "orders"
BURST = 1_000
BURST_RUNS = 5
FLOOD_TRIGGERS, FLOOD_S = 1_811, 10.0
"""Issue 26's report: 1,811 triggers in 10 s made 5,113 storage calls before the debounce."""


def burst(*, debounce: bool) -> dict[str, int]:
    """Storage calls of 1,000 triggers at once on an idle listener, and of the wake at the end
    of the floor (none without the debounce: every trigger woke the listener at once)."""
    channel, ticks = InProcessTriggerChannel(), TickSleeper()
    scenario = Scenario(QUEUE, channel, clock=ManualClock(), sleeper=ticks)
    try:
        if not debounce:
            scenario.waker.floor_s = 0.0
        scenario.idle_at_zero()
        before = scenario.storage.transactions
        for _ in range(BURST):
            channel.publish(WorkDetected(ACCOUNT, QUEUE))
        eventually(lambda: scenario.listener.threads_alive == 0)
        during, woken = scenario.storage.transactions - before, scenario.waker.wakes
        if debounce:
            ticks.tick()  # the floor has passed
            eventually(lambda: scenario.waker.wakes == 2)
            eventually(lambda: scenario.listener.threads_alive == 0)
        after = scenario.storage.transactions - before - during
        return {
            "calls_during": during,
            "calls_after_floor": after,
            "wakes_during": woken,
            "wakes": scenario.waker.wakes,
        }
    finally:
        scenario.close()


def flood(*, debounce: bool) -> dict[str, Any]:
    """Storage calls and wakes of triggers sent at the issue's rate for 10 s of real time."""
    channel, paced = InProcessTriggerChannel(), threading.Event()
    scenario = Scenario(QUEUE, channel)
    try:
        if not debounce:
            scenario.waker.floor_s = 0.0
        scenario.idle_at_zero()
        before, sent, started = scenario.storage.transactions, 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < FLOOD_S:
            for _ in range(min(FLOOD_TRIGGERS, int(elapsed * FLOOD_TRIGGERS / FLOOD_S) + 1) - sent):
                channel.publish(WorkDetected(ACCOUNT, QUEUE))
                sent += 1
            paced.wait(0.002)  # pacing the sender, not waiting for a condition
        sending_s = time.perf_counter() - started
        eventually(lambda: scenario.listener.threads_alive == 0)  # the last wake's calls too
        return {
            "triggers": sent,
            "seconds": round(sending_s, 2),
            "calls": scenario.storage.transactions - before,
            "wakes": scenario.waker.wakes,
        }
    finally:
        scenario.close()


def trigger_costs() -> dict[str, Any]:
    return {
        "floor_s": idle_delay_floor_s(ScalingPolicy()),
        "burst_triggers": BURST,
        "burst": [burst(debounce=True) for _ in range(BURST_RUNS)],
        "burst_without_debounce": [burst(debounce=False) for _ in range(BURST_RUNS)],
        "flood": flood(debounce=True),
        "flood_without_debounce": flood(debounce=False),
    }


def render_triggers(costs: dict[str, Any]) -> str:
    """The docs table of ``trigger_costs()``."""
    floor_s, flood_on, flood_off = costs["floor_s"], costs["flood"], costs["flood_without_debounce"]
    during = _spread([run["calls_during"] for run in costs["burst"]])
    after = _spread([run["calls_after_floor"] for run in costs["burst"]])
    off = _spread([run["calls_during"] for run in costs["burst_without_debounce"]])
    wakes = _spread([run["wakes_during"] for run in costs["burst"]])
    wakes += ", then " + _spread([run["wakes"] - run["wakes_during"] for run in costs["burst"]])
    rate = flood_on["wakes"] / flood_on["seconds"]
    return "\n".join(
        [
            "| triggers for one idle listener | storage calls, debounced | wakes, debounced "
            "| storage calls, floor 0 (no debounce) |",
            "|---|---|---|---|",
            f"| {costs['burst_triggers']:,} at once ({len(costs['burst'])} runs) "
            f"| {during}, then {after} at the end of the floor | {wakes} | {off} |",
            f"| {flood_on['triggers']:,} over {flood_on['seconds']:.0f} s "
            f"| {flood_on['calls']:,} | {flood_on['wakes']:,} ({rate:.1f} a second) "
            f"| {flood_off['calls']:,} |",
            "",
            f"The back-off floor at the defaults: {floor_s:g} s, so about "
            f"{1 / floor_s:g} wakes a second.",
        ]
    )


def _spread(values: list[int]) -> str:
    """``3`` when every run gave 3, else the median and the range."""
    low, high = min(values), max(values)
    if low == high:
        return f"{low:,}"
    return f"{statistics.median(values):,.0f} ({low:,} to {high:,})"
