"""Settings: sources in priority order, the shipped config files, and validation."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from listener.errors import ConfigurationError
from workers.settings import CloudQueueSettings, load_settings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty folder with no CLOUDQUEUE_* variables, so only the test's sources count."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("CLOUDQUEUE_"):
            monkeypatch.delenv(name)


def write_toml(path: Path, max_threads: int) -> Path:
    path.write_text(f"[scaling]\nmax_threads = {max_threads}\n")
    return path


def test_defaults_apply_when_nothing_is_configured() -> None:
    """With no file and no environment, the documented defaults hold."""
    settings = load_settings()
    assert (settings.scaling.max_threads, settings.backoff.max_idle_s) == (16, 1.5)


def test_each_source_overrides_the_ones_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """overrides > environment > .env > TOML file > defaults, one source at a time."""
    config = write_toml(tmp_path / "c.toml", 3)
    assert load_settings(config).scaling.max_threads == 3
    (tmp_path / ".env").write_text("CLOUDQUEUE_SCALING__MAX_THREADS=4\n")
    assert load_settings(config).scaling.max_threads == 4
    monkeypatch.setenv("CLOUDQUEUE_SCALING__MAX_THREADS", "5")
    assert load_settings(config).scaling.max_threads == 5
    assert load_settings(config, scaling={"max_threads": 6}).scaling.max_threads == 6


def test_the_default_config_file_is_read_when_present(tmp_path: Path) -> None:
    """config/cloudqueue.toml in the working folder is picked up without --config."""
    (tmp_path / "config").mkdir()
    write_toml(tmp_path / "config" / "cloudqueue.toml", 7)
    assert load_settings().scaling.max_threads == 7


def test_a_missing_config_file_is_a_configuration_error(tmp_path: Path) -> None:
    """Naming a file that does not exist fails loudly instead of silently using defaults."""
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    "name",
    [
        "cloudqueue.toml",
        "profiles/steps.toml",
        "profiles/drain_time.toml",
        "profiles/low_cost.toml",
    ],
)
def test_the_shipped_config_files_are_valid(name: str) -> None:
    """Every file under config/ loads and builds a scaling policy."""
    settings = load_settings(ROOT / "config" / name)
    assert settings.scaling_policy().max_threads == settings.scaling.max_threads


def test_the_shipped_default_file_restates_the_defaults(tmp_path: Path) -> None:
    """config/cloudqueue.toml documents the defaults: loading it changes nothing."""
    shutil.copy(ROOT / "config" / "cloudqueue.toml", tmp_path / "c.toml")
    assert load_settings(tmp_path / "c.toml") == CloudQueueSettings()


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("scaling", {"min_threads": 5, "max_threads": 2}),
        ("scaling", {"rule": "fastest"}),
        ("scaling", {"rule": "tests.nowhere:rule"}),
        ("backoff", {"max_idle_s": -1}),
        ("listener", {"dequeue_batch_size": 33}),
        ("listener", {"dequeue_batch_size": 0}),
    ],
)
def test_invalid_values_are_refused_naming_the_field(
    section: str, values: dict[str, object]
) -> None:
    """Invalid settings fail at load time with the offending section in the error."""
    with pytest.raises(ValidationError, match=section):
        load_settings(**{section: values})  # type: ignore[arg-type]
