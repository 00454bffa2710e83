"""``cloudqueue config show``: the effective settings, each with the source of its value."""

from __future__ import annotations

import json

import click

from cloudqueue.workers.cli.common import (
    current_settings,
    import_from_working_directory,
    parse_overrides,
    worker_settings,
)
from cloudqueue.workers.cli.config_option import config_file
from cloudqueue.workers.settings.sources import SettingValue, WorkerOverrides, explain_settings


@click.group("config")
def config_group() -> None:
    """Inspect the settings a worker would run with."""


@config_group.command("show")
@click.argument("target", required=False, metavar="[MODULE:CLASS]")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a setting as `cloudqueue run --set` does, e.g. --set scaling.max_threads=8.",
)
def show(target: str | None, as_json: bool, assignments: tuple[str, ...]) -> None:
    """Print every effective setting and where its value came from.

    Sources: default, toml:PATH, .env, env:VARIABLE, override (--set), or "settings of
    MODULE:CLASS" when a worker class is given: then the settings that worker runs with.
    Only secrets are masked (an account key, a SAS, a password in a URL). Nothing the
    settings name is imported (a custom scaling rule is shown by name; `run` imports it); only
    MODULE:CLASS, when given, is imported, from the working folder as `run` does.

    \b
    Examples:
      cloudqueue config show
      cloudqueue config show examples.billing:InvoiceWorker
      CLOUDQUEUE_SCALING__MAX_THREADS=8 cloudqueue config show
      cloudqueue config show --config config/profiles/steps.toml --json
    """
    overrides = parse_overrides(assignments)
    settings = current_settings(overrides)  # invalid settings fail here: exit code 2
    worker = None
    if target is not None:
        # Imported here: the worker API (and the consumer under it) only when a worker is named.
        from cloudqueue.workers.api.worker import load_worker

        import_from_working_directory()  # the worker named on the command line, as `run` finds it
        worker_type = load_worker(target)
        worker_settings(settings, target, worker_type)  # exit code 2 naming worker and field
        worker = WorkerOverrides(target, worker_type.settings)
    values = explain_settings(config_file(), worker=worker, **overrides)
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
