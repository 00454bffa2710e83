"""Durations on the command line: ``30s``, ``5m``, ``1h``, ``7d`` or plain seconds.

Azure takes delays and time-to-live in whole seconds, so a duration that is not a whole number of
seconds is refused rather than rounded. A duration that cannot be read is bad input: one line on
stderr naming the option, exit code 2.
"""

from __future__ import annotations

import re

import click

from cloudqueue.listener.stores.storage import NEVER_EXPIRES
from cloudqueue.workers.cli.common import BadInput

UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}

_DURATION = re.compile(r"^(?P<amount>\d+)(?P<unit>[smhd]?)$")


def parse_duration_s(text: str) -> int:
    """``"90"``, ``"90s"``, ``"5m"``, ``"1h"``, ``"7d"`` as seconds; ValueError otherwise."""
    match = _DURATION.match(text.strip().lower())
    if match is None and text.strip().startswith("-"):
        raise ValueError(f"{text!r} is not a duration: a duration cannot be negative")
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: use a whole number with s, m, h or d (30s, 5m, 1h, 7d)"
        )
    return int(match["amount"]) * UNIT_S[match["unit"] or "s"]


_SECONDS = re.compile(r"^(?P<amount>\d+(\.\d+)?)(?P<unit>ms|[smhd]?)$")


def parse_seconds(text: str) -> float:
    """A goal's duration, fractions allowed: ``"500ms"``, ``"1.5s"``, ``"2"``, ``"10m"``."""
    match = _SECONDS.match(text.strip().lower())
    if match is None or float(match["amount"]) <= 0:
        raise ValueError(
            f"{text!r} is not a positive duration: use a number with ms, s, m, h or d "
            "(500ms, 2s, 10m)"
        )
    unit = match["unit"] or "s"
    return float(match["amount"]) * (0.001 if unit == "ms" else UNIT_S[unit])


class Seconds(click.ParamType[float]):
    """A click option type for ``parse_seconds``."""

    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_seconds(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


class Duration(click.ParamType[int]):
    """A click option type for ``parse_duration_s``; ``allow_never`` also takes never or -1."""

    name = "duration"

    def __init__(self, *, allow_never: bool = False) -> None:
        self.allow_never = allow_never

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        text = str(value)
        if self.allow_never and text.strip().lower() in ("never", "-1"):
            return NEVER_EXPIRES
        try:
            return parse_duration_s(text)
        except ValueError as error:
            option = param.opts[0] if param is not None and param.opts else "duration"
            raise BadInput(f"{option}: {error}") from None
