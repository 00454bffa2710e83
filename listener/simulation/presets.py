"""Named scenarios: the design's cost table, and a bursty day.

``design-table`` is the design document's arithmetic: during a day's 22 idle hours one thread
polling once a second makes 79,200 transactions (the busy hours' transactions do real work and are
left out, as the design does), so the stretch counts as the whole day and storage calls take no
time.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.simulation.policies import (
    PolicySpec,
    cloudqueue_defaults,
    cloudqueue_push,
    naive_poller,
    standard_contenders,
)
from cloudqueue.listener.simulation.report import ServiceModel
from cloudqueue.listener.simulation.workload import Workload, bursts, idle

IDLE_HOURS = 22
HOUR_S = 3_600.0


@dataclass(frozen=True, slots=True)
class Scenario:
    workload: Workload
    policies: list[PolicySpec]
    service: ServiceModel


def design_table() -> Scenario:
    """22 idle hours as the day: 1 and 200 naive pollers, cloudqueue's defaults, push mode."""
    return Scenario(
        workload=idle(IDLE_HOURS * HOUR_S).as_day(),
        policies=[
            naive_poller(1, 1.0),
            naive_poller(200, 1.0),
            cloudqueue_defaults(),
            cloudqueue_push(),
        ],
        service=ServiceModel(request_latency_s=0.0),
    )


def bursty_day() -> Scenario:
    """24 h with a burst of 500 messages every 30 minutes, the five standard contenders."""
    return Scenario(
        workload=bursts(500, 1_800.0, 24 * HOUR_S),
        policies=standard_contenders(),
        service=ServiceModel(),
    )


PRESETS = {"design-table": design_table, "bursty-day": bursty_day}
