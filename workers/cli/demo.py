"""``cloudqueue demo``: the quick-start demo, as ``python -m examples.demo`` runs it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

import click

from cloudqueue.workers.cli.common import import_from_working_directory

DEMO_MODULE = "examples.demo"


@click.command()
def demo() -> None:
    """Drain a burst of invoices with an auto-scaling worker on the embedded store.

    Watch the idle poller find work, the pool scale up, the burst drain, a malformed message go to
    invoices-poison and the surplus threads stop. Needs the repository's examples/ folder: run it
    from a checkout of cloudqueue.

    \b
    Examples:
      cloudqueue demo
      CLOUDQUEUE_CONNECTION_STRING=memory:// cloudqueue demo
    """
    sys.exit(_demo_main()())


def _demo_main() -> Callable[[], int]:
    """``examples.demo.main``, found as ``python -m`` finds it: from the working directory too."""
    import_from_working_directory()
    try:
        module = importlib.import_module(DEMO_MODULE)
    except ModuleNotFoundError as error:
        if error.name not in ("examples", DEMO_MODULE):
            raise  # the demo itself is broken: show the real problem
        raise click.ClickException(
            f"the demo needs the {DEMO_MODULE!r} module, which ships with the cloudqueue "
            "repository, not with the installed package: run `cloudqueue demo` from a checkout "
            "(git clone, then cd into it)"
        ) from error
    main: Callable[[], int] = module.main
    return main
