"""Settings: sources in priority order, the shipped config files, and validation."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.policies.scaling_rules import ScalingInput
from cloudqueue.listener.queue_limits import MAX_VISIBILITY_TIMEOUT_S
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.workers.settings import CloudQueueSettings, ScalingSettings, load_settings
from cloudqueue.workers.settings.keys import known_keys
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


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


def documented_keys(text: str) -> set[str]:
    """The dotted keys a settings file shows, set or commented out (``# key = value``)."""
    keys: set[str] = set()
    section = ""
    for line in text.splitlines():
        if header := re.fullmatch(r"\[([\w.]+)\]\s*(#.*)?", line.strip()):
            section = f"{header.group(1)}."
            keys.add(header.group(1))
        elif assignment := re.match(r"#?\s*(\w+)\s*=", line.strip()):
            keys.add(f"{section}{assignment.group(1)}")
    return keys


def test_the_shipped_default_file_lists_every_setting() -> None:
    """Every section and field of the settings model appears in config/cloudqueue.toml."""
    documented = documented_keys((ROOT / "config" / "cloudqueue.toml").read_text())
    missing = [key for key in known_keys(CloudQueueSettings) if key not in documented]
    assert not missing, f"config/cloudqueue.toml does not list {missing}"


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("scaling", {"min_threads": 5, "max_threads": 2}),
        ("scaling", {"rule": "fastest"}),
        ("scaling", {"rule": "tests nowhere:rule"}),
        ("backoff", {"max_idle_s": -1}),
        ("listener", {"dequeue_batch_size": 33}),
        ("listener", {"dequeue_batch_size": 0}),
        ("listener", {"loop_blocked_after_s": 0}),
        ("rate_limit", {"fleet_max_waiting": 0}),
    ],
)
def test_invalid_values_are_refused_naming_the_field(
    section: str, values: dict[str, object]
) -> None:
    """Invalid settings fail at load time with the offending section in the error."""
    with pytest.raises(ValidationError, match=section):
        load_settings(**{section: values})  # type: ignore[arg-type]


def test_a_custom_rule_is_imported_when_built_not_when_loaded() -> None:
    """Loading checks the rule's form only; building it (`cloudqueue run`) imports it, and a
    missing module is then an error naming the field."""
    settings = load_settings(scaling={"rule": "tests.nowhere:rule"})
    with pytest.raises(ConfigurationError, match=r"scaling\.rule: cannot import custom rule"):
        settings.scaling.build_rule()


@pytest.mark.parametrize("field", ["retry_delay_s", "max_retry_delay_s", "visibility_timeout_s"])
def test_delays_that_become_visibility_timeouts_stop_at_the_services_7_days(field: str) -> None:
    """Past 7 days Azure refuses the timeout at run time; the setting is refused at load time."""
    assert load_settings(listener={field: MAX_VISIBILITY_TIMEOUT_S})
    with pytest.raises(ValidationError, match=field):
        load_settings(listener={field: MAX_VISIBILITY_TIMEOUT_S + 1})


def test_the_policies_defaults_are_the_settings_defaults() -> None:
    """ScalingPolicy() and DeliveryPolicy() (library users) behave as default settings (CLI)."""
    settings = CloudQueueSettings()
    assert settings.delivery_policy() == DeliveryPolicy()
    from_settings = dataclasses.asdict(settings.scaling_policy())
    defaults = dataclasses.asdict(ScalingPolicy())
    rules = [policy.pop("rule") for policy in (from_settings, defaults)]  # closures
    assert from_settings == defaults
    for depth in (0, 1, 31, 32, 33, 1000):
        load = ScalingInput(depth=depth, active_threads=1, per_thread_rate_per_s=None)
        assert rules[0](load) == rules[1](load)


def test_a_misspelt_key_in_the_env_file_is_refused_and_other_programs_variables_ignored(
    tmp_path: Path,
) -> None:
    """.env is shared: DATABASE_URL is none of ours, CLOUDQUEUE_SCALING__MAXTHREADS is a typo."""
    (tmp_path / ".env").write_text("DATABASE_URL=postgres://x\nCLOUDQUEUE_SCALING__MAX_THREADS=4\n")
    assert load_settings().scaling.max_threads == 4
    (tmp_path / ".env").write_text("CLOUDQUEUE_SCALING__MAXTHREADS=4\n")
    with pytest.raises(ConfigurationError, match=r"scaling\.maxthreads in \.env: did you mean"):
        load_settings()


def test_a_misspelt_section_in_code_is_refused_with_the_closest_name() -> None:
    """Sections built in code reject unknown fields too (no silent default)."""
    with pytest.raises(ValidationError, match="max_thread"):
        ScalingSettings(max_thread=2)  # type: ignore[call-arg]
