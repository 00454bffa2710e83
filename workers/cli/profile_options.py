"""What `simulate`, `tune` and `replay` share: the handler and storage times they assume, and
the service model a profile gives them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cloudqueue.listener.simulation import ServiceModel
from cloudqueue.listener.simulation.profile import LoadedProfile

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_SERVICE = ServiceModel()
"""The simulator's own defaults are the commands': one place says what a handler takes."""


def service_s_option(help_text: str) -> Callable[[F], F]:
    """``--service-s``: the handler time per message the command assumes."""
    return click.option(
        "--service-s",
        type=click.FloatRange(min=0),
        default=DEFAULT_SERVICE.service_s,
        show_default=True,
        help=help_text,
    )


CSV_SERVICE_S = service_s_option(
    "Handler time per message, for a CSV profile (a recorded one carries its own)."
)

request_latency_option = click.option(
    "--request-latency-s",
    type=click.FloatRange(min=0),
    default=DEFAULT_SERVICE.request_latency_s,
    show_default=True,
    help="Time each storage call takes to answer.",
)


def service_for(
    loaded: LoadedProfile, service_s: float, *, request_latency_s: float
) -> ServiceModel:
    """The handling times a recorded profile carries, else ``service_s`` for every message."""
    recorded = (
        None
        if loaded.recorded is None
        else loaded.recorded.service(request_latency_s=request_latency_s)
    )
    return recorded or ServiceModel(service_s=service_s, request_latency_s=request_latency_s)
