"""Where each effective setting came from, and `cloudqueue config show` that prints it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cloudqueue.workers.cli import cli
from cloudqueue.workers.settings import ScalingSettings
from cloudqueue.workers.settings.sources import SettingValue, explain_settings

ACCOUNT_KEY = "c2VjcmV0LWtleS10aGF0LW11c3Qtbm90LWxlYWs="
CONNECTION_STRING = f"AccountName=acme;AccountKey={ACCOUNT_KEY};"
MASKED_CONNECTION_STRING = "AccountName=acme;AccountKey=***;"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty folder with no CLOUDQUEUE_* variables, so only the test's sources count."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("CLOUDQUEUE_"):
            monkeypatch.delenv(name)


def explained(config_file: Path | None = None, **overrides: Any) -> dict[str, SettingValue]:
    return {item.key: item for item in explain_settings(config_file, **overrides)}


def write_toml(path: Path, text: str = "[scaling]\nmax_threads = 3\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_every_field_is_listed_with_its_default_when_nothing_is_configured() -> None:
    """With no file and no environment, each dotted key reports its default value and source."""
    settings = explained()
    assert list(settings)[:3] == ["connection_string", "shutdown_grace_s", "state_dir"]
    assert {"listener.threads", "backoff.max_idle_s", "logging.format"} <= set(settings)
    assert settings["scaling.max_threads"] == SettingValue("scaling.max_threads", 16, "default")
    assert settings["scaling.steps"].value == [[0, 1], [100, 10], [1000, 50]]
    assert {item.source for item in settings.values()} == {"default"}


def test_a_toml_file_is_named_as_the_source_of_what_it_sets(tmp_path: Path) -> None:
    """Keys in the TOML file come from toml:<path>; the keys it leaves out stay defaults."""
    config = write_toml(tmp_path / "c.toml")
    settings = explained(config)
    assert settings["scaling.max_threads"] == SettingValue(
        "scaling.max_threads", 3, f"toml:{config}"
    )
    assert settings["scaling.min_threads"].source == "default"


def test_the_default_config_file_is_the_source_when_present() -> None:
    """config/cloudqueue.toml in the working folder is reported by its relative path."""
    write_toml(Path("config/cloudqueue.toml"))
    assert explained()["scaling.max_threads"].source == "toml:config/cloudqueue.toml"


def test_a_dotenv_file_is_reported_as_dotenv() -> None:
    """A CLOUDQUEUE_* line in .env is attributed to .env, with the value it sets."""
    Path(".env").write_text("CLOUDQUEUE_BACKOFF__MAX_IDLE_S=0.7\n")
    assert explained()["backoff.max_idle_s"] == SettingValue("backoff.max_idle_s", 0.7, ".env")


def test_an_environment_variable_is_reported_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A nested variable names itself; a section given as JSON names the section's variable."""
    monkeypatch.setenv("CLOUDQUEUE_SCALING__MAX_THREADS", "8")
    monkeypatch.setenv("CLOUDQUEUE_LOGGING", '{"level": "DEBUG"}')
    settings = explained()
    assert settings["scaling.max_threads"] == SettingValue(
        "scaling.max_threads", 8, "env:CLOUDQUEUE_SCALING__MAX_THREADS"
    )
    assert settings["logging.level"].source == "env:CLOUDQUEUE_LOGGING"
    assert settings["logging.format"].source == "default"


def test_overrides_are_reported_as_override() -> None:
    """Values passed in code win; a whole section passed as a model sets every key in it."""
    assert explained(shutdown_grace_s=5)["shutdown_grace_s"].source == "override"
    settings = explained(scaling=ScalingSettings(max_threads=4))
    assert settings["scaling.max_threads"] == SettingValue("scaling.max_threads", 4, "override")
    assert settings["scaling.rule"].source == "override"
    assert settings["backoff.max_idle_s"].source == "default"


def test_the_highest_priority_source_that_sets_a_key_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """override > environment > .env > TOML > default, and the value agrees with the source."""
    key = "scaling.max_threads"
    config = write_toml(tmp_path / "c.toml")
    Path(".env").write_text("CLOUDQUEUE_SCALING__MAX_THREADS=4\n")
    monkeypatch.setenv("CLOUDQUEUE_SCALING__MAX_THREADS", "5")
    overrides = {"scaling": {"max_threads": 6}}
    assert explained(config, **overrides)[key] == SettingValue(key, 6, "override")
    assert explained(config)[key] == SettingValue(key, 5, "env:CLOUDQUEUE_SCALING__MAX_THREADS")
    monkeypatch.delenv("CLOUDQUEUE_SCALING__MAX_THREADS")
    assert explained(config)[key] == SettingValue(key, 4, ".env")
    Path(".env").unlink()
    assert explained(config)[key] == SettingValue(key, 3, f"toml:{config}")
    assert explained()[key] == SettingValue(key, 16, "default")


def test_sections_merge_key_by_key_across_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A higher source setting one key of a section leaves the section's other keys where they
    were."""
    config = write_toml(tmp_path / "c.toml", "[scaling]\nmax_threads = 3\nmin_threads = 2\n")
    monkeypatch.setenv("CLOUDQUEUE_SCALING__MAX_THREADS", "5")
    settings = explained(config)
    assert settings["scaling.max_threads"].source == "env:CLOUDQUEUE_SCALING__MAX_THREADS"
    assert settings["scaling.min_threads"] == SettingValue(
        "scaling.min_threads", 2, f"toml:{config}"
    )


def test_the_connection_string_is_masked_whatever_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The account key is masked and the rest shown, whatever the source; never the secret."""
    config = write_toml(tmp_path / "c.toml", f'connection_string = "{CONNECTION_STRING}"\n')
    assert explained(config)["connection_string"].value == MASKED_CONNECTION_STRING
    monkeypatch.setenv("CLOUDQUEUE_CONNECTION_STRING", CONNECTION_STRING)
    result = explain_settings(config)
    assert result[0] == SettingValue(
        "connection_string", MASKED_CONNECTION_STRING, "env:CLOUDQUEUE_CONNECTION_STRING"
    )
    assert ACCOUNT_KEY not in repr(result)


@pytest.mark.parametrize(
    ("connection_string", "shown"),
    [
        ("memory://", "memory://"),
        ("sqlite:///data/q.db", "sqlite:///data/q.db"),
        ("sqlite:////var/lib/q.db", "sqlite:////var/lib/q.db"),
        (
            "QueueEndpoint=https://acme.queue.core.windows.net;SharedAccessSignature=sv=1&sig=abc",
            "QueueEndpoint=https://acme.queue.core.windows.net;SharedAccessSignature=***",
        ),
    ],
)
def test_config_show_masks_only_what_is_secret(
    monkeypatch: pytest.MonkeyPatch, connection_string: str, shown: str
) -> None:
    """memory:// and sqlite paths are shown in clear; a SAS is masked, the endpoint kept."""
    monkeypatch.setenv("CLOUDQUEUE_CONNECTION_STRING", connection_string)
    assert explained()["connection_string"].value == shown


def test_a_password_in_the_trigger_url_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis://user:password@host shows the user and host, not the password."""
    monkeypatch.setenv("CLOUDQUEUE_TRIGGERS__URL", "redis://app:hunter2@cache:6379/0")
    assert explained()["triggers.url"].value == "redis://app:***@cache:6379/0"


def show(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_config_show_prints_each_setting_with_its_source(tmp_path: Path) -> None:
    """One `key = value  # source` line per setting; --set values are overrides."""
    config = write_toml(tmp_path / "c.toml")
    env = {"CLOUDQUEUE_CONNECTION_STRING": CONNECTION_STRING, "CLOUDQUEUE_LOGGING__LEVEL": "DEBUG"}
    code, output = show(
        "--config", str(config), "config", "show", "--set", "shutdown_grace_s=5", env=env
    )
    assert code == 0, output
    lines = {line.split(" = ")[0]: line for line in output.splitlines()}
    assert len(lines) == len(explain_settings())
    assert lines["scaling.max_threads"].split()[2:] == ["3", "#", f"toml:{config}"]
    assert lines["logging.level"].endswith("# env:CLOUDQUEUE_LOGGING__LEVEL")
    assert lines["shutdown_grace_s"].split()[2:] == ["5.0", "#", "override"]
    assert lines["connection_string"].startswith(
        f"connection_string = {MASKED_CONNECTION_STRING!r}"
    )
    assert ACCOUNT_KEY not in output


def test_config_show_json_maps_each_key_to_value_and_source() -> None:
    """--json prints one object: {key: {"value": ..., "source": ...}}."""
    code, output = show("config", "show", "--json", env={"CLOUDQUEUE_SCALING__MAX_THREADS": "8"})
    assert code == 0, output
    report = json.loads(output)
    assert report["scaling.max_threads"] == {
        "value": 8,
        "source": "env:CLOUDQUEUE_SCALING__MAX_THREADS",
    }
    assert report["connection_string"] == {"value": None, "source": "default"}


def test_config_show_with_an_invalid_setting_exits_2_naming_the_field() -> None:
    """Invalid settings are reported as the other commands report them, before any listing."""
    code, output = show("config", "show", env={"CLOUDQUEUE_SCALING__MAX_THREADS": "0"})
    assert code == 2
    assert "scaling.max_threads" in output


@pytest.mark.parametrize(
    "url",
    [
        "redis://cache:6379/0?password=hunter2",
        "unix://:hunter2@/run/redis.sock?db=0",
        "unix:///run/redis.sock?password=hunter2",
    ],
)
def test_config_show_never_prints_a_redis_password_in_any_url_form(url: str) -> None:
    """A password in the query, or in a unix:// URL's userinfo, is masked like any other."""
    code, output = show("config", "show", "--json", env={"CLOUDQUEUE_TRIGGERS__URL": url})
    assert code == 0, output
    assert "hunter2" not in output
    assert json.loads(output)["triggers.url"]["value"].count("***") == 1
