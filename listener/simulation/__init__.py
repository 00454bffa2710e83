"""What will it cost? A workload simulator that runs cloudqueue's real policies in virtual time.

::

    from cloudqueue.listener.simulation import bursts, simulate, standard_contenders
    results = simulate(bursts(500, 1800.0, 86_400.0), standard_contenders())

Modules: ``workload`` (when messages arrive), ``queue`` (a queue with Azure's semantics that counts
billed calls), ``policies`` (the contenders), ``simulator`` (the dequeue loop and the real scaler
in virtual time, with its parts ``timeline``, ``pool``, ``idle_waits``, ``settlement``,
``storage_line`` and ``stand_ins``), ``report`` (figures), ``cost`` (the price arithmetic),
``table`` and ``plot`` (output), ``presets`` (named scenarios), ``profile`` (recorded workloads)
``tuning`` (the cheapest settings for a goal: ``cloudqueue tune``) and ``idle_queues`` (the
idle cost of a worker on several queues, with the real listener in virtual time).

Importing this package imports none of them: each name's module is imported on the name's first
use (``cloudqueue.listener.exports``); the settings read one price constant from ``cost``.
"""

from typing import TYPE_CHECKING

from cloudqueue.listener.exports import lazy_exports

if TYPE_CHECKING:
    from cloudqueue.listener.simulation.compare import simulate
    from cloudqueue.listener.simulation.cost import (
        DEFAULT_PRICE_PER_10K_USD,
        cost_usd,
        monthly_cost_usd,
    )
    from cloudqueue.listener.simulation.goals import Goals
    from cloudqueue.listener.simulation.policies import (
        PolicySpec,
        cloudqueue_defaults,
        cloudqueue_push,
        fixed_pool,
        functions_like,
        naive_poller,
        standard_contenders,
    )
    from cloudqueue.listener.simulation.presets import PRESETS, Scenario
    from cloudqueue.listener.simulation.profile import (
        ProfileRecorder,
        RecordedProfile,
        load_profile,
        read_profile,
    )
    from cloudqueue.listener.simulation.report import PolicyResult, ServiceModel
    from cloudqueue.listener.simulation.table import format_table, table_notes
    from cloudqueue.listener.simulation.tuning import Tuning, tune
    from cloudqueue.listener.simulation.workload import (
        Workload,
        bursts,
        constant,
        day_profile,
        idle,
        read_day_profile,
    )

__all__ = [
    "DEFAULT_PRICE_PER_10K_USD",
    "PRESETS",
    "Goals",
    "PolicyResult",
    "PolicySpec",
    "ProfileRecorder",
    "RecordedProfile",
    "Scenario",
    "ServiceModel",
    "Tuning",
    "Workload",
    "bursts",
    "cloudqueue_defaults",
    "cloudqueue_push",
    "constant",
    "cost_usd",
    "day_profile",
    "fixed_pool",
    "format_table",
    "functions_like",
    "idle",
    "load_profile",
    "monthly_cost_usd",
    "naive_poller",
    "read_day_profile",
    "read_profile",
    "simulate",
    "standard_contenders",
    "table_notes",
    "tune",
]

if not TYPE_CHECKING:  # mypy reads the imports above; a missing name stays an error
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cloudqueue.listener.simulation.compare": ("simulate",),
            "cloudqueue.listener.simulation.cost": (
                "DEFAULT_PRICE_PER_10K_USD",
                "cost_usd",
                "monthly_cost_usd",
            ),
            "cloudqueue.listener.simulation.goals": ("Goals",),
            "cloudqueue.listener.simulation.policies": (
                "PolicySpec",
                "cloudqueue_defaults",
                "cloudqueue_push",
                "fixed_pool",
                "functions_like",
                "naive_poller",
                "standard_contenders",
            ),
            "cloudqueue.listener.simulation.presets": ("PRESETS", "Scenario"),
            "cloudqueue.listener.simulation.profile": (
                "ProfileRecorder",
                "RecordedProfile",
                "load_profile",
                "read_profile",
            ),
            "cloudqueue.listener.simulation.report": ("PolicyResult", "ServiceModel"),
            "cloudqueue.listener.simulation.table": ("format_table", "table_notes"),
            "cloudqueue.listener.simulation.tuning": ("Tuning", "tune"),
            "cloudqueue.listener.simulation.workload": (
                "Workload",
                "bursts",
                "constant",
                "day_profile",
                "idle",
                "read_day_profile",
            ),
        },
    )
