"""Unknown setting names, caught where they come from, with the closest valid name.

A misspelt key (``scaling.maxthreads``, ``[scalling]``) would otherwise be dropped silently and the
worker would run on defaults. Every source is checked against the fields of ``CloudQueueSettings``
before its values are merged: ``--set`` flags, the TOML file, a worker class's ``settings``, the
``.env`` file and the environment. An unknown key is a ``ConfigurationError`` naming the source and
the key, e.g. ``unknown setting scaling.maxthreads in --set: did you mean scaling.max_threads?``.

The environment and ``.env`` are shared with other programs, but a ``CLOUDQUEUE_*`` name is meant
for us: one that names no setting (``CLOUDQUEUE_SCALNG__MAX_THREADS``,
``CLOUDQUEUE_CONECTION_STRING``) is refused the same way, with the closest variable name
(``check_environment_names``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, TypeGuard

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource, PydanticBaseSettingsSource

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import closest

ENV_PREFIX = "CLOUDQUEUE_"
ENV_NESTED_DELIMITER = "__"
NOT_SETTINGS = frozenset({"CONFIG", "CHILD"})
"""``CLOUDQUEUE_*`` variables that are not settings: the config file path, the supervisor's slot."""


def known_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every dotted key of ``model``: sections and their fields (``scaling``, ``scaling.rule``)."""
    for name, field in model.model_fields.items():
        yield f"{prefix}{name}"
        if _is_section(field.annotation):
            yield from known_keys(field.annotation, f"{prefix}{name}.")


def unknown_key_message(key: str, source: str, candidates: Iterable[str]) -> str:
    """``unknown setting KEY in SOURCE`` with the closest valid name, when there is one."""
    suggestion = closest(key, candidates)
    hint = f": did you mean {suggestion}?" if suggestion else ""
    return f"unknown setting {key} in {source}{hint}"


def check_keys(
    model: type[BaseModel],
    values: Mapping[str, Any],
    source: str | Callable[[str], str],
    *,
    prefix: str = "",
    sections: Collection[str] | None = None,
) -> None:
    """Raise ConfigurationError for the first key in nested ``values`` that ``model`` lacks.

    ``source`` names where the values came from, or derives that name from the dotted key (the
    environment names one variable per key). ``sections``, when given, are the only ones the
    closest valid name is looked for in (a worker's ``settings`` may set only some).
    """
    for name, value in values.items():
        key = f"{prefix}{name}"
        field = model.model_fields.get(name)
        if field is None:
            key = _first_leaf(key, value)  # [scalling] max_threads: name the whole key
            label = source(key) if callable(source) else source
            candidates = _all_keys(model, prefix)
            if sections is not None:
                candidates = [c for c in candidates if c.partition(".")[0] in sections]
            raise ConfigurationError(unknown_key_message(key, label, candidates))
        annotation = field.annotation
        if _is_section(annotation) and isinstance(value, Mapping):
            check_keys(annotation, value, source, prefix=f"{key}.")


class CheckedSource(PydanticBaseSettingsSource):
    """A settings source whose keys are checked (``check_keys``) before they are merged."""

    def __init__(
        self,
        source: PydanticBaseSettingsSource,
        label: str | Callable[[str], str],
        *,
        sections_only: bool = False,
    ) -> None:
        super().__init__(source.settings_cls)
        self._source = source
        self._label = label
        self._sections_only = sections_only

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        if isinstance(self._source, EnvSettingsSource):  # the environment, or the .env file
            where = self._label if isinstance(self._label, str) else "the environment"
            check_environment_names(self.settings_cls, self._source.env_vars, where)
        values = self._source()
        checked = values
        if self._sections_only:
            # A .env file also holds other programs' variables: only our sections are checked.
            fields = self.settings_cls.model_fields
            checked = {key: value for key, value in values.items() if key in fields}
        check_keys(self.settings_cls, checked, self._label)
        return values


def check_environment_names(model: type[BaseModel], names: Iterable[str], source: str) -> None:
    """Raise ConfigurationError for the first ``CLOUDQUEUE_*`` name whose first part is no setting
    (a misspelt field inside a known section is ``check_keys``'s to find)."""
    fields = set(model.model_fields)
    for name in names:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        first = upper.removeprefix(ENV_PREFIX).split(ENV_NESTED_DELIMITER)[0]
        if first.lower() in fields or first in NOT_SETTINGS:
            continue
        candidates = [env_name(key) for key in known_keys(model)]
        raise ConfigurationError(unknown_key_message(upper, source, candidates))


def env_label(key: str) -> str:
    """The environment variable that set a dotted key: ``env CLOUDQUEUE_SCALING__MAXTHREADS``."""
    return f"env {env_name(key)}"


def env_name(key: str) -> str:
    """The environment variable of a dotted key: ``CLOUDQUEUE_SCALING__MAX_THREADS``."""
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(key.upper().split("."))


def _is_section(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _first_leaf(key: str, value: Any) -> str:
    while isinstance(value, Mapping) and value:
        name, value = next(iter(value.items()))
        key = f"{key}.{name}"
    return key


def _all_keys(model: type[BaseModel], prefix: str) -> list[str]:
    return [f"{prefix}{key}" for key in known_keys(model)]


__all__ = [
    "CheckedSource",
    "check_environment_names",
    "check_keys",
    "closest",
    "env_label",
    "env_name",
    "known_keys",
    "unknown_key_message",
]
