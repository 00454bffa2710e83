"""Replacing a page's markers with generated Markdown (what the build hook runs on every page).

``<!-- generated:NAME -->`` becomes ``GENERATORS[NAME]()``; benchmark blocks are filled from the
committed results by ``tests.benchmarks.render_readme``, the one renderer of benchmark tables.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from docsite import cli_reference, errors_reference, metrics_reference, settings_reference
from tests.benchmarks.render_readme import rendered as with_benchmarks

GENERATORS: dict[str, Callable[[], str]] = {
    "settings": settings_reference.render,
    "cli": cli_reference.render,
    "metrics": metrics_reference.render,
    "errors": errors_reference.render_errors,
    "poison-reasons": errors_reference.render_poison_reasons,
}

_MARKER = re.compile(r"^<!-- generated:(?P<name>[a-z-]+) -->$", re.MULTILINE)


class UnknownGeneratorError(ValueError):
    """A page names a generated block that no generator makes (a typo fails the build)."""


def markers(markdown: str) -> list[str]:
    """The generated blocks a page asks for, in order."""
    return [match["name"] for match in _MARKER.finditer(markdown)]


def render(markdown: str) -> str:
    """The page with every marker replaced by its generated Markdown and benchmarks filled in."""

    def generate(match: re.Match[str]) -> str:
        generator = GENERATORS.get(match["name"])
        if generator is None:
            raise UnknownGeneratorError(
                f"no generator for <!-- generated:{match['name']} -->: use one of "
                f"{', '.join(sorted(GENERATORS))}"
            )
        return generator()

    return with_benchmarks(_MARKER.sub(generate, markdown))
