"""One endpoint for all children of ``cloudqueue run --processes N``.

Each child writes its metric values to files in one directory (prometheus_client's multiprocess
mode, chosen by ``PROMETHEUS_MULTIPROC_DIR`` in the child's environment before it imports the
library); the supervisor's endpoint reads them all with ``MultiProcessCollector``. Counters keep
what a dead child counted; its ``live*`` gauges are dropped when the supervisor sees it exit.

The children's probes arrive the same way: ``cloudqueue_live`` and ``cloudqueue_ready`` are the
minimum over live children, so one red child turns the supervisor's probe red. A child reports
them every second, so the supervisor's probes lag a child's by about that much.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from cloudqueue.workers.observability.health import ProbeResult
from cloudqueue.workers.observability.server import ObservabilityServer, observability_app
from cloudqueue.workers.settings import ObservabilitySettings

MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


class SupervisorProbes:
    """The supervisor's probes: its own draining flag and its children's reported gauges."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.draining = False

    def _children(self, name: str) -> float | None:
        """The minimum over live children of a probe gauge; None before any child reported."""
        for family in self.registry.collect():
            if family.name == name:
                values = [sample.value for sample in family.samples]
                return min(values) if values else None
        return None

    def liveness(self) -> ProbeResult:
        if self._children("cloudqueue_live") == 0:
            return ProbeResult(False, ("a child's /healthz is red",))
        return ProbeResult(True)

    def readiness(self) -> ProbeResult:
        reasons: list[str] = []
        if self.draining:
            reasons.append("draining")
        ready = self._children("cloudqueue_ready")
        if ready is None:
            reasons.append("starting")
        elif ready == 0:
            reasons.append("a child's /readyz is red")
        return ProbeResult(not reasons, tuple(reasons))


class SupervisorEndpoint:
    """The supervisor's metrics directory and the endpoint that serves every child from it."""

    def __init__(self, settings: ObservabilitySettings, port: int) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="cloudqueue-metrics-"))
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.directory))  # type: ignore[no-untyped-call]
        self.probes = SupervisorProbes(registry)
        self.server = ObservabilityServer(
            observability_app(registry, self.probes), host=settings.metrics_host, port=port
        )

    @property
    def child_environment(self) -> dict[str, str]:
        """What each child's environment needs for multiprocess mode."""
        return {MULTIPROC_VARIABLE: str(self.directory)}

    def start(self) -> None:
        self.server.start()

    def child_exited(self, pid: int) -> None:
        mark_process_dead(pid, str(self.directory))  # type: ignore[no-untyped-call]

    def draining(self) -> None:
        self.probes.draining = True

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.directory, ignore_errors=True)
