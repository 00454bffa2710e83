"""An OpenTelemetry SDK for tests: spans recorded in memory only while a test asks for them.

The global tracer provider can be set once per process, so it is set on first use and samples
nothing until a test switches it on: the rest of the suite keeps paying only for no-op spans.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes


class _Switch(Sampler):
    """Samples every span while on, none while off."""

    on = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        sampler = ALWAYS_ON if self.on else ALWAYS_OFF
        return sampler.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"test switch ({'on' if self.on else 'off'})"


@functools.cache
def _installed() -> tuple[_Switch, InMemorySpanExporter]:
    switch = _Switch()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=switch)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return switch, exporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The finished spans of this test (recorded by the SDK's in-memory exporter)."""
    switch, exporter = _installed()
    exporter.clear()
    switch.on = True
    try:
        yield exporter
    finally:
        switch.on = False
        exporter.clear()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``."""
    return [span for span in exporter.get_finished_spans() if span.name == name]
