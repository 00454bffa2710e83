"""The documentation site builds with ``mkdocs build --strict``, and its generated reference
pages name every setting, command, metric, error and poison reason the code has.

Strict mode fails the build on a broken link or anchor, a page missing from the navigation, a
snippet whose file or section is gone, or a marker no generator knows. The site is built once per
session into a temporary folder (a few seconds), from the repository root as ``mkdocs serve`` is.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cloudqueue.listener.poison.reasons import POISON_REASONS
from cloudqueue.workers.settings import CloudQueueSettings
from cloudqueue.workers.settings.keys import env_name, known_keys
from docsite import generated, settings_reference
from docsite.cells import plain
from docsite.cli_reference import command_paths
from docsite.errors_reference import description, error_types
from docsite.metrics_reference import metrics
from tests.benchmarks.render_readme import docs_blocks, render_block
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


def build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` from the repository root, as ``mkdocs serve`` runs."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(config),
            "-d",
            str(site_dir),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI and a developer build it."""
    target = tmp_path_factory.mktemp("site")
    built = build(ROOT / "mkdocs.yml", target)
    assert built.returncode == 0, built.stderr[-5000:]
    return target


def page_text(site: Path, page: str) -> str:
    """A built page's text, tags stripped and entities decoded, for searching."""
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def setting_keys() -> list[str]:
    """Every dotted key that holds a value (sections themselves excluded)."""
    sections = {
        name
        for name, field in CloudQueueSettings.model_fields.items()
        if isinstance(field.annotation, type)
        and issubclass(field.annotation, object)
        and hasattr(field.annotation, "model_fields")
    }
    return [key for key in known_keys(CloudQueueSettings) if key not in sections]


def test_every_setting_is_on_the_settings_page_with_its_environment_variable(site: Path) -> None:
    """Each key of the settings model, and the variable that sets it, is on the built page."""
    text = page_text(site, "reference/settings")
    missing = [key for key in setting_keys() if key not in text or env_name(key) not in text]
    assert missing == []
    assert len(setting_keys()) > 40


def test_every_command_is_on_the_command_line_page(site: Path) -> None:
    """Each click command, subcommands of groups included, has its section on the built page."""
    text = page_text(site, "reference/cli")
    missing = [" ".join(path) for path, _ in command_paths() if " ".join(path) not in text]
    assert missing == []
    assert "cloudqueue poison requeue" in text


def test_every_metric_is_on_the_metrics_page(site: Path) -> None:
    """Each family of the worker's Prometheus registry is on the built page, as scraped."""
    text = page_text(site, "reference/metrics")
    names = [metric.name for metric in metrics()]
    assert "cloudqueue_messages_total" in names
    assert [name for name in names if name not in text] == []


def test_every_error_and_poison_reason_is_on_the_errors_page(site: Path) -> None:
    """Each error type of listener.errors and each poison reason is on the built page, and
    every poison reason on the poison-queue page too (time_limit, give_up... included)."""
    text = page_text(site, "reference/errors")
    errors = [error.__name__ for _, error in error_types()]
    assert "PopReceiptMismatchError" in errors
    assert [name for name in [*errors, *POISON_REASONS] if name not in text] == []
    poison_page = page_text(site, "how-to/poison-queue")
    assert [reason for reason in POISON_REASONS if reason not in poison_page] == []


def missing_text(site: Path, page: str, texts: list[str]) -> list[str]:
    """The texts (made plain) that the built page does not show: lost to a tag, say."""
    shown = " ".join(page_text(site, page).split())
    return [text for text in map(plain, texts) if text not in shown]


def test_every_description_the_generators_write_reaches_the_built_page(site: Path) -> None:
    """Each setting's meaning and type, each error's docstring, each poison reason's meaning and
    each metric's help reads on its page as written: nothing between angle brackets is eaten as
    an HTML tag ("physical queues <queue>-p0", "give_up: <Type>: <message>")."""
    rows = [row for _, section in settings_reference.settings() for row in section]
    notes = settings_reference.toml_notes().sections
    assert missing_text(site, "reference/settings", [row.description for row in rows]) == []
    assert missing_text(site, "reference/settings", [row.type for row in rows]) == []
    assert missing_text(site, "reference/settings", list(notes.values())) == []
    errors = [description(error) for _, error in error_types()]
    assert missing_text(site, "reference/errors", errors) == []
    for page in ("reference/errors", "how-to/poison-queue"):
        assert missing_text(site, page, list(POISON_REASONS.values())) == [], page
    assert missing_text(site, "reference/metrics", [metric.help for metric in metrics()]) == []


def test_a_settings_type_reads_as_its_item_type_and_bounds() -> None:
    """A list of constrained numbers is "list of int ≥ 1", not "list of Annotated"."""
    [weights] = [
        row
        for _, section in settings_reference.settings()
        for row in section
        if row.key == "listener.weights"
    ]
    assert weights.type == "list of int ≥ 1 (optional)"


def table_cells(markdown: str) -> list[str]:
    """Every cell of the Markdown tables in ``markdown``, emphasis and code marks off."""
    cells: list[str] = []
    for line in markdown.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells.extend(re.sub(r"[*`]", "", cell).strip() for cell in line.strip("|").split("|"))
    return [cell for cell in cells if cell]


def test_the_performance_pages_show_every_committed_result(site: Path) -> None:
    """Each benchmark block is filled on its built page: every cell of its tables is there."""
    for name, pages in docs_blocks().items():
        cells = table_cells(render_block(name))
        assert cells, name
        for page in pages:
            text = page_text(site, str(page.relative_to(ROOT / "docs").with_suffix("")))
            assert [cell for cell in cells if cell not in text] == [], (name, page)


def test_the_api_reference_documents_the_public_names(site: Path) -> None:
    """mkdocstrings renders every name of the package roots' __all__."""
    from cloudqueue import listener, workers

    for package, page in ((listener, "reference/api-listener"), (workers, "reference/api-workers")):
        text = page_text(site, page)
        assert [name for name in package.__all__ if name not in text] == []


ROOT_PAGES = ("api-worker", "api-producer", "api-middleware", "api-settings")


def test_each_name_of_the_root_has_a_heading_on_a_page_of_its_own_kind(site: Path) -> None:
    """``from cloudqueue import X``: X is a heading on the worker, producer, middleware or settings
    page, and ``cloudqueue.testing``'s names on the testing page."""
    import cloudqueue
    import cloudqueue.testing

    headings = {
        page: re.findall(
            r'<h2 id="cloudqueue\.(\w+)"', (site / "reference" / page / "index.html").read_text()
        )
        for page in ROOT_PAGES
    }
    shown = [name for names in headings.values() for name in names]
    assert sorted(shown) == sorted(cloudqueue.__all__)
    testing = page_text(site, "reference/api-testing")
    assert [name for name in cloudqueue.testing.__all__ if name not in testing] == []


def test_the_worker_page_lists_no_library_internals(site: Path) -> None:
    """Inherited pydantic members (``model_config``, ``settings_customise_sources``) stay hidden."""
    for page in ROOT_PAGES:
        text = page_text(site, f"reference/{page}")
        assert "model_config" not in text
        assert "settings_customise_sources" not in text


def test_the_settings_reference_names_a_type_default_and_meaning_for_every_key() -> None:
    """No row of the generated settings table is left without a type, a default or a meaning."""
    rows = [row for _, section in settings_reference.settings() for row in section]
    assert {row.key for row in rows} == set(setting_keys())
    assert [row.key for row in rows if not (row.type and row.default and row.description)] == []


def test_a_marker_without_a_generator_fails_the_build() -> None:
    """A misspelt generated marker is an error naming the known ones, not an empty section."""
    with pytest.raises(generated.UnknownGeneratorError, match="settings"):
        generated.render("<!-- generated:setings -->\n")


def test_a_broken_link_or_a_page_outside_the_nav_fails_the_build(tmp_path: Path) -> None:
    """The site's own configuration, on pages with a dead link and an orphan page, refuses them."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (docs / "orphan.md").write_text("# Not in the navigation\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nnav:\n  - index.md\n"
        f"hooks:\n  - {ROOT / 'docs' / 'docsite' / 'hooks.py'}\n"
    )
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    warnings = result.stderr.split("WARNING")[1:]  # each warning with its continuation lines
    assert any("missing.md" in warning for warning in warnings), result.stderr
    assert any("orphan.md" in warning for warning in warnings), result.stderr


def test_the_home_page_links_a_first_worker_entra_id_and_keda(site: Path) -> None:
    """The three things newcomers ask first are one click from the home page."""
    home = (site / "index.html").read_text(encoding="utf-8")
    for target in (
        'href="getting-started/quick-start/#your-first-worker"',
        'href="how-to/entra-id/"',
        'href="how-to/kubernetes/"',
    ):
        assert target in home


def test_the_home_page_links_every_how_to(site: Path) -> None:
    """The how-to row of the home page's table links each how-to page, not just the first."""
    home = (site / "index.html").read_text(encoding="utf-8")
    pages = sorted(path.stem for path in (ROOT / "docs" / "how-to").glob("*.md"))
    assert [page for page in pages if f'href="how-to/{page}/"' not in home] == []


def test_the_readme_fits_on_a_few_screens_and_its_links_resolve() -> None:
    """At most 300 lines, and every relative link points at a file of the repository."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert "docs/how-to/producing.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_the_readme_manual_table_links_every_page_of_the_site() -> None:
    """A page added to the site is found from the README too (the README is the map, not the
    manual): every page under docs/ but the home page is linked from it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "docs").glob("*/*.md")
        if path.parent.name != "docsite"
    )
    assert pages
    assert [page for page in pages if f"]({page})" not in readme] == []
