"""The metrics reference: every family a worker exports, read from its Prometheus registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.metrics import MetricWrapperBase

from cloudqueue.workers.observability.metrics import WorkerMetrics
from docsite.cells import cell


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric family as a scraper sees it."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str


def metrics() -> list[Metric]:
    """The families of a fresh ``WorkerMetrics``, in the order it registers them."""
    worker_metrics = WorkerMetrics()
    families = {family.name: family for family in worker_metrics.registry.collect()}
    found = []
    for wrapper in vars(worker_metrics).values():
        if not isinstance(wrapper, MetricWrapperBase):
            continue
        family = families[wrapper._name]  # the name as exposed: counters gain _total
        exposed = f"{family.name}_total" if family.type == "counter" else family.name
        found.append(Metric(exposed, family.type, tuple(wrapper._labelnames), family.documentation))
    return found


def render() -> str:
    rows = ["| metric | type | labels | what it is |", "|---|---|---|---|"]
    for metric in metrics():
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "—"
        rows.append(f"| `{metric.name}` | {metric.type} | {labels} | {cell(metric.help)} |")
    return "\n".join(rows) + "\n"
