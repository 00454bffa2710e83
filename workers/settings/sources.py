"""Where each effective setting came from: the answer behind ``cloudqueue config show``.

Every source layer of ``CloudQueueSettings`` is read on its own -- the values passed in code, the
environment, the ``.env`` file, the TOML file -- and each dotted key (``scaling.max_threads``) is
attributed to the highest-priority layer that defines it, else to its default. A worker class's
own ``settings`` sit above them all, as ``cloudqueue run`` applies them. The values come from the
validated settings, so they are exactly what a worker would run with. Only what is secret is
masked, by ``cloudqueue.listener.redaction``: an account key, a SAS, a URL's password or credential
query parameter (``***``); ``memory://`` and ``sqlite:///…`` are shown as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_settings import DotEnvSettingsSource, EnvSettingsSource, TomlConfigSettingsSource

from cloudqueue.listener.redaction import redact
from cloudqueue.workers.settings.files import config_file_path
from cloudqueue.workers.settings.keys import ENV_NESTED_DELIMITER, ENV_PREFIX
from cloudqueue.workers.settings.model import CloudQueueSettings, load_settings

DEFAULT = "default"
OVERRIDE = "override"
DOTENV = ".env"


@dataclass(frozen=True, slots=True)
class SettingValue:
    """One effective setting: its dotted key, its (JSON-compatible, masked) value, its source."""

    key: str
    value: Any
    source: str
    """``default``, ``toml:<path>``, ``.env``, ``env:<VARIABLE>`` or ``override``."""


@dataclass(frozen=True, slots=True)
class _Layer:
    """What one source defines (nested dicts, as pydantic-settings merges them) and its label."""

    values: Mapping[str, Any]
    label: Callable[[str], str]


@dataclass(frozen=True, slots=True)
class WorkerOverrides:
    """A worker class's own ``settings`` and how to name it (``module:Class``)."""

    target: str
    values: Mapping[str, Mapping[str, Any]]

    @property
    def source(self) -> str:
        return f"settings of {self.target}"


def explain_settings(
    config_file: Path | None = None, *, worker: WorkerOverrides | None = None, **overrides: Any
) -> list[SettingValue]:
    """Every effective setting with the source of its value; arguments as for ``load_settings``,
    and ``worker`` for one worker class's effective settings.

    Raises what ``load_settings`` and ``for_worker`` raise (``ValidationError``,
    ``ConfigurationError``).
    """
    settings = load_settings(config_file, **overrides)
    layers = _layers(config_file_path(config_file), overrides)
    if worker is not None:
        settings = settings.for_worker(worker.values, source=worker.source)
        layers.insert(0, _Layer(worker.values, lambda _: worker.source))
    values = settings.model_dump(mode="json")
    values["connection_string"] = settings.connection_string_value()
    values["triggers"]["url"] = settings.triggers.url_value()
    return [
        SettingValue(key, _shown(value), _source_of(key, layers)) for key, value in _flatten(values)
    ]


def _shown(value: Any) -> Any:
    """A value as ``config show`` prints it: every string through ``redact``, the one place that
    knows a secret's shape (a key, a SAS, a URL's password or credential parameter)."""
    return redact(value) if isinstance(value, str) else value


def _layers(toml_file: Path | None, overrides: Mapping[str, Any]) -> list[_Layer]:
    """The source layers, highest priority first (the order ``CloudQueueSettings`` merges them)."""
    env = EnvSettingsSource(CloudQueueSettings)
    dotenv = DotEnvSettingsSource(CloudQueueSettings)
    layers = [
        _Layer(overrides, lambda _: OVERRIDE),
        _Layer(env(), _env_label(env.env_vars)),
        _Layer(dotenv(), lambda _: DOTENV),
    ]
    if toml_file is not None:
        toml = TomlConfigSettingsSource(CloudQueueSettings, toml_file=toml_file)
        layers.append(_Layer(toml(), lambda _: f"toml:{toml_file}"))
    return layers


def _source_of(key: str, layers: Sequence[_Layer]) -> str:
    parts = key.split(".")
    for layer in layers:
        if _defines(layer.values, parts):
            return layer.label(key)
    return DEFAULT


def _defines(values: Any, parts: Sequence[str]) -> bool:
    """Whether nested ``values`` set the key; a non-dict on the way sets the whole section."""
    for part in parts:
        if not isinstance(values, Mapping):
            return True  # e.g. scaling=ScalingSettings(...) replaces every scaling.* key
        if part not in values:
            return False
        values = values[part]
    return True


def _env_label(env_vars: Mapping[str, str | None]) -> Callable[[str], str]:
    """Name the variable behind a key: ``CLOUDQUEUE_SCALING__MAX_THREADS``, or the section's
    ``CLOUDQUEUE_SCALING`` when that one holds the whole section as JSON."""
    present = {name.upper() for name in env_vars}

    def label(key: str) -> str:
        parts = key.upper().split(".")
        for depth in range(len(parts), 0, -1):
            name = ENV_PREFIX + ENV_NESTED_DELIMITER.join(parts[:depth])
            if name in present:
                return f"env:{name}"
        return "env"

    return label


def _flatten(values: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted keys and leaf values, in field order; lists are values, not sections."""
    for name, value in values.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{key}.")
        else:
            yield key, value


__all__ = ["SettingValue", "WorkerOverrides", "explain_settings"]
