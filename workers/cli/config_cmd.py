"""``cloudqueue config show``: the effective settings, each with the source of its value."""

from __future__ import annotations

import json
from pathlib import Path

import click

from workers.cli.common import current_settings, parse_overrides
from workers.settings_sources import SettingValue, explain_settings


@click.group("config")
def config_group() -> None:
    """Inspect the settings a worker would run with."""


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a setting as `cloudqueue run --set` does, e.g. --set scaling.max_threads=8.",
)
def show(as_json: bool, assignments: tuple[str, ...]) -> None:
    """Print every effective setting and where its value came from.

    Sources: default, toml:PATH, .env, env:VARIABLE or override (--set). Secrets are masked.

    \b
    Examples:
      cloudqueue config show
      CLOUDQUEUE_SCALING__MAX_THREADS=8 cloudqueue config show
      cloudqueue --config config/profiles/steps.toml config show --json
    """
    overrides = parse_overrides(assignments)
    current_settings(overrides)  # invalid settings fail here: exit code 2, naming the field
    config_file: Path | None = click.get_current_context().find_root().params.get("config")
    values = explain_settings(config_file, **overrides)
    if as_json:
        report = {item.key: {"value": item.value, "source": item.source} for item in values}
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo("\n".join(_lines(values)))


def _lines(values: list[SettingValue]) -> list[str]:
    settings = [f"{item.key} = {item.value!r}" for item in values]
    width = max(map(len, settings))
    return [
        f"{setting:<{width}}  # {item.source}"
        for setting, item in zip(settings, values, strict=True)
    ]
